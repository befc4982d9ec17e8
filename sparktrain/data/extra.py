"""More train text from the locked environment: corpus.extra's globs under the running
interpreter's site-packages (the .venv built from requirements.lock), added to a corpus's
train split only. Its held-out split stays the same files, byte for byte; an extra file that
repeats a file already read, or copies a held-out one, is dropped and counted
(docs/training.md "Corpora, tokenizers and bits per byte")."""
from __future__ import annotations

import dataclasses
import os
import sysconfig
from collections import Counter
from pathlib import Path

from sparktrain.data.corpus import (Corpus, CorpusFile, manifest_sha256, match_files,
                                    read_text_file)
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import sha256_bytes, size_cap

SITE = "@site"  # an extra file's path in files.json: @site/<its path under site-packages>
# folders whose files are not the package's own plain code: its tests, vendored copies
SKIPPED = frozenset({"test", "tests", "testing", "_vendor", "vendor", "vendored", "_vendored",
                     "extern", "_distutils"})
MIN_LINE = 8      # characters of a normalised line that count towards a near copy
NEAR_SHARE = 0.5  # a near copy shares this part of the shorter file's distinct lines ...
NEAR_LINES = 20   # ... and at least this many of them


def site_root() -> Path:
    """The running interpreter's site-packages (purelib)."""
    return Path(sysconfig.get_paths()["purelib"])


def norm_lines(text: str) -> set[str]:
    """The file's distinct lines, whitespace runs made one space, the short ones left out."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return {line for line in lines if len(line) >= MIN_LINE}


def norm_text(text: str) -> str:
    """The text with every run of whitespace removed: equal for a re-indented copy."""
    return "".join(text.split())


class HeldoutIndex:
    """The held-out files' normalised texts and lines: which file an extra one copies."""

    def __init__(self, heldout: tuple[CorpusFile, ...]):
        self.paths = [f.path for f in heldout]
        self.texts = {sha256_bytes(norm_text(f.text).encode("utf-8")): f.path for f in heldout}
        self.sizes, self.owners = [], {}
        for i, f in enumerate(heldout):
            lines = norm_lines(f.text)
            self.sizes.append(len(lines))
            for line in lines:
                self.owners.setdefault(line, []).append(i)

    def copied(self, text: str) -> str | None:
        """The held-out file `text` is a (near) copy of, or None (an empty text copies none:
        an empty file is a duplicate at most)."""
        norm = norm_text(text)
        if norm and (same := self.texts.get(sha256_bytes(norm.encode("utf-8")))) is not None:
            return same
        lines = norm_lines(text)
        shared = Counter(i for line in lines for i in self.owners.get(line, ()))
        for i, n in sorted(shared.items()):
            if n >= NEAR_LINES and n >= NEAR_SHARE * min(len(lines), self.sizes[i]):
                return self.paths[i]
        return None


def with_extra(corpus: Corpus, patterns, root: Path | None = None) -> Corpus:
    """`corpus` with the files of `patterns` under `root` (site-packages) in its train split,
    sorted by path; unchanged when there are no patterns."""
    if not patterns:
        return corpus
    base = site_root() if root is None else root
    if not base.is_dir():
        raise SparkError(f"corpus.extra: site-packages {base} is not a folder")
    patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    rels = match_files(base, patterns)
    kept = [rel for rel in rels if not SKIPPED & set(rel.split("/")[:-1])]
    if not kept:
        raise SparkError(f"corpus.extra {', '.join(patterns)} matches no file under "
                         f"site-packages (tests and vendored folders left out)")
    check_cap(corpus, base, kept)
    index, seen = HeldoutIndex(corpus.heldout), {f.sha256 for f in corpus.files}
    added, duplicates, copies = [], 0, []
    for rel in kept:
        data, text = read_text_file(base, rel)
        digest, path = sha256_bytes(data), f"{SITE}/{rel}"
        copy = index.copied(text)
        if copy is not None:
            copies.append(f"{path} ~ {copy}")
        elif digest in seen:
            duplicates += 1
        else:
            seen.add(digest)
            added.append(CorpusFile(path, len(data), digest, False, text))
    record = {"root": SITE, "patterns": list(patterns), "files": len(added),
              "bytes": sum(f.size for f in added), "sha256": manifest_sha256(added),
              "skipped_tests_vendored": len(rels) - len(kept), "duplicates": duplicates,
              "heldout_copies": copies}
    files = tuple(sorted(corpus.files + tuple(added), key=lambda f: f.path))
    return dataclasses.replace(corpus, files=files, extra=record)


def check_cap(corpus: Corpus, base: Path, rels: list[str]) -> None:
    """The corpus and its extra files together against the corpus cap, before a byte is read."""
    cap = size_cap("corpus")
    total = sum(f.size for f in corpus.files) + sum(os.stat(base / r).st_size for r in rels)
    if cap is not None and total > cap:
        raise SparkError(f"corpus with corpus.extra is {total:,} bytes, above the {cap:,}-byte "
                         f"limit (SPARK_MAX_CORPUS_MB raises it)")
