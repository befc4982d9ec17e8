"""The levers for data read more than once (docs/training.md "Reading the data more than
once"): step.sampling epoch reads every window of the stream once an epoch, in a new order;
step.ema commits an exponential moving average of the weights, PyTorch's AveragedModel
EMA; both are recorded, refused where they do not apply, and a run stopped mid-way resumes
to the same bytes."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.data.corpus import EpochWindows
from sparktrain.params import StepConfig, parse_params
from sparktrain.train.average import WeightAverage

from sparkhelp import ROOT, assert_one_line_error, run_spark
from test_corpus_loop import coder_project, pipeline
from test_optim_muon import STEP as MUON, stop_after_pass_2


def test_an_epoch_reads_every_window_once_from_one_offset_in_a_new_order():
    stream, seq = np.arange(1000, dtype=np.uint16), 16
    sampler = EpochWindows(stream, seq, 5, seed=3)
    count = len(sampler.order)
    first = [int(b.inputs[i, 0]) for b in (sampler.next() for _ in range(count // 5))
             for i in range(5)]
    assert len(set(first)) == len(first) == count - count % 5
    offset = first[0] % seq
    assert {s % seq for s in first} == {offset} and count == (1000 - 1 - offset) // seq
    assert first != sorted(first)                  # a random order, not the stream's
    rest = sampler.next()                          # the epoch's end and the next's start
    assert rest.inputs.shape == (5, seq) and sampler.pos == 5 - count % 5
    batch = sampler.next()
    np.testing.assert_array_equal(batch.targets[:, :-1], batch.inputs[:, 1:])
    assert (batch.mask == 1).all()


def test_an_epoch_sampler_resumes_its_draws_and_refuses_another_state():
    stream = np.arange(500, dtype=np.uint16)
    a = EpochWindows(stream, 8, 4, seed=0)
    for _ in range(20):                            # past the first epoch (61 windows)
        a.next()
    b = EpochWindows(stream, 8, 4, seed=0)
    b.set_state(json.loads(json.dumps(a.state())))
    for _ in range(30):
        np.testing.assert_array_equal(a.next().inputs, b.next().inputs)
    with pytest.raises(ValueError):
        b.set_state({**a.state(), "pos": 10_000})
    assert EpochWindows(stream, 8, 4, seed=1).next().inputs.tolist() != \
        EpochWindows(stream, 8, 4, seed=0).next().inputs.tolist()


def test_the_average_copies_the_first_weights_then_lerps_to_each_step():
    w = {"a": np.ones(3, np.float32), "b": np.zeros(2, np.float32)}
    avg = WeightAverage(0.9, w, ["a"])
    assert avg.weights(w) is w                     # before any step: the weights
    avg.update(w)
    w["a"] += 1.0                                  # an optimizer step (in place)
    assert avg.weights(w)["a"].tolist() == [1.0] * 3   # a copy, not the live array
    avg.update(w)
    np.testing.assert_array_equal(avg.weights(w)["a"], np.float32(1) + np.float32(0.1))
    assert avg.weights(w)["b"] is w["b"]           # an untrained tensor is the run's own


@pytest.mark.hf
def test_the_average_equals_torch_averaged_model_ema():
    torch = pytest.importorskip("torch")
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
    rng = np.random.default_rng(0)
    layer = torch.nn.Linear(4, 3)
    ref = AveragedModel(layer, multi_avg_fn=get_ema_multi_avg_fn(0.95))
    w = {n: p.detach().numpy().copy() for n, p in layer.named_parameters()}
    ours = WeightAverage(0.95, w, list(w))
    for _ in range(12):
        with torch.no_grad():
            for n, p in layer.named_parameters():
                p.add_(torch.tensor(rng.standard_normal(p.shape).astype(np.float32)))
                w[n][...] = p.numpy()
        ref.update_parameters(layer)
        ours.update(w)
    for n, p in ref.module.named_parameters():
        np.testing.assert_allclose(ours.weights(w)[n], p.detach().numpy(), rtol=1e-6,
                                   atol=1e-7)


@pytest.mark.parametrize("step, needle", [
    ({"ema": 0.99, "keep_best": True}, "ema commits the average"),
    ({"ema": 1.0}, "step.ema"), ({"sampling": "shuffle"}, "step.sampling")])
def test_incoherent_settings_are_refused_when_params_are_read(step, needle):
    with pytest.raises(SparkError, match=needle):
        parse_params({"job": "job-x-001", "program": "p.sparkbc", "step": step})


def test_epoch_sampling_of_a_pairs_job_is_one_line(tmp_path):
    done = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl", "--out",
                      tmp_path / "job", "--sampling", "epoch"], cwd=tmp_path)
    assert_one_line_error(*done[::2], "already reads its rows in a new order each epoch")
    assert not (tmp_path / "job").exists()


LEVERS = {**MUON, "sampling": "epoch", "ema": 0.9}


@pytest.mark.slow
def test_a_run_with_both_levers_records_them_and_resumes_to_the_same_bytes(tmp_path):
    whole = pipeline(coder_project(tmp_path / "a", step={**LEVERS, "workers": 2}))
    plain = pipeline(coder_project(tmp_path / "p", step=MUON))
    root = coder_project(tmp_path / "b", step={**LEVERS, "checkpoint_every": 1, "workers": 1})
    folder = pipeline(root, until="prepare")
    stop_after_pass_2(root, folder)
    pipeline(root, until="step")
    assert (folder / "weights.safetensors").read_bytes() == \
        (whole / "weights.safetensors").read_bytes()
    ck = json.loads((whole / "checkpoint.json").read_text())
    assert (ck["sampling"], ck["ema"]) == ("epoch", 0.9)
    assert ck["loss_after"] < ck["loss_before"]
    base = json.loads((plain / "checkpoint.json").read_text())
    assert "sampling" not in base and "ema" not in base
    assert ck["weights_sha256"] != base["weights_sha256"]
    # the curve's points are the average's: its start is the same model as the plain run's
    assert ck["loss_curve"][0] == base["loss_curve"][0]
    assert ck["loss_curve"][1:] != base["loss_curve"][1:]


def test_the_levers_are_recorded_only_when_set():
    from sparktrain.params import step_record
    assert not {"sampling", "ema"} & set(step_record(StepConfig()))
    rec = step_record(dataclasses.replace(StepConfig(optimizer="muon"), ema=0.99,
                                          sampling="epoch"))
    assert (rec["ema"], rec["sampling"]) == (0.99, "epoch")


def test_an_averaged_model_exports_with_its_knob_on_the_card(tmp_path):
    """The average is weights like any others: both formats take them, the card says ema
    (equal logits of exported weights: tests/export, the hf extra)."""
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl", "--out",
                            tmp_path / "run", "--outer", 4, "--inner", 8, "--lr", 0.05,
                            "--ema", 0.9], cwd=tmp_path)
    assert rc == 0, err
    weights = tmp_path / "run" / "weights.safetensors"
    assert json.loads((tmp_path / "run" / "checkpoint.json").read_text())["ema"] == 0.9
    for fmt, out in (("hf", tmp_path / "hf"), ("gguf", tmp_path / "m.gguf")):
        rc, _, err = run_spark(["export", "--to", fmt, "--weights", weights, out],
                               cwd=tmp_path)
        assert rc == 0, err
    assert "| ema | 0.9 |" in (tmp_path / "hf" / "README.md").read_text()
