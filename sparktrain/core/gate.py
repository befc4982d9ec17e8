"""Where a command may write: one gate, an allowlist (docs/outputs.md, "The output gate").

Every command that writes a path a user named calls `check_output` before its
first write. It allows exactly two things:

- a NEW path whose nearest existing folder is a real folder (not a file, not a
  link), not inside the project's git or DVC internals, not inside a job folder
  (unless the output is the job folder itself);
- an EXISTING regular file or folder this tool made, told by its layout: the
  magic bytes of the kind it writes (PNG, GGUF, Spark safetensors, SPARK_BC),
  canonical JSON, an HF export folder, a job folder's own file names.

Everything else is one line, exit 2, before a byte is written: a device node,
FIFO or socket, a symbolic link (never followed), a git-tracked file or a
folder holding one, the project root, a folder or file of another layout, and
any of the command's own inputs (the weights it reads, its tokenizer, its dataset).
"""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from sparktrain.core.errors import SparkError, printable
from sparktrain.core.jobfiles import (ARTIFACT, CHECKPOINT, CORPUS, EVAL, EVAL_DETAIL, FAILED,
                                 LOSS_PNG, PERF, PROGRAM, RESUME_STATE, RESUME_TENSORS,
                                 STATUS, TOKENIZER, WEIGHTS)

NAME_MAX = 255  # bytes of one path component on the file systems we run on
# a job folder holds these (and the commit journal's dot files): jobfiles.py's table
JOB_NAMES = frozenset({PROGRAM, TOKENIZER, CORPUS, STATUS, WEIGHTS, CHECKPOINT, ARTIFACT, PERF,
                       FAILED, RESUME_STATE, RESUME_TENSORS, EVAL, EVAL_DETAIL, LOSS_PNG,
                       "dvclive", ".live-run", ".lock", ".commit", "coder_proof.json",
                       ".gitignore"})  # DVC writes one beside the outputs it tracks
JOB_MARKERS = (CHECKPOINT, ARTIFACT)
# a folder holding one of these was made by a spark command (the stage or job writers)
JOB_OWNED = frozenset({PROGRAM, TOKENIZER, STATUS, WEIGHTS, CHECKPOINT, ARTIFACT, ".lock"})
HF_NAMES = frozenset({"config.json", "generation_config.json", "model.safetensors", TOKENIZER,
                      "tokenizer_config.json",
                      "README.md"})  # the model card (export/card.py CARD_FILE)
# Outputs that are project sources too: a compiled program (.sparkbc) is committed beside
# its .spark as the pipeline's input, so `spark compile -o` may write it among tracked
# files; an existing one is still replaced only when it is a SPARK_BC program.
SOURCE_KINDS = ("sparkbc",)
INTERNALS = (".git", ".dvc")  # a project's machinery: never an output, never inside one
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "gguf": b"GGUF", "sparkbc": b"SPBC"}
FILE_KINDS = ("png", "gguf", "sparkbc", "safetensors", "json")
FOLDER_KINDS = ("hf", "job")
# exports and imports: never inside a job folder, whose files the pipeline commits together
ARTIFACT_KINDS = ("gguf", "safetensors", "hf")
JSON_CAP = 64 << 20  # an existing JSON output is re-read to tell its layout; no bigger


def check_output(path: str | os.PathLike, kind: str, inputs: tuple = ()) -> Path:
    """`path` if this command may write (or replace) it as a `kind` output, else one
    SparkError line. kind: one of FILE_KINDS or FOLDER_KINDS. inputs: the paths the
    command reads (None entries are skipped)."""
    if kind not in FILE_KINDS + FOLDER_KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    path = Path(path)
    name = printable(os.fspath(path))
    try:
        _check(path, name, kind, [Path(i) for i in inputs if i is not None])
    except OSError as err:  # a name too long, a loop of links, a folder we may not list
        raise SparkError(f"cannot write {name}: {err.strerror or err}") from None
    return path


def _check(path: Path, name: str, kind: str, inputs: list[Path]) -> None:
    long = next((p for p in path.parts if len(os.fsencode(p)) > NAME_MAX), None)
    if long is not None:
        raise SparkError(f"cannot write {name[:80]}...: a name of {len(os.fsencode(long))} "
                         f"bytes, above the {NAME_MAX}-byte file-name limit")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        st = None  # reported below: an ancestor is a file
    if st is not None and stat.S_ISLNK(st.st_mode):  # before anything resolves it
        raise SparkError(f"refusing to write {name}: it is a symbolic link (to "
                         f"{printable(os.readlink(path))}); name the real path")
    if st is not None and stat.S_ISDIR(st.st_mode) and kind in FILE_KINDS:
        raise SparkError(f"cannot write {name}: it is a folder; give a file name")
    _check_project(path, name, kind)
    _check_inputs(path, name, inputs)
    if st is None:
        _check_new(path, name, kind)
    else:
        _check_existing(path, name, kind, st)


def _check_new(path: Path, name: str, kind: str) -> None:
    ancestor = path.absolute().parent
    while True:
        try:
            st = os.stat(ancestor)
            break
        except (FileNotFoundError, NotADirectoryError):
            ancestor = ancestor.parent
    if not stat.S_ISDIR(st.st_mode):
        raise SparkError(f"cannot write {name}: {printable(os.fspath(ancestor))} is "
                         f"{_kind_of(st.st_mode)}, not a folder")
    if kind in ARTIFACT_KINDS:
        job = next((p for p in (ancestor, *ancestor.parents) if _is_job_folder(p)), None)
        if job is not None:
            raise SparkError(f"cannot write {name}: it is inside the job folder "
                             f"{printable(os.fspath(job))}, whose files the pipeline commits "
                             f"together; write elsewhere")


def _check_existing(path: Path, name: str, kind: str, st: os.stat_result) -> None:
    mode = st.st_mode
    if kind in FOLDER_KINDS:
        if not stat.S_ISDIR(mode):
            raise SparkError(f"refusing to write {name}: it is {_kind_of(mode)}, and the "
                             f"output is a folder")
        _check_folder(path, name, kind)
        return
    if not stat.S_ISREG(mode):
        raise SparkError(f"refusing to write {name}: it is {_kind_of(mode)}, not a regular "
                         f"file (give a file name)")
    if st.st_size and not _made_by_us(path, kind, st.st_size):
        raise SparkError(f"refusing to replace {name}: it is not a {_KIND_WORDS[kind]} this "
                         f"tool wrote; choose a new name")


def _check_folder(path: Path, name: str, kind: str) -> None:
    names = set(os.listdir(path))
    if not names:
        return
    allowed = HF_NAMES if kind == "hf" else JOB_NAMES
    foreign = sorted(n for n in names if n not in allowed and not _our_temp(n))
    if kind == "job" and names & JOB_OWNED:
        foreign = []  # a job folder we made; files a user put beside ours are never touched
    if foreign or (kind == "hf" and "config.json" not in names):
        what = "an exported Hugging Face folder" if kind == "hf" else "a job folder"
        shown = ", ".join(printable(n) for n in foreign[:3]) or "no config.json"
        raise SparkError(f"refusing to replace {name}: it is not {what} this tool wrote "
                         f"(it holds {shown}); choose a new or empty folder")
    for entry in names & {"dvclive", CORPUS}:  # folders a job owns: real folders, no links
        if not (path / entry).is_dir() or (path / entry).is_symlink():
            raise SparkError(f"refusing to write {name}: its {entry} is not a folder this "
                             f"tool made (a file or a link); move it away")


def _our_temp(entry: str) -> bool:
    """The dot files of our atomic writes and journal: .NAME.PID.xxx.tmp, .NAME.pending."""
    return entry.startswith(".") and entry.endswith((".tmp", ".pending", ".old"))


def _made_by_us(path: Path, kind: str, size: int) -> bool:
    with open(path, "rb") as f:
        head = f.read(8)
        if kind in MAGIC:
            return head.startswith(MAGIC[kind])
        if kind == "safetensors":
            if len(head) < 8:
                return False
            n = int.from_bytes(head, "little")
            if not 2 <= n <= min(size - 8, 100 << 20):
                return False
            header = f.read(n)
            return header.startswith(b"{") and b'"__metadata__"' in header and b'"spark"' in header
        if size > JSON_CAP:
            return False
        text = head + f.read()
    from sparktrain.core.fsutil import canonical_json
    from sparktrain.core.safeload import load_json

    try:
        return canonical_json(load_json(text, os.fspath(path))).encode() == text
    except (SparkError, ValueError):
        return False


_KIND_WORDS = {"png": "PNG", "gguf": "GGUF file", "sparkbc": "SPARK_BC program",
               "safetensors": "Spark weights file", "json": "canonical JSON file"}


def _check_project(path: Path, name: str, kind: str) -> None:
    target = path.absolute()
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as err:
        raise SparkError(f"cannot write {name}: {err}") from None
    for candidate in {target, real}:
        for part in _inside_project(candidate).parts:
            if part in INTERNALS:
                raise SparkError(f"refusing to write {name}: it is inside a {part}/ folder "
                                 "(the project's machinery)")
    top = _git_top(real)
    roots = {r for r in (top, _dvc_root(real)) if r is not None}
    if real in roots or any(real in r.parents for r in roots):
        raise SparkError(f"refusing to write {name}: it is (or holds) the project folder")
    if kind in SOURCE_KINDS:  # a program is compiled beside its .spark, under git
        return
    if top is not None and os.path.lexists(real) and _tracked(top, real):
        raise SparkError(f"refusing to write {name}: it is (or holds) a file git tracks in "
                         f"the project; write under out/ or another new path")
    if top is not None and not os.path.lexists(real):
        # a new path belongs under out/, the project root or outside it; not in the sources
        folder = next(p for p in real.parents if p.is_dir())
        if folder != top and top in folder.parents and _tracked(top, folder):
            part = folder.relative_to(top).parts[0]
            raise SparkError(f"refusing to write {name}: it is inside the project's {part}/ "
                             f"folder, whose files git tracks; write under out/")
    if kind == "job":
        for p in (real.parent, *real.parent.parents):
            if _is_job_folder(p):
                raise SparkError(f"cannot write {name}: it is inside the job folder "
                                 f"{printable(os.fspath(p))}")


def _inside_project(path: Path) -> Path:
    """`path` relative to the deepest project folder above it (one holding .git or
    dvc.yaml), or whole when there is none. Only that part may not run through .git/ or
    .dvc/: DVC runs a queued experiment in a clone of its own under .dvc/tmp/, and that
    clone's out/ is an output like any other."""
    for folder in path.parents:
        if (folder / ".git").exists() or (folder / "dvc.yaml").is_file():
            return path.relative_to(folder)
    return path


def _git_top(real: Path) -> Path | None:
    folder = next((p for p in (real, *real.parents) if p.is_dir()), None)
    try:
        done = subprocess.run(["git", "-C", os.fspath(folder), "rev-parse", "--show-toplevel"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 else None


def _dvc_root(real: Path) -> Path | None:
    return next((p for p in (real, *real.parents) if (p / "dvc.yaml").is_file()), None)


def _tracked(top: Path, real: Path) -> bool:
    try:
        done = subprocess.run(["git", "-C", os.fspath(top), "ls-files", "-z", "--",
                               os.fspath(real.relative_to(top))],
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return False
    return done.returncode == 0 and bool(done.stdout)


def _check_inputs(path: Path, name: str, inputs: list[Path]) -> None:
    real = path.resolve()
    for item in inputs:
        source = item.resolve()
        if source == real or real in source.parents or _same_file(item, path):
            raise SparkError(f"refusing to write {name}: it is (or holds) "
                             f"{printable(os.fspath(item))}, which this command reads")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_job_folder(folder: Path) -> bool:
    return any((folder / m).is_file() for m in JOB_MARKERS)


def _kind_of(mode: int) -> str:
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return word
    return "not a regular file"


def check_job_live(folder: str | os.PathLike) -> None:
    """A job folder's dvclive/ (when there) is a real folder, so the commit can replace it."""
    live = Path(folder) / "dvclive"
    if os.path.islink(live) or (os.path.lexists(live) and not live.is_dir()):
        raise SparkError(f"refusing to write {printable(os.fspath(live))}: it is not a folder "
                         f"this tool made (a file or a link); move it away")



def replace_owned_folder(new: Path, dest: Path) -> None:
    """Put the folder `new` at `dest`, replacing the folder this tool made there; a link
    or a file at `dest` is refused (one line), never followed or deleted."""
    import shutil

    if os.path.lexists(dest) and (os.path.islink(dest) or not dest.is_dir()):
        raise SparkError(f"refusing to replace {printable(os.fspath(dest))}: not a folder "
                         "this tool made")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(new, dest)
