"""A corpus: the regular text files under a root matching globs, split train / held-out by
a hash of each relative path; a bad file is one line naming it (docs/training.md "Corpora")."""
from __future__ import annotations

import hashlib
import os
import stat
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from sparktrain.core.errors import SparkError, printable
from sparktrain.core.fsutil import sha256_bytes, size_cap, utf8_name

STDLIB = "@stdlib"  # the default proof corpus: the running interpreter's standard library
MAX_FILE_BYTES = 64 << 20  # one source file above this is a mistake, not code
MAX_FILES = 100_000        # paths one glob may match


@dataclass(frozen=True)
class CorpusFile:
    path: str        # relative to the corpus root, POSIX
    size: int        # bytes
    sha256: str
    heldout: bool
    text: str

    def record(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256,
                "split": "heldout" if self.heldout else "train"}


@dataclass(frozen=True)
class Corpus:
    root: str                      # as the user named it (STDLIB stays STDLIB)
    patterns: tuple[str, ...]
    heldout_fraction: float
    files: tuple[CorpusFile, ...]  # sorted by path

    @property
    def train(self) -> tuple[CorpusFile, ...]:
        return tuple(f for f in self.files if not f.heldout)

    @property
    def heldout(self) -> tuple[CorpusFile, ...]:
        return tuple(f for f in self.files if f.heldout)

    def manifest(self) -> dict:
        """What was read, for DVC and the checkpoint: sizes and sha256 per file."""
        train, held = self.train, self.heldout
        return {"root": self.root, "patterns": list(self.patterns),
                "heldout_fraction": self.heldout_fraction,
                "files": [f.record() for f in self.files],
                "train_files": len(train), "heldout_files": len(held),
                "train_bytes": sum(f.size for f in train),
                "heldout_bytes": sum(f.size for f in held),
                "sha256": manifest_sha256(self.files)}


def manifest_sha256(files) -> str:
    """One hash of the whole corpus: each file's path, split and content hash."""
    lines = "".join(f"{f.path}\t{'heldout' if f.heldout else 'train'}\t{f.sha256}\n"
                    for f in files)
    return sha256_bytes(lines.encode("utf-8"))


def resolve_root(root: str) -> Path:
    """`@stdlib` is the running interpreter's standard library; anything else a folder."""
    path = Path(sysconfig.get_paths()["stdlib"]) if root == STDLIB else Path(root)
    if not path.is_dir():
        what = "the interpreter's standard library" if root == STDLIB else "the corpus root"
        raise SparkError(f"corpus root {root} is not a folder ({what} must be one)")
    return path


def is_heldout(rel_path: str, fraction: float) -> bool:
    """Held out when the path's hash, as a number in [0, 1), is below `fraction`."""
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < fraction


def match_files(root: Path, patterns) -> list[str]:
    """Relative POSIX paths under `root` matched by any pattern, sorted, no folders."""
    if not patterns:
        raise SparkError("corpus: no glob pattern given (e.g. '**/*.py')")
    found: set[str] = set()
    for pattern in patterns:
        if not isinstance(pattern, str) or not Path(pattern).parts \
                or Path(pattern).is_absolute() or ".." in Path(pattern).parts:  # "" or "."
            raise SparkError(f"corpus glob {pattern!r} must be a relative pattern inside "
                             f"the root (e.g. '**/*.py')")
        matched = []
        try:
            for path in root.glob(pattern):  # the first MAX_FILES: a glob is not a crawl
                matched.append(path)
                if len(matched) > MAX_FILES:
                    raise SparkError(f"corpus glob {printable(pattern)[:80]!r} matches over "
                                     f"{MAX_FILES:,} paths; narrow it")
        except (ValueError, OSError, RecursionError, IndexError) as err:  # malformed, a loop
            raise SparkError(f"corpus glob {printable(pattern)[:80]!r}: {_reason(err)}") from None
        for path in matched:
            try:
                mode = os.stat(path).st_mode  # follows links: a link to a FIFO is a FIFO
            except OSError as err:
                raise SparkError(f"corpus file {path.relative_to(root).as_posix()}: "
                                 f"cannot stat ({err.strerror or err})") from None
            if stat.S_ISDIR(mode):
                continue
            rel = utf8_name(path.relative_to(root).as_posix(), "corpus file")
            if not stat.S_ISREG(mode):
                raise SparkError(f"corpus file {rel} is not a regular file (a FIFO, socket "
                                 f"or device); narrow the glob")
            found.add(rel)
    return sorted(found)


def _reason(err: Exception) -> str:
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return str(err).splitlines()[0][:120] if str(err) else type(err).__name__


def check_total(root: Path, rels: list[str]) -> None:
    """The corpus's total size against its cap, from stat, before a byte is read."""
    cap = size_cap("corpus")
    total = sum(os.stat(root / rel).st_size for rel in rels)
    if cap is not None and total > cap:
        raise SparkError(f"corpus is {total:,} bytes in {len(rels):,} files, above the "
                         f"{cap:,}-byte limit (SPARK_MAX_CORPUS_MB raises it)")


def read_text_file(root: Path, rel: str) -> tuple[bytes, str]:
    try:
        with open(root / rel, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise SparkError(f"corpus file {rel}: cannot read ({err.strerror or err})") from None
    if len(data) > MAX_FILE_BYTES:
        raise SparkError(f"corpus file {rel} is over {MAX_FILE_BYTES >> 20} MiB; "
                         f"narrow the glob")
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SparkError(f"corpus file {rel} is not UTF-8 (bad byte at offset "
                         f"{err.start}); narrow the glob or convert it") from None


def read_corpus(root: str, patterns, heldout_fraction: float) -> Corpus:
    """Every matched file, read and split; SparkError (one line) on the first bad one."""
    if not 0 < heldout_fraction < 1:
        raise SparkError(f"corpus heldout fraction must be in (0, 1), got {heldout_fraction}")
    base = resolve_root(root)
    patterns = tuple(patterns) if not isinstance(patterns, str) else (patterns,)
    rels = match_files(base, patterns)
    if not rels:
        raise SparkError(f"corpus glob {', '.join(patterns)} matches no file under {root}")
    check_total(base, rels)
    files = []
    for rel in rels:
        data, text = read_text_file(base, rel)
        files.append(CorpusFile(rel, len(data), sha256_bytes(data),
                                is_heldout(rel, heldout_fraction), text))
    return check_splits(Corpus(root, patterns, heldout_fraction, tuple(files)),
                        f"corpus {root} ({', '.join(patterns)})", "files",
                        "add files or change the heldout fraction")


def check_splits(corpus: Corpus, what: str, unit: str, fix: str) -> Corpus:
    """`corpus`, when both splits hold some text; else one line saying which is empty."""
    for split, chosen in (("train", corpus.train), ("held-out", corpus.heldout)):
        if not any(f.size for f in chosen):
            raise SparkError(f"{what}: the {split} split is empty ({len(corpus.files)} "
                             f"{unit}); {fix}")
    return corpus
