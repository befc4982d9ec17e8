"""`spark bench`: the command runs, reports sane numbers, refuses bad flags."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from sparktrain.cli import main
from sparktrain.core.safeload import load_yaml
from sparktrain.model.devices import DEVICES
from sparktrain.train import bench


def test_bench_json_reports_utilisation(capsys):
    assert main(["bench", "--scale", "tiny", "--batch-size", "2", "--steps", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["scale"] == "tiny" and r["batch_size"] == 2 and r["steps"] == 2
    assert r["tokens_per_s"] > 0 and r["matmul_peak_flops_per_s"] > 0
    assert r["model_flops_per_s"] == pytest.approx(r["tokens_per_s"] * r["flops_per_token"])
    assert r["utilisation"] == pytest.approx(r["model_flops_per_s"] / r["matmul_peak_flops_per_s"])
    assert r["blas_threads"] >= 1 and np.isfinite(r["final_loss"])


def test_bench_text_names_threads(capsys):
    assert main(["bench", "--batch-size", "1", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "BLAS threads" in out and "utilisation" in out


@pytest.mark.parametrize("argv", [["--batch-size", "0"], ["--steps", "x"]])
def test_bench_bad_flags_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_bench_unknown_scale_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no params.yaml: the built-in table only
    assert main(["bench", "--scale", "huge"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown scale 'huge'" in err[0] and "large, medium, tiny" in err[0]


def test_bench_takes_a_scale_of_the_params_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(
        "job: j\nprogram: p.sparkbc\nscales:\n  mini: {dim: 16, n_layer: 1, n_head: 2, "
        "n_kv_head: 1, seq_len: 16}\n")
    assert main(["bench", "--scale", "mini", "--steps", "1", "--json"]) == 0
    assert '"dim": 16' in capsys.readouterr().out


def test_synthetic_batch_is_fixed_and_full():
    a, b = bench.synthetic_batch(3, 8), bench.synthetic_batch(3, 8)
    np.testing.assert_array_equal(a.inputs, b.inputs)
    np.testing.assert_array_equal(a.inputs[:, 1:], a.targets[:, :-1])
    assert a.n_counted == 24


def test_sgd_step_moves_every_tensor():
    from sparktrain.model.build import build_model
    from sparktrain.model.config import SCALES
    cfg = SCALES["tiny"]
    params = build_model(cfg).init_params(0)
    before = {n: p.copy() for n, p in params.items()}
    _, grads = build_model(cfg).loss_and_grads(params, bench.synthetic_batch(2, cfg.seq_len))
    bench.sgd_step(params, grads, 0.1)
    assert all(not np.array_equal(before[n], params[n]) for n in params)


def test_bench_workers_reports_scaling_at_one_shard_count(capsys):
    assert main(["bench", "--scale", "tiny", "--batch-size", "4", "--steps", "1",
                 "--workers", "2", "--rounds", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    s = r["scaling"]
    assert s["shards"] == 2 and s["workers"] == [1, 2] and r["workers"] == 2
    assert s["same_bytes"] is True
    assert s["speedup"] == pytest.approx(s["tokens_per_s"][1] / s["tokens_per_s"][0])
    assert r["tokens_per_s"] == s["tokens_per_s"][1]
    assert s["load_average"] >= 0 and s["cores"] >= 1


def test_the_scaling_lines_say_the_load_beside_the_speed_up():
    r = {"rounds": 3, "scaling": {"shards": 2, "workers": [1, 2], "tokens_per_s": [100, 73],
                                  "speedup": 0.73, "same_bytes": True, "cores": 2,
                                  "load_average": 5.2}}
    loaded = bench._scaling_lines(r)
    assert "speed-up 0.73x" in loaded[2]
    assert loaded[3].startswith("load average      5.20") and "on 2 usable cores" in loaded[3]
    assert "other processes shared them" in loaded[3]
    r["scaling"]["load_average"] = 0.4
    assert "other processes" not in bench._scaling_lines(r)[3]


def test_bench_shards_change_the_bytes_not_the_workers():
    one = bench.run_bench("tiny", 4, 1, shards=1, workers=1, peak=1e9)
    two = bench.run_bench("tiny", 4, 1, shards=2, workers=1, peak=1e9)
    again = bench.run_bench("tiny", 4, 1, shards=2, workers=2, peak=1e9)
    assert one["params_sha256"] != two["params_sha256"] == again["params_sha256"]


def test_bench_bad_device_is_one_line_from_the_one_device_list(capsys):
    """`--device` takes its choices from model/device.DEVICES, as every other command's."""
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--device", "tpu"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'tpu'" in err[0]
    assert all(f"'{name}'" in err[0] for name in DEVICES)


def test_bench_runs_the_generic_path_on_a_device():
    """The bench's step on a non-numpy namespace (array-api-strict standing in for a GPU)."""
    import array_api_strict

    from sparktrain.model.device import Device
    dev = Device("strict", "array-api-strict", array_api_strict)
    cpu = bench.run_bench("tiny", batch_size=2, steps=1, peak=1.0)
    r = bench.run_bench("tiny", batch_size=2, steps=1, device=dev)
    assert r["device"] == "array-api-strict" and cpu["device"] == "cpu"
    assert r["tokens_per_s"] > 0 and r["matmul_peak_flops_per_s"] > 0
    assert r["final_loss"] == pytest.approx(cpu["final_loss"], rel=1e-5)


def test_bench_takes_the_vocab_and_optimizer_of_a_job(capsys):
    assert main(["bench", "--scale", "tiny", "--batch-size", "2", "--steps", "1",
                 "--vocab", "1024", "--optimizer", "adamw", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["vocab"] == r["arch"]["vocab"] == 1024 and r["update"].startswith("adamw")
    assert np.isfinite(r["final_loss"]) and r["final_loss"] > np.log(256)  # 1024-way softmax
    assert main(["bench", "--scale", "tiny", "--batch-size", "2", "--steps", "1", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["vocab"] == 256 and plain["update"] == "plain SGD"
    assert r["flops_per_token"] > plain["flops_per_token"]  # the wider LM head is counted


def test_bench_params_file_is_the_job_people_run(capsys):
    assert main(["bench", "--params", "data/programs/coder-proof.yaml", "--scale", "tiny",
                 "--steps", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["vocab"], r["batch_size"], r["shards"]) == (2048, 16, 2)
    assert r["arch"]["mlp"] == "relu2" and r["arch"]["qk_norm"]  # the proof's options too
    assert r["update"].startswith("muon (lr 0.02, clip 1, adam_lr 0.015, wsd")
    assert main(["bench", "--params", "data/programs/coder-proof.yaml", "--steps", "1",
                 "--json", "--scale", "tiny", "--batch-size", "4", "--shards", "1",
                 "--optimizer", "adamw"]) == 0
    flags = json.loads(capsys.readouterr().out)  # flags override the file
    assert (flags["batch_size"], flags["shards"], flags["workers"]) == (4, 1, 1)


def test_bench_another_optimizer_leaves_the_job_s_own_knobs_behind(capsys, tmp_path):
    """A muon job with decay, Polar Express and an embedding rate benches under sgd: the
    knobs sgd has none of go back to their defaults (they were refused in one line)."""
    doc = load_yaml(Path("data/programs/coder-proof.yaml").read_text(), "proof")
    doc["step"].update(muon_ns="polar", normuon=True, embed_lr=0.1)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    for optimizer in ("sgd", "adamw"):
        assert main(["bench", "--params", str(tmp_path / "p.yaml"), "--scale", "tiny",
                     "--steps", "1", "--batch-size", "2", "--json", "--optimizer", optimizer]) == 0
        r = json.loads(capsys.readouterr().out)
        assert r["update"].startswith(optimizer) and np.isfinite(r["final_loss"])
        assert ("embed_lr 0.1" in r["update"]) == (optimizer == "adamw")


def test_bench_medium_has_a_batch_and_help_names_every_scale(capsys):
    from sparktrain.model.config import SCALES

    assert bench.DEFAULT_BATCH.keys() == SCALES.keys()
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(name in out for name in SCALES)


def test_job_update_is_the_loop_update():
    """spark bench's update against the training loop's own apply_update, bytes for bytes."""
    from types import SimpleNamespace

    from sparktrain.model.build import build_model
    from sparktrain.model.config import SCALES
    from sparktrain.params import StepConfig
    from sparktrain.train.loop import apply_update
    from sparktrain.train.records import Counters
    from sparktrain.train.optim import make_optimizer
    from sparktrain.train.optim import JobUpdates

    cfg = SCALES["tiny"]
    model = build_model(cfg)
    step = StepConfig(optimizer="adamw", lr=0.01, clip=0.5, weight_decay=0.01,
                      schedule="cosine", warmup=1, outer=1, inner=3)
    batch = bench.synthetic_batch(2, cfg.seq_len)
    ours, theirs = model.init_params(0), model.init_params(0)
    update = JobUpdates(step, 3)(ours)
    names = list(theirs)
    run = SimpleNamespace(step=step, params=theirs, engine=model, trainable=names, model=model,
                          optimizer=make_optimizer(step, theirs, names), average=None)
    log = Counters(t0=0.0)
    for t in range(3):
        update(ours, model.loss_and_grads(ours, batch)[1], t)
        apply_update(run, log, batch, "test", t)
    assert log.clipped > 0  # the clip was exercised
    for n in names:
        np.testing.assert_array_equal(ours[n], theirs[n], err_msg=n)


def test_auto_on_the_cpu_says_when_a_run_would_grind():
    """`--device auto` landing on the CPU: one line with the estimate for a long run,
    nothing for a short one or for an explicit --device cpu."""
    from sparktrain.train.bench import GRIND_S, cpu_estimate_s, grind_note
    from sparktrain.model.config import SCALES
    from sparktrain.model.device import CPU

    big, tokens = SCALES["gpu"], 16 * 512 * 100
    assert cpu_estimate_s(big, tokens, peak=1e11) > GRIND_S
    note = grind_note(CPU, "auto", big, tokens, "spark bench --scale gpu")
    assert note is not None and "\n" not in note and "estimated ~" in note
    assert note.startswith("spark bench --scale gpu on the CPU")
    assert grind_note(CPU, "cpu", big, tokens, "x") is None
    assert grind_note(CPU, "auto", SCALES["tiny"], 64, "x") is None


def test_bench_steps_write_no_carriage_return_off_a_terminal(monkeypatch):
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    for i in range(1, 4):
        bench.stderr_progress(i, 3, 2.5)
    assert "\r" not in log.getvalue() and log.getvalue() == "step 3/3  loss 2.5000\n"
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    for i in range(1, 4):
        bench.stderr_progress(i, 3, 2.5)
    assert term.getvalue().count("\r") == 3 and term.getvalue().endswith("step 3/3  loss 2.5000\n")
