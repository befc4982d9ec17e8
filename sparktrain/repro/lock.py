"""dvc.lock as data: the outputs each stage recorded, and their copies in the DVC cache."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from sparktrain.fsutil import atomic_write_bytes

LOCK = "dvc.lock"
DEFAULT_CACHE = Path(".dvc/cache")


@dataclass(frozen=True)
class Output:
    path: str
    stage: str
    md5: str | None
    legacy: bool  # a DVC 2 lock entry (no `hash: md5`): the cache's old layout


def outputs(lock: dict) -> dict[str, Output]:
    """Every output of a parsed dvc.lock, by path."""
    found = {}
    for stage, entry in (lock.get("stages") or {}).items():
        for out in entry.get("outs") or []:
            found[out["path"]] = Output(out["path"], stage, out.get("md5"), "hash" not in out)
    return found


def read_lock(path: str | os.PathLike = LOCK) -> dict:
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}


def cache_dir() -> Path:
    """The DVC cache of the repository in the current folder (`dvc cache dir`)."""
    listed = subprocess.run([sys.executable, "-m", "dvc", "cache", "dir"], capture_output=True,
                            text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    found = listed.stdout.strip() if listed.returncode == 0 else ""
    return Path(found) if found else DEFAULT_CACHE


def cached_blob(out: Output, cache: Path) -> Path | None:
    """The cache file holding `out`'s recorded bytes, if the cache has it."""
    if not out.md5 or out.md5.endswith(".dir"):
        return None
    folder = cache if out.legacy else cache / "files" / "md5"
    blob = folder / out.md5[:2] / out.md5[2:]
    return blob if blob.is_file() else None


def restore_outputs(stage: str) -> str:
    """Copy `stage`'s outputs as dvc.lock records them back from the cache (DVC
    removes them before running the stage). Returns a sentence for the user."""
    recorded = [o for o in outputs(read_lock()).values() if o.stage == stage]
    if not recorded:
        return "no earlier outputs recorded in dvc.lock"
    cache, missing = cache_dir(), []
    for out in recorded:
        blob = cached_blob(out, cache)
        data = blob.read_bytes() if blob else None
        if data is None or hashlib.md5(data).hexdigest() != out.md5:
            missing.append(out.path)
            continue
        if not Path(out.path).is_file() or Path(out.path).read_bytes() != data:
            atomic_write_bytes(out.path, data)
    if missing:
        return (f"the previous outputs are not all in the DVC cache ({', '.join(missing)}); "
                f"`dvc pull {stage}` then `dvc checkout {stage}` brings them back")
    return "the previous outputs (as dvc.lock records them) were restored from the DVC cache"
