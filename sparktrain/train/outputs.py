"""The files of a job folder, written so a crash can never leave a mixed set.

weights.safetensors, checkpoint.json and ARTIFACT must agree (the checkpoint
names the weights' sha256; ARTIFACT says trained=true only for those bytes).
Three renames cannot be atomic together, so `commit_files` journals them:

1. every new file is written in full to `.NAME.pending` and fsynced;
2. `.commit` (itself written atomically) lists the names: the point of no return;
3. each pending file is renamed over its target; then `.commit` is removed.

`recover(folder)`, called before any read, rolls a journal forward when
`.commit` exists and drops stray pending files when it does not, so a reader
sees either the whole old set or the whole new one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from sparktrain.fsutil import atomic_write_bytes, canonical_json, sha256_file

JOURNAL = ".commit"
_kill_hook = os.environ.get("SPARK_TEST_CRASH_AT")  # tests only: simulate SIGKILL mid-commit


def _pending(folder: Path, name: str) -> Path:
    return folder / f".{name}.pending"


def _crash_point(where: str) -> None:
    if _kill_hook == where:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def commit_files(folder: str | os.PathLike, files: dict[str, bytes]) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    recover(folder)
    for name, data in files.items():
        atomic_write_bytes(_pending(folder, name), data)
    _crash_point("before-journal")
    atomic_write_bytes(folder / JOURNAL, json.dumps(sorted(files)).encode())
    for i, name in enumerate(sorted(files)):
        os.replace(_pending(folder, name), folder / name)
        if i == 0:
            _crash_point("mid-rename")
    _fsync_dir(folder)
    os.unlink(folder / JOURNAL)


def recover(folder: str | os.PathLike) -> None:
    folder = Path(folder)
    journal = folder / JOURNAL
    if journal.exists():
        try:
            names = json.loads(journal.read_text())
        except (OSError, ValueError):
            names = []
        for name in names:
            pending = _pending(folder, name)
            if pending.exists():
                os.replace(pending, folder / name)
        _fsync_dir(folder)
        journal.unlink(missing_ok=True)
    if folder.is_dir():
        for stray in folder.glob(".*.pending"):
            stray.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def artifact_text(fields: list[tuple[str, object]], header: str) -> str:
    lines = [header] + [f"{k}={_fmt(v)}" for k, v in fields]
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def dry_artifact(job) -> str:
    return artifact_text([("mode", "dry-run"), ("not_sgd", True), ("trained", False),
                          ("checkpoint", job.rel("checkpoint.json"))],
                         f"spark-train-dry {job.job}")


def sgd_artifact(job, step_n: int) -> str:
    return artifact_text([("mode", "cpu-sgd"), ("not_sgd", False), ("trained", True),
                          ("step_n", step_n), ("op", "step"),
                          ("weights", job.rel("weights.safetensors")),
                          ("checkpoint", job.rel("checkpoint.json"))],
                         f"spark-train-sgd {job.job}")


def parse_artifact(text: str) -> dict:
    lines = text.splitlines()
    out = {"header": lines[0] if lines else ""}
    for line in lines[1:]:
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def job_state(folder: str | os.PathLike, job_id: str | None = None) -> dict:
    """The real state of a job folder: declared, trained, failed (or absent).

    `trained` is reported only when checkpoint.json says so AND the weights
    file on disk hashes to the checkpoint's weights_sha256.
    """
    folder = Path(folder)
    recover(folder)
    job_id = job_id or folder.name
    state: dict = {"job": job_id, "out": folder.as_posix(), "state": "absent"}
    status = read_json(folder / "status.json")
    if status is not None:
        state["state"] = "declared"
        for key in ("dataset", "base", "method", "arch", "n_params"):
            if key in status:
                state[key] = status[key]
    artifact = folder / "ARTIFACT"
    if artifact.exists():
        art = parse_artifact(artifact.read_text(encoding="utf-8", errors="replace"))
        state["artifact"] = art
        if state["state"] == "absent":
            state["state"] = "declared"
    ckpt = read_json(folder / "checkpoint.json")
    weights = folder / "weights.safetensors"
    if ckpt is not None and ckpt.get("trained") is True:
        ok = weights.exists() and sha256_file(weights) == ckpt.get("weights_sha256")
        state.update(state="trained" if ok else "failed", step_n=ckpt.get("step_n"),
                     loss_before=ckpt.get("loss_before"), loss_after=ckpt.get("loss_after"),
                     weights=ckpt.get("weights"), weights_sha256=ckpt.get("weights_sha256"),
                     weights_verified=ok)
        if not ok:
            state["reason"] = "weights file missing or its sha256 differs from checkpoint.json"
    failed = read_json(folder / "failed.json")
    if failed is not None:
        state["state"] = "failed"
        state["failure"] = failed
    perf = read_json(folder / "perf.json")
    if perf is not None:
        state["perf"] = perf
    ev = read_json(folder / "eval.json")
    if ev is not None:
        state["eval"] = {k: ev.get(k) for k in ("loss", "perplexity", "next_token_accuracy",
                                                "copy_recall", "exact_match") if k in ev}
    return state


def write_failure(folder: Path, info: dict) -> None:
    atomic_write_bytes(Path(folder) / "failed.json", canonical_json(info).encode())


def clear_failure(folder: Path) -> None:
    (Path(folder) / "failed.json").unlink(missing_ok=True)
