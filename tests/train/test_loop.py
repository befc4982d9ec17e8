"""The STEP loop: it trains, it is honest about it, and it is reproducible."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.core.fsutil import sha256_file
from sparktrain.model.config import SCALES
from sparktrain.model.weights import load_weights
from sparktrain.data.source import source_for
from sparktrain.params import Defaults, StepConfig, parse_params
from sparktrain.train.job import adhoc_job, job_from_program
from sparktrain.data.pairs import MinibatchSampler
from sparktrain.train import records
from sparktrain.train.folder import JobFolder
from sparktrain.train.runner import run_job
from sparktrain.train.jobstate import job_state
from sparktrain.train.outputs import parse_artifact

TINY = SCALES["tiny"]
PROGRAM = "data/programs/train-step.sparkbc"
QUIET = dict(progress=lambda line: None)


def pairs(job, heldout=None):
    """The data source a job's dataset names, as the train commands make it."""
    return source_for(job.dataset, Defaults(), heldout)


def _train(project, monkeypatch, step=StepConfig(), cfg=TINY, out="out/train/job-dry-001"):
    monkeypatch.chdir(project)
    job = job_from_program(PROGRAM, "job-dry-001") if out == "out/train/job-dry-001" \
        else adhoc_job("data/train/dataset.jsonl", out, None)
    return job, run_job(job, step, cfg, pairs(job), **QUIET)


def test_default_tiny_job_learns(project, monkeypatch):
    job, res = _train(project, monkeypatch)
    c = res.checkpoint
    assert c["loss_after"] <= 0.75 * c["loss_before"], (c["loss_before"], c["loss_after"])
    assert [e["outer"] for e in c["loss_curve"]] == [0, 1, 2, 3, 4]
    assert c["loss_curve"][0] == {"outer": 0, "loss": c["loss_before"], "phase": "start"}
    assert c["loss_curve"][-1]["loss"] == c["loss_after"]
    for key, want in dict(trained=True, not_sgd=False, sgd=True, claim=False, device="cpu",
                          step_n=1, outer=4, inner=8, dataset_n=24).items():
        assert c[key] == want, key
    folder = project / "out/train/job-dry-001"
    assert sha256_file(folder / "weights.safetensors") == c["weights_sha256"]
    on_disk = json.loads((folder / "checkpoint.json").read_text())
    assert on_disk == c
    art = parse_artifact((folder / "ARTIFACT").read_text())
    assert art["header"] == "spark-train-sgd job-dry-001"
    assert art["trained"] == "true" and art["not_sgd"] == "false" and art["step_n"] == "1"
    assert art["weights"] == "out/train/job-dry-001/weights.safetensors"
    params, meta = load_weights(folder / "weights.safetensors")
    assert meta["trained"] is True and meta["step_n"] == 1
    assert meta["loss_after"] == c["loss_after"]
    assert meta["sparkbc_sha256"] == sha256_file(project / PROGRAM)
    assert job_state(folder)["state"] == "trained"


def test_every_tensor_changes_and_frozen_embed_stays(project, monkeypatch):
    from sparktrain.model.build import build_model

    job, res = _train(project, monkeypatch, StepConfig(train_embed=False, outer=1, inner=2))
    salt = bytes.fromhex(job.sparkbc_sha256)
    init = build_model(TINY).init_params(0, salt)
    trained, _ = load_weights(project / job.out / "weights.safetensors")
    for name in init:
        same = np.array_equal(init[name], trained[name])
        assert same == (name == "spark.embed.weight"), name


def test_same_inputs_same_bytes(project, monkeypatch, tmp_path_factory):
    import shutil

    other = tmp_path_factory.mktemp("again")
    shutil.copytree(project / "data", other / "data")
    _, a = _train(project, monkeypatch)
    _, b = _train(other, monkeypatch)
    for name in ("weights.safetensors", "checkpoint.json", "ARTIFACT"):
        assert a.files[name] == b.files[name], name
        assert (project / "out/train/job-dry-001" / name).read_bytes() == \
               (other / "out/train/job-dry-001" / name).read_bytes()


def _outputs(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()
            if p.name != "failed.json" and p.is_file()}


def _assert_kept(folder, before):
    after = _outputs(folder)
    for name in ("weights.safetensors", "checkpoint.json", "ARTIFACT"):
        assert after[name] == before[name], name
    assert not list(folder.glob(".*.pending")) and not (folder / ".commit").exists()


def test_loss_that_does_not_fall_fails_loud_and_keeps_outputs(project, monkeypatch):
    import sparktrain.train.loop as loop

    job, good = _train(project, monkeypatch)
    folder = project / job.out
    before = _outputs(folder)
    rising = iter([3.0, 3.1, 3.2, 3.3, 3.4])
    monkeypatch.setattr(loop, "score", lambda *a: {"loss": next(rising)})
    with pytest.raises(TrainingFailed, match="loss did not fall"):
        run_job(job, StepConfig(), TINY, pairs(job), **QUIET)
    _assert_kept(folder, before)


def test_no_weight_change_fails_loud(project, monkeypatch):
    job, good = _train(project, monkeypatch)
    folder = project / job.out
    before = _outputs(folder)
    with pytest.raises(TrainingFailed, match="no weight changed"):
        run_job(job, StepConfig(lr=1e-30, momentum=0, outer=1, inner=1), TINY, pairs(job),
                         **QUIET)
    _assert_kept(folder, before)


def test_divergence_fails_loud_and_keeps_outputs(project, monkeypatch):
    from sparktrain.model.weights import save_weights

    job, good = _train(project, monkeypatch)
    folder = project / job.out
    before = _outputs(folder)
    params, meta = load_weights(folder / "weights.safetensors")
    params["spark.lm_head.weight"] = params["spark.lm_head.weight"] * np.float32(3e38)
    save_weights(project / "out/huge.safetensors", params, meta)
    huge = adhoc_job("data/train/dataset.jsonl", job.out, "out/huge.safetensors")
    with np.errstate(all="ignore"), pytest.raises(TrainingFailed, match="diverged"):
        run_job(huge, StepConfig(step=2), TINY, pairs(huge), **QUIET)
    _assert_kept(folder, before)


def test_resume_from_base_counts_steps(project, monkeypatch):
    job, first = _train(project, monkeypatch, out="out/first")
    base = "out/first/weights.safetensors"
    again = adhoc_job("data/train/dataset.jsonl", "out/second", base)
    res = run_job(again, StepConfig(outer=1, inner=2, lr=0.01), TINY, pairs(again),
                           **QUIET)
    assert res.checkpoint["step_n"] == 2 and res.checkpoint["base_step_n"] == 1
    assert res.checkpoint["loss_before"] == pytest.approx(first.checkpoint["loss_after"], rel=1e-6)
    with pytest.raises(SparkError, match="greater than the base's step_n 1"):
        run_job(again, StepConfig(step=1), TINY, pairs(again), **QUIET)


def test_pool_fallback_trains_only_embed_and_head(project, monkeypatch):
    cfg = TINY.__class__(**{**TINY.to_dict(), "train_attn": False})
    job, res = _train(project, monkeypatch, StepConfig(train_attn=False, lr=0.5), cfg,
                      out="out/pool")
    params, _ = load_weights(project / "out/pool/weights.safetensors")
    assert sorted(params) == ["spark.embed.weight", "spark.lm_head.weight"]
    assert res.checkpoint["loss_after"] < res.checkpoint["loss_before"]
    assert res.checkpoint["train_attn"] is False and res.checkpoint["n_params"] == 2 * 256 * 32
    # an attention run cannot continue from the mean-pool weights
    onto = adhoc_job("data/train/dataset.jsonl", "out/attn", "out/pool/weights.safetensors")
    with pytest.raises(SparkError, match="trained with train_attn=False"):
        run_job(onto, StepConfig(), TINY, pairs(onto), **QUIET)


def test_sampler_whole_dataset_in_file_order_and_seeded_epochs():
    s = MinibatchSampler(5, 8, seed=3)
    assert s.next().tolist() == [0, 1, 2, 3, 4]
    a, b = MinibatchSampler(10, 5, seed=1), MinibatchSampler(10, 5, seed=1)
    first = [a.next().tolist() for _ in range(4)]
    assert first == [b.next().tolist() for _ in range(4)]
    assert sorted(first[0] + first[1]) == list(range(10))   # one epoch covers every row
    assert first[:2] != first[2:]                           # reshuffled each epoch


def test_heldout_loss_after_every_pass_matches_eval(project, monkeypatch):
    from sparktrain.data.pairs_score import evaluate
    from sparktrain.model.weights import load_model
    from sparktrain.data.pairs import load_pairs

    monkeypatch.chdir(project)
    job = job_from_program(PROGRAM, "job-dry-001")
    heldout = "data/eval/tiny_heldout.jsonl"
    plain = run_job(job, StepConfig(), TINY, pairs(job), **QUIET).checkpoint
    c = run_job(job, StepConfig(step=2), TINY, pairs(job, heldout), **QUIET).checkpoint
    assert c["heldout"] == heldout and "heldout" not in plain
    # the held-out file is only measured, never trained on: same training losses
    assert [e["loss"] for e in c["loss_curve"]] == [e["loss"] for e in plain["loss_curve"]]
    assert all("heldout_loss" in e for e in c["loss_curve"])
    params, cfg, _ = load_model(job.out_dir / "weights.safetensors")
    final = evaluate(params, cfg, load_pairs(heldout), max_new=1, n_samples=0)["loss"]
    assert c["loss_curve"][-1]["heldout_loss"] == pytest.approx(final, rel=1e-6)
    assert len({round(e["heldout_loss"], 6) for e in c["loss_curve"]}) > 1


def test_pairs_job_trains_with_adamw_and_cosine(project, monkeypatch):
    """One optimizer module for both loops: AdamW and the schedule on a pairs job,
    recorded in the checkpoint; a different update than SGD's."""
    step = StepConfig(optimizer="adamw", lr=0.01, weight_decay=0.01, schedule="cosine",
                      warmup=4, min_lr=0.001)
    _, res = _train(project, monkeypatch, step)
    c = res.checkpoint
    assert c["loss_after"] < c["loss_before"]
    assert (c["optimizer"], c["schedule"], c["warmup"], c["min_lr"]) == ("adamw", "cosine", 4,
                                                                         0.001)
    _, sgd = _train(project, monkeypatch, StepConfig(lr=0.01))
    assert "optimizer" not in sgd.checkpoint and sgd.weights_sha256 != res.weights_sha256


def test_checkpoint_every_saves_states_of_a_pairs_job_too(project, monkeypatch):
    """One loop: a pairs job saves resumable states like a corpus job, and the
    saved states change nothing in the weights; the last commit removes them."""
    _, plain = _train(project, monkeypatch, StepConfig(outer=3))
    job, saved = _train(project, monkeypatch, StepConfig(outer=3, checkpoint_every=1))
    assert saved.weights_sha256 == plain.weights_sha256
    assert saved.checkpoint["checkpoint_every"] == 1
    assert not list((project / job.out).glob("resume.*"))


def test_records_say_what_ran_the_optimizer_and_every_process(project, monkeypatch):
    """ARTIFACT's mode names the device and the optimizer (cpu-sgd only for SGD), and
    perf.json's utilisation is over the peak of every process that computed."""
    _, sgd = _train(project, monkeypatch, StepConfig(outer=1, inner=2))
    folder = project / "out/train/job-dry-001"
    assert parse_artifact((folder / "ARTIFACT").read_text())["mode"] == "cpu-sgd"
    perf = json.loads((folder / "perf.json").read_text())
    # a run shorter than PEAK_MIN_TRAIN_S is not worth the peak's half second
    assert perf["train_seconds"] < records.PEAK_MIN_TRAIN_S and "mfu" not in perf
    assert "matmul_peak_flops_per_s" not in perf and perf["tokens_per_s"] > 0
    monkeypatch.setattr(records, "PEAK_MIN_TRAIN_S", 0.0)   # measured as for a long run
    _, res = _train(project, monkeypatch, StepConfig(outer=1, inner=2, optimizer="adamw",
                                                     lr=0.01, shards=2, workers=2))
    assert parse_artifact((folder / "ARTIFACT").read_text())["mode"] == "cpu-adamw"
    perf = json.loads((folder / "perf.json").read_text())
    assert perf["workers"] == 2 and perf["matmul_peak_processes"] == 2
    if "mfu" in perf:  # left out only when the measured peak could not make it <= 1
        assert 0 < perf["mfu"] <= 1
        want = perf["model_flops_per_s"] / (perf["matmul_peak_flops_per_s"] * 2)
        assert perf["mfu"] == pytest.approx(want, abs=1e-4)


def test_a_run_stopped_after_a_pass_is_the_whole_run_up_to_it(project, monkeypatch):
    """step.stop_after_pass k: the first k passes of the whole run, on its schedule (a
    cosine over all `outer` passes), recorded as such; a state the whole run saved after
    pass k resumes it to the same bytes as a fresh stopped run (spark tune's pruned
    trials: docs/tuning.md "Tuning")."""
    knobs = dict(outer=4, optimizer="adamw", lr=0.01, schedule="cosine", warmup=2)
    monkeypatch.setattr(JobFolder, "clear_resume", lambda self: None)   # the whole run's state
    job, whole = _train(project, monkeypatch, StepConfig(**knobs, checkpoint_every=2))
    assert (project / job.out / "resume.json").is_file()   # saved after pass 2, kept
    monkeypatch.undo()
    _, resumed = _train(project, monkeypatch, StepConfig(**knobs, checkpoint_every=2,
                                                         stop_after_pass=2))
    _, fresh = _train(project, monkeypatch, StepConfig(**knobs, checkpoint_every=2,
                                                       stop_after_pass=2))
    c = fresh.checkpoint
    assert c["loss_curve"] == whole.checkpoint["loss_curve"][:3]   # the same two passes
    assert (c["outer"], c["stop_after_pass"], c["micro_steps"]) == (4, 2, 16)
    assert c["trained"] is True and c["loss_after"] < c["loss_before"]
    assert resumed.weights_sha256 == fresh.weights_sha256 != whole.weights_sha256
    assert resumed.checkpoint["loss_curve"] == c["loss_curve"]
    assert "stop_after_pass" not in whole.checkpoint   # absent at 0: the default's bytes
    with pytest.raises(SparkError, match="stop_after_pass 4 is not before the last of the "
                                         "run's 4 outer passes"):
        parse_params({"job": "job-dry-001", "program": PROGRAM,
                      "step": {"outer": 4, "stop_after_pass": 4}})
