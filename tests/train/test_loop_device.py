"""The one training loop on a device (docs/gpu.md "What the training loop does with
a device"): params and optimizer state live on the run's array namespace, only
the logged numbers and the final weights come back, and the files on disk are
host float32 whatever the device.

In `make test` the device is array-api-strict (it rejects any call outside the
standard, so nothing numpy-only hides in the path a GPU takes); under
`make test-gpu` the same tests also run on PyTorch tensors. The losses of every
loss_curve point equal the numpy run's within 1e-5 relative."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import sparktrain.train.loop as loop
from sparktrain.train.runner import run_job
from sparkhelp import ROOT, assert_one_line_error, run_spark
from sparktrain.data.source import prepare_job, source_for
from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.model.config import SCALES
from sparktrain.model.device import CPU
from sparktrain.model.weights import load_weights
from sparktrain.params import Defaults, StepConfig, override
from sparktrain.train.job import adhoc_job

from tests.model.xpkit import target_device

LOSS_RTOL = 1e-5
PAIRS = str(ROOT / "data/train/dataset.jsonl")
HELDOUT = str(ROOT / "data/eval/tiny_heldout.jsonl")
QUIET = dict(progress=lambda line: None)
DEFAULT_JOB = StepConfig(outer=4, inner=8)           # params.yaml's step knobs
ADAMW = StepConfig(outer=3, inner=4, batch_size=6, lr=3e-3, optimizer="adamw",
                   weight_decay=0.1, schedule="cosine", warmup=2, min_lr=3e-4, shards=2,
                   workers=1)
TARGETS = ["strict", "torch-cpu", "torch-gpu"]


def _on(monkeypatch, dev):
    """The loop's device resolution answers `dev` (the namespace under test)."""
    monkeypatch.setattr(loop, "resolve_device", lambda requested: dev)


def _run(tmp_path: Path, name: str, step: StepConfig, base=None, progress=None):
    job = adhoc_job(PAIRS, str(tmp_path / name), base)
    source = source_for(PAIRS, Defaults(), heldout=HELDOUT)
    prepare_job(job.out_dir, source, "byte", 0)
    kw = dict(QUIET, progress=progress or QUIET["progress"])
    return job, run_job(job, step, SCALES["tiny"], source, **kw)


def _curve_close(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for key in ("loss", "heldout_loss"):
            assert g[key] == pytest.approx(w[key], rel=LOSS_RTOL), (g["outer"], key)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("step", [DEFAULT_JOB, ADAMW], ids=["sgd-default", "adamw-shards2"])
def test_the_loop_on_a_device_matches_numpy_and_writes_host_files(target, step, tmp_path,
                                                                  monkeypatch):
    dev = target_device(target)
    _, cpu = _run(tmp_path, "cpu", step)
    notes = []
    _on(monkeypatch, dev)
    job, on_dev = _run(tmp_path, "dev", step, progress=notes.append)
    _curve_close(on_dev.checkpoint["loss_curve"], cpu.checkpoint["loss_curve"])
    assert on_dev.checkpoint["device"] == dev.name and cpu.checkpoint["device"] == "cpu"
    assert on_dev.perf["device"] == dev.name and on_dev.perf["workers"] == 1
    params, meta = load_weights(job.out_dir / "weights.safetensors")
    assert meta["device"] == dev.name
    assert "device" not in load_weights(tmp_path / "cpu/weights.safetensors")[1]
    assert {a.dtype for a in params.values()} == {np.dtype(np.float32)}
    assert all(type(a) is np.ndarray for a in params.values())
    # the step record is the knobs', not the device's: a CPU checkpoint is as before
    assert "device" not in {k for k in cpu.checkpoint if k.startswith("step")}


def test_a_resumed_run_on_a_device_ends_where_an_unbroken_one_does(tmp_path, monkeypatch):
    """The resume state is host float32; loading it puts it back on the device."""
    dev = target_device("strict")
    _on(monkeypatch, dev)
    step = override(ADAMW, checkpoint_every=1)
    _, whole = _run(tmp_path / "whole", "job", step)
    real = loop.apply_update
    calls = {"n": 0}

    def dies_in_pass_two(run, log, batch, where, t):
        calls["n"] += 1
        if calls["n"] == step.inner + 2:
            raise KeyboardInterrupt
        return real(run, log, batch, where, t)

    monkeypatch.setattr(loop, "apply_update", dies_in_pass_two)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "broken", "job", step)
    assert any((tmp_path / "broken/job").glob("resume*"))
    monkeypatch.setattr(loop, "apply_update", real)
    _, resumed = _run(tmp_path / "broken", "job", step)
    assert resumed.weights_sha256 == whole.weights_sha256
    assert resumed.checkpoint["loss_curve"] == whole.checkpoint["loss_curve"]


def test_cpu_weights_continue_on_a_device(tmp_path, monkeypatch):
    """A base weights file moved between devices just works: files are host float32."""
    _, first = _run(tmp_path, "first", override(DEFAULT_JOB, outer=2))
    _on(monkeypatch, target_device("strict"))
    base = str(tmp_path / "first/weights.safetensors")
    _, second = _run(tmp_path, "second", override(DEFAULT_JOB, outer=2), base=base)
    assert second.checkpoint["loss_before"] == pytest.approx(first.checkpoint["loss_after"],
                                                             rel=LOSS_RTOL)
    assert second.checkpoint["base_step_n"] == 1


def test_out_of_memory_on_a_device_is_one_line_and_keeps_the_outputs(tmp_path, monkeypatch):
    job, good = _run(tmp_path, "job", DEFAULT_JOB)
    before = {p.name: p.read_bytes() for p in job.out_dir.iterdir() if p.is_file()}
    _on(monkeypatch, target_device("strict"))

    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError's name
        pass

    def no_memory(*a, **k):
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(loop, "apply_update", no_memory)
    with pytest.raises(TrainingFailed) as err:
        _run(tmp_path, "job", DEFAULT_JOB)
    msg = str(err.value)
    assert "ran out of memory" in msg and "batch_size 8" in msg and "dim 32" in msg
    assert "\n" not in msg and err.value.exit_code == 1
    after = {p.name: p.read_bytes() for p in job.out_dir.iterdir() if p.is_file()}
    assert {n: after[n] for n in before} == before


def test_out_of_memory_on_the_cpu_is_not_rewritten(tmp_path, monkeypatch):
    _on(monkeypatch, CPU)

    def no_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(loop, "apply_update", no_memory)
    with pytest.raises(MemoryError):
        _run(tmp_path, "job", DEFAULT_JOB)


# ------------------------------------------------------------ the command lines

def _train(tmp_path, *flags, params=None):
    args = ["train", "--dataset", PAIRS, "--out", str(tmp_path / "job"), "--outer", "1",
            "--inner", "2", *flags]
    if params:
        args += ["--params", str(params)]
    return run_spark(args, cwd=ROOT)


def test_device_tpu_is_refused_by_the_flag(tmp_path):
    rc, out, err = _train(tmp_path, "--device", "tpu")
    assert rc == 2 and "--device" in err and "tpu" in err
    assert "Traceback" not in err and not (tmp_path / "job").exists()


def test_a_device_that_is_not_a_name_in_params_is_one_line(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text((ROOT / "params.yaml").read_text().replace(
        "  device: cpu", "  device: 3"))
    rc, out, err = _train(tmp_path, params=params)
    assert_one_line_error(rc, err, "step.device")
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("kind", ["cuda", "mps"])
def test_a_gpu_that_cannot_be_had_is_one_line_and_writes_nothing(kind, tmp_path):
    try:
        import torch  # noqa: F401
        have = torch.cuda.is_available() if kind == "cuda" else torch.backends.mps.is_available()
    except ImportError:
        have = False
    if have:
        pytest.skip(f"this machine has a {kind} device")
    rc, out, err = _train(tmp_path, "--device", kind)
    assert_one_line_error(rc, err, f"--device {kind}")
    assert not (tmp_path / "job").exists()


def test_the_cli_device_lists_agree():
    from sparktrain.cli.eval import DEVICES as EVAL_DEVICES
    from sparktrain.model.devices import DEVICES
    from sparktrain.params import StepConfig as S

    assert set(EVAL_DEVICES) == set(DEVICES)
    assert set(S.__pydantic_fields__["device"].annotation.__args__) == set(DEVICES)


def test_cpu_records_the_device_it_ran_on(tmp_path):
    _, result = _run(tmp_path, "job", DEFAULT_JOB)
    ck = json.loads((tmp_path / "job/checkpoint.json").read_text())
    assert ck["device"] == "cpu" == result.perf["device"]
    with pytest.raises(SparkError):
        override(DEFAULT_JOB, device="tpu")
