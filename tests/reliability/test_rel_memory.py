"""Absurd sizes are refused from arithmetic on the shapes, before anything is allocated;
the estimate that refuses them is held against the measured peak RSS of real runs."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest

from relkit import FAST, TRAIN, trained  # noqa: F401  (fixture)
from sparkhelp import HANG_GUARD_S, PROMPT_GUARD_S, assert_one_line_error, run_spark
from sparktrain.core.errors import SparkError
from sparktrain.model.config import ModelConfig
from sparktrain.model.memory import BASE_BYTES, check_fits, estimate

# `spark train` in a fresh child that reports the peak RSS of the run itself: the
# high-water mark is reset (clear_refs 5) once the command's modules are loaded, so
# whatever an installed extra adds at import, or what earlier tests did, is not
# counted; BASE_BYTES, the estimate's interpreter share, stands in for it.
PEAK = ("import sys; from sparktrain.cli import main; "
        "kib = lambda key: int(next(ln.split()[1] for ln in open('/proc/self/status') "
        "if ln.startswith(key))) * 1024; "
        "open('/proc/self/clear_refs', 'w').write('5'); before = kib('VmRSS:'); "
        "rc = main(sys.argv[1:]); "
        "print('PEAK', kib('VmHWM:') - before, file=sys.stderr); sys.exit(rc)")
# the child's environment: only what running needs, never a variable an earlier test left
CHILD_ENV = ("PATH", "HOME", "LANG", "TMPDIR", "OPENBLAS_CORETYPE")


@pytest.fixture(scope="module")
def long_rows(tmp_path_factory):
    """Pairs longer than any seq_len below: every batch is processed at full length."""
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("mem") / "long.jsonl"
    with open(path, "w") as f:
        for _ in range(128):
            text = "".join(rng.choice("abcdefghij ") for _ in range(300))
            f.write(json.dumps({"messages": [{"role": "user", "content": text},
                                             {"role": "assistant", "content": text[::-1]}]})
                    + "\n")
    return path


@pytest.mark.parametrize("dim, n_layer, seq_len, batch", [
    (64, 2, 128, 64),     # small: the interpreter dominates
    (128, 4, 128, 64),    # activations dominate
    (160, 2, 192, 64),    # attention scores grow as T^2
])
def test_estimate_is_within_2x_of_the_measured_peak(long_rows, tmp_path, dim, n_layer,
                                                    seq_len, batch):
    cfg = ModelConfig(dim=dim, n_layer=n_layer, n_head=4, n_kv_head=2, seq_len=seq_len)
    est = estimate(cfg, batch, 0).total  # momentum 0 below: no moments
    done = subprocess.run(
        [sys.executable, "-c", PEAK, "train", "--dataset", str(long_rows), "--out",
         str(tmp_path / "o"), "--outer", "1", "--inner", "1", "--momentum", "0",
         "--dim", str(dim), "--n-layer", str(n_layer), "--seq-len", str(seq_len),
         "--batch-size", str(batch), "--workers", "1"],
        capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=tmp_path,
        env={k: os.environ[k] for k in CHILD_ENV if k in os.environ})
    assert done.returncode == 0, done.stderr
    peak = BASE_BYTES + next(int(line.split()[1]) for line in done.stderr.splitlines()
                             if line.startswith("PEAK"))
    print(f"\nmemory dim {dim} x {n_layer} T {seq_len} B {batch}: estimate {est >> 20} MiB, "
          f"peak RSS {peak >> 20} MiB")
    assert est / 2 <= peak <= est * 2, f"estimate {est >> 20} MiB, peak {peak >> 20} MiB"


@pytest.mark.parametrize("cfg, rows", [
    (ModelConfig(dim=4096, n_layer=12, n_head=32, n_kv_head=8, seq_len=4096), 8),
    (ModelConfig(seq_len=4096), 10 ** 9),
    (ModelConfig(dim=64, n_layer=2, seq_len=2048), 10 ** 6),
])
def test_absurd_but_valid_sizes_are_refused_with_the_number(cfg, rows, monkeypatch):
    monkeypatch.setenv("SPARK_MAX_MEMORY_MB", "4096")
    with pytest.raises(SparkError, match=r"estimated [\d,.]+ (GiB|MiB).*above the 4.00 GiB"):
        check_fits("training", cfg, rows)


def test_a_billion_layers_is_refused_by_arithmetic():
    with pytest.raises(SparkError, match="n_layer 1000000000 is above the limit"):
        ModelConfig(n_layer=10 ** 9).validate()
    big = ModelConfig(dim=2, n_head=1, n_kv_head=1, n_layer=1000)
    assert big.kind(big).n_params == sum(math.prod(s) for s in
                                         big.kind(big).param_shapes().values())


@pytest.mark.parametrize("argv, needle", [
    (TRAIN + ["--out", "out/m", "--batch-size", "1000000000", "--seq-len", "4096",
              "--dim", "512", "--n-layer", "8"] + FAST, "estimated"),
    (TRAIN + ["--out", "out/m", "--n-layer", "2900000"] + FAST, "n_layer 2900000"),
    (["bench", "--batch-size", "100000000", "--steps", "1"], "estimated"),
])
def test_commands_refuse_before_allocating(trained, argv, needle):
    project, _ = trained
    rc, _, err = run_spark(argv, cwd=project, timeout=PROMPT_GUARD_S,
                           env={"SPARK_MAX_MEMORY_MB": "2048"})
    assert_one_line_error(rc, err, needle)


def test_the_cap_itself_is_checked(trained):
    project, _ = trained
    rc, _, err = run_spark(TRAIN + ["--out", "out/m"] + FAST, cwd=project,
                           env={"SPARK_MAX_MEMORY_MB": "lots"})
    assert_one_line_error(rc, err, "SPARK_MAX_MEMORY_MB")
    rc, _, err = run_spark(TRAIN + ["--out", "out/m"] + FAST, cwd=project,
                           env={"SPARK_MAX_MEMORY_MB": "10"})
    assert_one_line_error(rc, err, "above the 10.0 MiB")
