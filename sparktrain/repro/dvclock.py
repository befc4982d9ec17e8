"""dvc.lock as data, and the DVC cache at stage time: the outputs each stage recorded, their
copies in the cache, putting back the outputs DVC removed when a stage stops before it
finished (an error, Ctrl-C, SIGTERM: one line says what was restored), and the room a
stage's outputs and their cache copies need before it writes (docs/pipeline.md)."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sparktrain.core.errors import SparkError, printable
from sparktrain.core.fsutil import atomic_write_bytes, read_input
from sparktrain.core.safeload import load_yaml

LOCK = "dvc.lock"
DEFAULT_CACHE = Path(".dvc/cache")
MD5 = re.compile(r"[0-9a-f]{32}")
# seconds for `dvc cache dir`, as for one git call (repro/toolenv.py): a hung dvc is a line
DVC_TIMEOUT = 60


@dataclass(frozen=True)
class Output:
    path: str
    stage: str
    md5: str | None
    legacy: bool  # a DVC 2 lock entry (no `hash: md5`): the cache's old layout


def outputs(lock: dict) -> dict[str, Output]:
    """Every well-formed output of a parsed dvc.lock, by path; malformed ones skipped."""
    stages = lock.get("stages") if isinstance(lock, dict) else None
    found = {}
    for stage, entry in (stages.items() if isinstance(stages, dict) else ()):
        outs = entry.get("outs") if isinstance(entry, dict) else None
        for out in outs if isinstance(outs, list) else ():
            if not isinstance(out, dict) or not isinstance(out.get("path"), str):
                continue
            md5 = out.get("md5")
            found[out["path"]] = Output(out["path"], str(stage),
                                        md5 if isinstance(md5, str) else None, "hash" not in out)
    return found


def read_lock(path: str | os.PathLike = LOCK) -> dict:
    """dvc.lock parsed (bounded: no aliases, capped size), or {} when unreadable."""
    try:
        lock = load_yaml(read_input(path, "dvc.lock"), os.fspath(path)) or {}
    except SparkError:
        return {}
    return lock if isinstance(lock, dict) else {}


def cache_dir() -> Path:
    """The DVC cache of the repository in the current folder (`dvc cache dir`)."""
    try:
        listed = subprocess.run([sys.executable, "-m", "dvc", "cache", "dir"], capture_output=True,
                                text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"},
                                timeout=DVC_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SparkError(f"`dvc cache dir` took over {DVC_TIMEOUT} s; stopped") from None
    found = listed.stdout.strip() if listed.returncode == 0 else ""
    return Path(found) if found else DEFAULT_CACHE


def cached_blob(out: Output, cache: Path) -> Path | None:
    """The cache file holding `out`'s recorded bytes, if the cache has it."""
    if not out.md5 or not MD5.fullmatch(out.md5):  # a ".dir" listing, or not a hash at all
        return None
    folder = cache if out.legacy else cache / "files" / "md5"
    blob = folder / out.md5[:2] / out.md5[2:]
    return blob if blob.is_file() else None


def confined(path: str, folder: str | os.PathLike) -> Path | None:
    """`path` when it is relative and inside `folder` (links resolved), else None: a crafted
    dvc.lock must not steer a write elsewhere."""
    if not path or os.path.isabs(path) or ".." in Path(path).parts:
        return None
    root, target = Path(folder).resolve(), Path(path).resolve()
    return Path(path) if target != root and root in target.parents else None


def restore_outputs(stage: str, folder: str | os.PathLike = ".") -> str:
    """Copy `stage`'s outputs inside `folder` back from the DVC cache when their md5 matches
    dvc.lock (DVC removes them before a run); a sentence for the user."""
    recorded = [o for o in outputs(read_lock()).values() if o.stage == stage]
    # dvc.lock made with another job: its outputs lie in a sibling job folder, never ours
    others = [o for o in recorded if confined(o.path, folder) is None
              and confined(o.path, Path(folder).parent) is not None]
    recorded = [o for o in recorded if o not in others]
    if not recorded:
        return "no earlier outputs recorded in dvc.lock" + (
            " for this job (it records another job's)" if others else "")
    cache, missing, refused = cache_dir(), [], []
    for out in recorded:
        target = confined(out.path, folder)
        if target is None:
            refused.append(out.path)
            continue
        blob = cached_blob(out, cache)
        try:
            data = read_input(blob, "file") if blob else None
        except SparkError:
            data = None
        if data is None or hashlib.md5(data).hexdigest() != out.md5:
            missing.append(out.path)
            continue
        if not target.is_file() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
    note = (f"; dvc.lock names outputs outside {Path(folder).as_posix()}, not restored: "
            f"{', '.join(printable(p)[:80] for p in refused[:3])}" if refused else "")
    if missing:
        return (f"the previous outputs are not all in the DVC cache ({', '.join(missing)}); "
                f"`dvc pull {stage}` then `dvc checkout {stage}` brings them back{note}")
    return ("the previous outputs (as dvc.lock records them) were restored from the DVC cache"
            + note)


def restored_note(stage: str, folder: Callable[[], Path]) -> str:
    """"; <what the restore did>" when dvc.lock records outputs of `stage`, else "";
    `folder()` gives the job folder (it reads params.yaml, which may be what broke)."""
    try:
        where = folder()
    except SparkError:  # params.yaml is what broke: the error line already says how
        return (f"; `dvc checkout {stage}` brings back its previous outputs once params.yaml "
                f"is fixed" if any(o.stage == stage for o in outputs(read_lock()).values())
                else "")
    try:
        note = restore_outputs(stage, where)
    except (SparkError, OSError) as err:  # a disk still full
        return (f"; the previous outputs were not restored ({err}); "
                f"`dvc checkout {stage}` brings them back")
    return "" if note.startswith("no earlier outputs") else f"; {note}"


# What DVC writes after a stage beyond the copies of its outputs: a test file in the cache
# and one beside each output (its link test), the run-cache entry, dvc.lock, its lock
# file. A tmpfs needed 16 KiB more than the copies for the eval stage; this keeps
# sixteen times that, so only a disk within a quarter MiB of full is refused.
DVC_SLACK = 256 * 1024


def _on_disk(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists (a cache not yet made)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_room(files: dict[Path, bytes]) -> None:
    """Under `dvc repro`, refuse in one line, before a byte is written, when a disk cannot
    hold `files`, DVC's cache copies of those not in its cache yet, and DVC_SLACK: DVC
    would otherwise fail after the stage succeeded, in its own words, with its temp
    files left beside the outputs (docs/outputs.md, "What a job holds")."""
    if not os.environ.get("DVC_STAGE"):  # run by hand: a failed write is its own line
        return
    objects = cache_dir() / "files" / "md5"
    cache_disk = _on_disk(objects)
    need: dict[int, tuple[Path, int]] = {}   # st_dev -> (a folder on it, bytes)
    for path, data in files.items():
        md5 = hashlib.md5(data).hexdigest()
        cached = (objects / md5[:2] / md5[2:]).is_file()
        for folder in [path.parent] + ([] if cached else [cache_disk]):
            dev, block = os.stat(folder).st_dev, os.statvfs(folder).f_frsize
            where, size = need.get(dev, (folder, 0))
            need[dev] = where, size - (-len(data) // block) * block  # whole blocks
    for where, size in need.values():
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
        if free < size + DVC_SLACK:
            raise SparkError(f"not enough space on the disk of {where.as_posix()}: "
                             f"{free // 1024:,} KiB free, {(size + DVC_SLACK) // 1024:,} KiB "
                             f"needed (the outputs, their DVC cache copies and DVC's records); "
                             f"free some and run `dvc repro` again")
