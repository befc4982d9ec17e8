"""`spark repro-check`: `dvc repro --force`, then the new dvc.lock against the committed one,
parsed; float outputs compared number by number within a tolerance (docs/pipeline.md)."""
from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load

from sparktrain.core.errors import SparkError, first_line
from sparktrain.core.fsutil import read_input
from sparktrain.core.jobfiles import CHECKPOINT, EVAL, EVAL_DETAIL, WEIGHTS
from sparktrain.core.values import is_number
from sparktrain.repro.dvclock import LOCK, Output, cache_dir, cached_blob, outputs, read_lock
from sparktrain.repro.toolenv import git, git_blob, tool_env
from sparktrain.core.safeload import load_json, load_yaml

# JSON strings under these keys are hashes of other outputs: they move with the floats.
HASH_KEY_MARK = "sha256"
# checkpoint.json's record of what made the bytes (BLAS kernel family, numpy and BLAS
# versions; sparktrain/runtime.py): not a number to compare, it is named on its own.
MADE_WITH = "made_with"
MADE_WITH_PARTS = (("kernel", "the BLAS kernel"), ("numpy", "numpy"), ("blas", "the BLAS library"))
# The outputs computed with BLAS floats, which may move in the last bits on
# another CPU family; every other output must be reproduced byte for byte.
FLOAT_OUTPUT_NAMES = (CHECKPOINT, EVAL, EVAL_DETAIL, WEIGHTS)
PICTURE_SUFFIXES = (".png", ".svg")


@dataclass
class Verdict:
    lines: list[str] = field(default_factory=list)
    exact: bool = True
    within_tolerance: bool = True

    def fail(self, line: str) -> None:
        self.drift(line)
        self.within_tolerance = False

    def drift(self, line: str) -> None:
        self.lines.append(line)
        self.exact = False


# --- reading the two locks -------------------------------------------------

def inputs(lock: dict) -> dict[str, dict]:
    """Per stage, what the run was made from: cmd, params and the deps no stage writes."""
    written = set(outputs(lock))
    return {stage: {**{k: v for k, v in entry.items() if k not in ("outs", "deps")},
                    "deps": [d for d in entry.get("deps") or [] if d["path"] not in written]}
            for stage, entry in (lock.get("stages") or {}).items()}


def moved_inputs(old: dict, new: dict) -> list[str]:
    old_in, new_in = inputs(old), inputs(new)
    moved = []
    for stage in sorted(set(old_in) | set(new_in)):
        if stage not in new_in or stage not in old_in:
            moved.append(f"stage {stage}: {'gone' if stage not in new_in else 'new'} "
                         f"since the commit")
            continue
        for key in sorted(set(old_in[stage]) | set(new_in[stage])):
            if old_in[stage].get(key) != new_in[stage].get(key):
                moved.append(f"stage {stage}: {key} differs from the committed lock")
    return moved


# --- comparing numbers ------------------------------------------------------

def relative_error(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def compare_json(old, new, where: str = "") -> tuple[float, list[str]]:
    """(largest relative error over the numbers, the non-numeric differences)."""
    if is_number(old) and is_number(new):
        return relative_error(float(old), float(new)), []
    if isinstance(old, dict) and isinstance(new, dict):
        if set(old) != set(new):
            return 0.0, [f"{where or '.'}: keys differ ({sorted(set(old) ^ set(new))})"]
        pairs = [(old[k], new[k], f"{where}.{k}") for k in sorted(old)
                 if HASH_KEY_MARK not in k and not (k == MADE_WITH and not where)]
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return 0.0, [f"{where or '.'}: length {len(old)} -> {len(new)}"]
        pairs = [(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(old, new))]
    else:  # strings, booleans, null, or two kinds: equal or a difference
        return 0.0, ([] if old == new else [f"{where or '.'}: {old!r} -> {new!r}"])
    worst, other = 0.0, []
    for a, b, at in pairs:
        err, diffs = compare_json(a, b, at)
        worst, other = max(worst, err), other + diffs
    return worst, other


def compare_safetensors(old: bytes, new: bytes) -> tuple[float, list[str]]:
    """Tensors: max |a - b| relative to the tensor's scale; metadata as JSON."""
    try:
        old_t, new_t = load(old), load(new)
    except (SafetensorError, ValueError) as err:
        raise SparkError(f"a weights output is not a safetensors file ({first_line(err)})") \
            from None
    if set(old_t) != set(new_t):
        return 0.0, [f"tensor names differ ({sorted(set(old_t) ^ set(new_t))})"]
    worst, other = 0.0, []
    for name in sorted(old_t):
        a, b = old_t[name].astype(np.float64), new_t[name].astype(np.float64)
        if a.shape != b.shape:
            other.append(f"{name}: shape {a.shape} -> {b.shape}")
            continue
        scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
        diff = float(np.max(np.abs(a - b), initial=0.0))
        worst = max(worst, 0.0 if diff == 0 else (math.inf if scale == 0 else diff / scale))
    meta_err, meta_other = compare_json(_metadata(old), _metadata(new), "metadata")
    return max(worst, meta_err), other + meta_other


def _metadata(blob: bytes) -> dict:
    """The header's __metadata__, its JSON-string values parsed where they parse."""
    size = int.from_bytes(blob[:8], "little")
    meta = load_json(blob[8:8 + size], "a safetensors header").get("__metadata__") or {}
    parsed = {}
    for key, value in meta.items():
        try:
            parsed[key] = load_json(value, f"metadata {key}")
        except (TypeError, ValueError, SparkError):
            parsed[key] = value
    return parsed


def compare_output(path: str, old: bytes, new: bytes) -> tuple[float, list[str]]:
    """(worst relative error, other differences) of a JSON or safetensors output."""
    if path.endswith(".safetensors"):
        return compare_safetensors(old, new)
    return compare_json(load_json(old, f"{path} (committed)"), load_json(new, path))


# --- the check --------------------------------------------------------------

def compare_locks(old: dict, new: dict, tolerance: float,
                  read_old: Callable[[Output], bytes | None],
                  read_new: Callable[[Output], bytes]) -> Verdict:
    verdict = Verdict()
    for line in moved_inputs(old, new):
        verdict.fail(f"input moved: {line}")
    old_outs, new_outs = outputs(old), outputs(new)
    for path in sorted(set(old_outs) | set(new_outs)):
        if path not in old_outs or path not in new_outs:
            verdict.fail(f"output {'added' if path not in old_outs else 'gone'}: {path}")
            continue
        was, now = old_outs[path], new_outs[path]
        if was.md5 == now.md5:
            continue
        head = f"drifted: {path} (stage {now.stage}) md5 {was.md5} -> {now.md5}"
        if path.endswith(PICTURE_SUFFIXES):
            verdict.drift(f"{head}: a picture of the numbers, follows them")
        elif not path.endswith(FLOAT_OUTPUT_NAMES):
            verdict.fail(f"{head}: not a float output, it must not move")
        elif (old_bytes := read_old(was)) is None:
            verdict.fail(f"{head}: the committed copy is not in the DVC cache, so its numbers "
                         f"cannot be compared (`dvc pull` before the check)")
        else:
            worst, other = compare_output(path, old_bytes, read_new(now))
            if other:
                verdict.fail(f"{head}: non-numeric change {other[0]}"
                             + (f" (and {len(other) - 1} more)" if len(other) > 1 else ""))
            elif worst == 0:
                verdict.fail(f"{head}: the bytes moved but no number did (formatting or key "
                             f"order is not deterministic)")
            elif worst > tolerance:
                verdict.fail(f"{head}: numbers beyond tolerance {tolerance:g} "
                             f"(max relative error {worst:.3g})")
            else:
                verdict.drift(f"{head}: numbers within tolerance {tolerance:g} "
                              f"(max relative error {worst:.3g})")
    return verdict


def _made_with(blob: bytes | None) -> dict | None:
    try:
        record = load_json(blob, CHECKPOINT).get(MADE_WITH) if blob is not None else None
    except (SparkError, AttributeError):
        return None
    return record if isinstance(record, dict) else None


def _describe(record: dict) -> str:
    return ", ".join(f"{name} {record.get(key, '?')}" for key, name in
                     (("kernel", "kernel"), ("numpy", "numpy"), ("blas", "BLAS")))


def made_with_lines(old: dict, new: dict, read_old: Callable[[Output], bytes | None],
                    read_new: Callable[[Output], bytes]) -> list[str]:
    """For each checkpoint whose hash moved: this run's and the lock's kernel and versions."""
    lines = []
    old_outs, new_outs = outputs(old), outputs(new)
    for path in sorted(set(old_outs) & set(new_outs)):
        was, now = old_outs[path], new_outs[path]
        if not path.endswith(CHECKPOINT) or was.md5 == now.md5:
            continue
        mine = _made_with(read_new(now))
        old_blob = read_old(was)
        theirs = _made_with(old_blob)
        head = f"made with: {path}: this run {_describe(mine) if mine else 'not recorded'}"
        if theirs is None:
            why = ("not in the DVC cache (`dvc pull` first)" if old_blob is None
                   else "not recorded (a checkpoint from before the record)")
            lines.append(f"{head}; the lock's run {why}")
            continue
        differ = [name for key, name in MADE_WITH_PARTS if (mine or {}).get(key) != theirs.get(key)]
        verdict = (f"{' and '.join(differ)} differ{'s' if len(differ) == 1 else ''}" if differ
                   else "the same kernel and versions, so the drift is not theirs")
        lines.append(f"{head}; the lock's run {_describe(theirs)}: {verdict}")
    return lines


def committed_lock() -> dict:
    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise SparkError("not inside a git repository; run the check from a clone of the project")
    if Path(top.stdout.strip()).resolve() != Path.cwd().resolve():
        raise SparkError(f"run the check from the repository root ({top.stdout.strip()})")
    shown = git_blob("HEAD", LOCK)  # its size from git first: a huge blob is not read
    if shown is None:
        raise SparkError(f"no {LOCK} committed at HEAD; run `dvc repro` and commit {LOCK} first")
    lock = load_yaml(shown, f"{LOCK} at HEAD") or {}
    if not isinstance(lock, dict):
        raise SparkError(f"{LOCK} at HEAD is not a mapping of stages; commit a {LOCK} "
                         "that `dvc repro` wrote")
    return lock


def dvc(*args: str, quiet: bool = False) -> int:
    """Run dvc with its output on stderr, so stdout holds only the verdict."""
    out = subprocess.DEVNULL if quiet else sys.stderr
    return subprocess.run([sys.executable, "-m", "dvc", *args], env=tool_env(), stdout=out,
                          stderr=out).returncode


def cache_reader() -> Callable[[Output], bytes | None]:
    cache = cache_dir()

    def read(out: Output) -> bytes | None:
        blob = cached_blob(out, cache)
        return read_output(blob, out.path, "the cached copy of ") if blob else None

    return read


def read_output(path, name: str, what: str = "") -> bytes:
    """Output `name`'s bytes at `path`, within the weights or the eval file cap."""
    try:
        return read_input(path, "weights file" if name.endswith(".safetensors") else "eval file")
    except SparkError as err:
        raise SparkError(f"{what}{name}: {err}") from None


def check(tolerance: float) -> int:
    old = committed_lock()
    if not Path("dvc.yaml").is_file():
        raise SparkError("no dvc.yaml here; run the check from the project root")
    code = dvc("repro", "--force")
    if code != 0:
        print(f"repro-check: FAIL: `dvc repro --force` exited {code}")
        return 1
    new = read_lock(LOCK)
    clean = dvc("status", "-q", quiet=True) == 0
    if old == new and clean:
        print(f"repro-check: ok: {LOCK} reproduced exactly; dvc status clean")
        return 0
    moved = moved_inputs(old, new)
    if moved:  # the outputs of other inputs: comparing them says nothing, one line says why
        shown = "; ".join(m.replace(" from the committed lock", "") for m in moved[:3])
        print(f"repro-check: FAIL: the {LOCK} committed at HEAD was made from other inputs "
              f"({shown}{f'; {len(moved) - 3} more' if len(moved) > 3 else ''}): commit "
              f"the {LOCK} `dvc repro` wrote with your change, then run the check again")
        return 1
    read_old, read_new = cache_reader(), lambda out: read_output(out.path, out.path)
    verdict = compare_locks(old, new, tolerance, read_old, read_new)
    for line in verdict.lines + made_with_lines(old, new, read_old, read_new):
        print(line)
    if not clean:
        print("repro-check: FAIL: `dvc status -q` is not clean after the repro")
        return 1
    if verdict.exact:
        # Same hashes, other bytes of the lock moved (layout, key order): still the same run.
        print(f"repro-check: ok: every hash in {LOCK} reproduced; dvc status clean")
        return 0
    if verdict.within_tolerance:
        print(f"repro-check: ok: drift within tolerance {tolerance:g}: only float outputs "
              f"moved and every number stays within it (expected across CPU families, whose "
              f"BLAS kernels differ)")
        return 0
    print(f"repro-check: FAIL: {LOCK} not reproduced (see the lines above)")
    return 1
