"""Where a command may write: one gate, an allowlist of new paths and outputs this tool made,
judged at the resolved place (docs/outputs.md, "The output gate" and "Links")."""
from __future__ import annotations

import contextlib
import functools
import os
import stat
import subprocess
from pathlib import Path

from sparktrain.core.errors import SparkError, printable
from sparktrain.core.fsutil import canonical_json, is_temp, kind_of
from sparktrain.core.jobfiles import (ARTIFACT, CHECKPOINT, CORPUS, JOB_NAMES, LIVE_DIR, LOCK,
                                      PROGRAM, STATUS, TOKENIZER, WEIGHTS, root_of)

NAME_MAX = 255  # bytes of one path component on the file systems we run on
JOB_MARKERS = (CHECKPOINT, ARTIFACT)
# a folder holding one of these was made by a spark command (the stage or job writers)
JOB_OWNED = frozenset({PROGRAM, TOKENIZER, STATUS, WEIGHTS, CHECKPOINT, ARTIFACT, LOCK})
# README.md: the model card (export/card.py CARD_FILE)
HF_NAMES = frozenset({"config.json", "generation_config.json", "model.safetensors", TOKENIZER,
                      "tokenizer_config.json", "README.md"})
# project sources too: X.sparkbc compiled beside its tracked X.spark (docs/outputs.md)
SOURCE_KINDS = ("sparkbc",)
INTERNALS = (".git", ".dvc")  # a project's machinery: never an output, never inside one
# a report's first line is REPORT_MARK (`spark ci-report`, repro/cireport.py)
REPORT_MARK = b"<!-- spark ci-report -->"
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "gguf": b"GGUF", "sparkbc": b"SPBC",
         "report": REPORT_MARK}
FILE_KINDS = ("png", "gguf", "sparkbc", "safetensors", "json", "report")
FOLDER_KINDS = ("hf", "job")
# exports and imports: never inside a job folder, whose files the pipeline commits together
ARTIFACT_KINDS = ("gguf", "safetensors", "hf")
JSON_CAP = 64 << 20  # an existing JSON output is re-read to tell its layout; no bigger
GIT_TIMEOUT = 30  # seconds for the one `git ls-files` of a repository, per process
GITLINK = "160000"  # git's mode of a submodule entry


def check_output(path: str | os.PathLike, kind: str, inputs: tuple = ()) -> Path:
    """The path to write `path` as a `kind` output (FILE_KINDS, FOLDER_KINDS) at, never
    one of `inputs` (None skipped), else one SparkError line: `path` itself, or the
    resolved place judged when a link is on its way (write there, never re-resolve)."""
    if kind not in FILE_KINDS + FOLDER_KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    path = Path(path)
    name = printable(os.fspath(path))
    try:
        return _check(path, name, kind, [Path(i) for i in inputs if i is not None])
    except OSError as err:  # a name too long, a loop of links, a folder we may not list
        raise SparkError(f"cannot write {name}: {err.strerror or err}") from None


def check_target(path: str | os.PathLike, force: bool, kind: str, inputs: tuple = ()) -> Path:
    """check_output (a new path, or a `kind` output this tool wrote, never a device, link,
    tracked file or one of `inputs`), after the rule of `spark export` and `spark import`:
    something that holds data is replaced only with --force."""
    path = Path(path)
    if not force and not path.is_symlink():  # what holds data needs --force, then the gate
        if path.is_dir() and kind in ("hf", "job") and any(path.iterdir()):
            raise SparkError(f"{os.fspath(path)} exists and is not empty; "
                             "pass --force to replace it")
        elif path.is_file():
            raise SparkError(f"{os.fspath(path)} exists; pass --force to replace it")
    return check_output(path, kind, inputs)


def _check(path: Path, name: str, kind: str, inputs: list[Path]) -> Path:
    long = next((p for p in path.parts if len(os.fsencode(p)) > NAME_MAX), None)
    if long is not None:
        raise SparkError(f"cannot write {name[:80]}...: a name of {len(os.fsencode(long))} "
                         f"bytes, above the {NAME_MAX}-byte file-name limit")
    st = None  # missing, or an ancestor that is a file: below
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        st = os.lstat(path)
    if st is not None and stat.S_ISLNK(st.st_mode):  # the output itself: never followed
        raise SparkError(f"refusing to write {name}: it is a symbolic link (to "
                         f"{printable(os.readlink(path))}); name the real path")
    try:  # where `path` really lands: every existing component resolved, links included
        real = Path(os.path.realpath(path, strict=False))
    except (OSError, RuntimeError, ValueError) as err:
        raise SparkError(f"cannot write {name}: {err}") from None
    if Path(os.path.abspath(path)) != real and kind == "job":
        raise SparkError(f"refusing to write {name}: a job folder is never reached through a "
                         f"link, and this path resolves to {printable(os.fspath(real))}; "
                         "name the real path")
    if st is not None and stat.S_ISDIR(st.st_mode) and kind in FILE_KINDS:
        raise SparkError(f"cannot write {name}: it is a folder; give a file name")
    _check_project(real, name, kind, inputs)
    for item in inputs:
        source = Path(os.path.realpath(item))
        same = False
        with contextlib.suppress(OSError):
            same = os.path.samefile(item, real)
        if source == real or real in source.parents or same:
            raise SparkError(f"refusing to write {name}: it is (or holds) "
                             f"{printable(os.fspath(item))}, which this command reads")
    if kind in ARTIFACT_KINDS:
        _check_not_in_job(real, name, ", whose files the pipeline commits together; write "
                                      "elsewhere")
    if st is not None:
        _check_existing(real, name, kind, st)
    else:  # a new path: its nearest existing folder is a real folder
        for ancestor in real.parents:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                up = os.stat(ancestor)
                break
        if not stat.S_ISDIR(up.st_mode):
            raise SparkError(f"cannot write {name}: {printable(os.fspath(ancestor))} is "
                             f"{kind_of(up.st_mode)}, not a folder")
    return path if Path(os.path.abspath(path)) == real else real


def _check_not_in_job(real: Path, name: str, why: str = "") -> None:
    """Exports, imports and job folders never land in a job folder (its journal writes it)."""
    job = next((p for p in real.parents if any((p / m).is_file() for m in JOB_MARKERS)), None)
    if job is not None:
        raise SparkError(f"cannot write {name}: it is inside the job folder "
                         f"{printable(os.fspath(job))}{why}")


def _check_existing(path: Path, name: str, kind: str, st: os.stat_result) -> None:
    mode = st.st_mode
    if kind in FOLDER_KINDS:
        if not stat.S_ISDIR(mode):
            raise SparkError(f"refusing to write {name}: it is {kind_of(mode)}, and the "
                             f"output is a folder")
        _check_folder(path, name, kind)
        return
    if not stat.S_ISREG(mode):
        raise SparkError(f"refusing to write {name}: it is {kind_of(mode)}, not a regular "
                         f"file (give a file name)")
    if st.st_size and not _made_by_us(path, kind, st.st_size):
        raise SparkError(f"refusing to replace {name}: it is not a {_KIND_WORDS[kind]} this "
                         f"tool wrote; choose a new name")


def _check_folder(path: Path, name: str, kind: str) -> None:
    names = set(os.listdir(path))
    if not names:
        return
    allowed = HF_NAMES if kind == "hf" else JOB_NAMES
    foreign = sorted(n for n in names if n not in allowed and not is_temp(n))
    if kind == "job" and names & JOB_OWNED:
        foreign = []  # a job folder we made; files a user put beside ours are never touched
    if kind == "hf" and not foreign:
        foreign = sorted(n for n in names if not is_temp(n) and not _hf_entry(path / n, n))
    if foreign or (kind == "hf" and "config.json" not in names):
        what = "an exported Hugging Face folder" if kind == "hf" else "a job folder"
        shown = ", ".join(printable(n) for n in foreign[:3]) or "no config.json"
        raise SparkError(f"refusing to replace {name}: it is not {what} this tool wrote "
                         f"(it holds {shown}); choose a new or empty folder")
    for entry in names & {LIVE_DIR, CORPUS}:  # folders a job owns: real folders, no links
        if not (path / entry).is_dir() or (path / entry).is_symlink():
            raise SparkError(f"refusing to write {name}: its {entry} is not a folder this "
                             f"tool made (a file or a link); move it away")


HF_JSON = ("config.json", "generation_config.json", "tokenizer_config.json", TOKENIZER)
HF_CONFIG_KEYS = ("architectures", "spark_metadata")  # export/hf.py hf_config's own keys
CARD_HEAD = b"---\nlibrary_name: transformers\n"  # export/card.py's front matter


def _hf_entry(path: Path, entry: str) -> bool:
    """A regular file of the layout export/hf.py writes under the name `entry`."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if entry == "model.safetensors":
        return st.st_size >= 8 and _safetensors_header(path, st.st_size) is not None
    if entry in ("README.md", TOKENIZER):  # the tokenizer: the library's layout, not canonical
        head = CARD_HEAD if entry == "README.md" else b"{"
        with open(path, "rb") as f:
            return f.read(len(head)) == head
    if entry in HF_JSON:
        doc = _canonical_doc(path, st.st_size)
        return isinstance(doc, dict) and (entry != "config.json"
                                          or all(k in doc for k in HF_CONFIG_KEYS))
    return False


def _safetensors_header(path: Path, size: int) -> bytes | None:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 2 <= n <= min(size - 8, 100 << 20):
            return None
        header = f.read(n)
    return header if header.startswith(b"{") else None


def _canonical_doc(path: Path, size: int):
    """The JSON in `path` when it is canonical JSON (as core/fsutil.py writes), else None."""
    if size > JSON_CAP:
        return None
    from sparktrain.core.safeload import load_json

    text = path.read_bytes()
    try:
        doc = load_json(text, os.fspath(path))
        return doc if canonical_json(doc).encode() == text else None
    except (SparkError, ValueError):
        return None


def _made_by_us(path: Path, kind: str, size: int) -> bool:
    if kind in MAGIC:
        with open(path, "rb") as f:
            return f.read(len(MAGIC[kind])) == MAGIC[kind]
    if kind == "safetensors":
        header = _safetensors_header(path, size)
        return header is not None and b'"__metadata__"' in header and b'"spark"' in header
    return _canonical_doc(path, size) is not None


_KIND_WORDS = {"png": "PNG", "gguf": "GGUF file", "sparkbc": "SPARK_BC program",
               "safetensors": "Spark weights file", "json": "canonical JSON file",
               "report": "report"}


def _check_project(real: Path, name: str, kind: str, inputs: list[Path]) -> None:
    """Not a project's machinery or root, not git-tracked (file, tree, submodule), and a
    job folder not inside another job folder."""
    roots = _enclosing_roots(real)  # the innermost first
    for part in real.relative_to(roots[0]).parts if roots else ():
        if part in INTERNALS:
            raise SparkError(f"refusing to write {name}: it is inside a {part}/ folder "
                             "(the project's machinery)")
    if os.path.isdir(real) and root_of(real, git=True) == real:
        raise SparkError(f"refusing to write {name}: it is (or holds) the project folder")
    for top in roots:
        rel = real.relative_to(top).as_posix()
        files, links = _git_index(top)
        link = next((g for g in links if rel == g or rel.startswith(g + "/")), None)
        if link is not None:
            raise SparkError(f"refusing to write {name}: it is inside the git submodule "
                             f"{printable(link)}/ of the project; write under out/")
        if os.path.lexists(real):
            if rel in files and kind in SOURCE_KINDS and any(  # recompiled beside its .spark
                    Path(os.path.realpath(i)).with_suffix(".sparkbc") == real for i in inputs):
                continue
            if rel in files or any(f.startswith(rel + "/") for f in files):
                raise SparkError(f"refusing to write {name}: it is (or holds) a file git "
                                 "tracks in the project; write under out/ or another new path")
            continue
        if kind in SOURCE_KINDS:  # a new program may sit beside the tracked sources
            continue
        folder = next(p for p in real.parents if p.is_dir())
        sub = folder.relative_to(top).as_posix() if folder != top else ""
        if sub and any(f.startswith(sub + "/") for f in files):
            raise SparkError(f"refusing to write {name}: it is inside the project's "
                             f"{sub.split('/')[0]}/ folder, whose files git tracks; write "
                             "under out/")
    if kind == "job":
        _check_not_in_job(real, name)


def _enclosing_roots(real: Path) -> list[Path]:
    """Every project folder at or above `real`'s folder, innermost first (a submodule's
    superproject too)."""
    roots, top = [], root_of(real.parent, git=True)
    while top is not None:
        roots.append(top)
        top = root_of(top.parent, git=True) if top.parent != top else None
    return roots


@functools.lru_cache(maxsize=16)
def _git_index(top: Path) -> tuple[frozenset, tuple]:
    """(files git tracks under `top`, its submodules): one `git ls-files` a repository and
    process; (empty, empty) outside git."""
    if not os.path.lexists(top / ".git"):
        return frozenset(), ()
    try:
        done = subprocess.run(["git", "-C", os.fspath(top), "ls-files", "-z", "--stage"],
                              capture_output=True, timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:  # not "nothing is tracked": that would open every file
        raise SparkError(f"`git ls-files` in {top} took over {GIT_TIMEOUT} s; not written") \
            from None
    except OSError:
        return frozenset(), ()
    if done.returncode != 0:
        return frozenset(), ()
    entries = [e.split(b"\t", 1) for e in done.stdout.split(b"\0") if b"\t" in e]
    links = tuple(os.fsdecode(rel) for info, rel in entries if info.startswith(GITLINK.encode()))
    return frozenset(os.fsdecode(rel) for _, rel in entries), links


def check_job_live(folder: str | os.PathLike) -> None:
    """A job folder's dvclive/ (when there) is a real folder, so the commit can replace it."""
    live = Path(folder) / LIVE_DIR
    if os.path.islink(live) or (os.path.lexists(live) and not live.is_dir()):
        raise SparkError(f"refusing to write {printable(os.fspath(live))}: it is not a folder "
                         f"this tool made (a file or a link); move it away")
