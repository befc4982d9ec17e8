"""Round four, the other classes (issue items 9-17): BF16 weights, names over the
file-name limit, huge -S digits, zero shapes on import, the text source's one
rule and its row limit, text rows through `spark train`, SIGTERM, the worker and
step limits."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from safetensors.numpy import save

from relkit import FAST, TRAIN, snapshot, trained  # noqa: F401  (fixture)
from sparkhelp import (HANG_GUARD_S, PROMPT_GUARD_S, ROOT, assert_one_line_error,
                       run_spark)
from sparktrain.core.errors import SparkError


def _as_bf16(src, dest):
    """The same Spark weights with every tensor stored as BF16 (float32's top half)."""
    from sparktrain.model.weights import load_weights

    tensors, meta = load_weights(src)
    header, body = {}, b""
    for name, a in sorted(tensors.items()):
        raw = (a.view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape),
                        "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    header["__metadata__"] = {"spark": json.dumps(meta, sort_keys=True)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    dest.write_bytes(len(text).to_bytes(8, "little") + text + body)
    return tensors


def test_bf16_weights_convert_exactly_in_every_reader(trained, tmp_path):
    from sparktrain.model.weights import load_weights

    project, weights = trained
    bf16 = tmp_path / "weights.safetensors"
    f32 = _as_bf16(weights, bf16)
    got, _ = load_weights(bf16)
    for name, a in f32.items():  # BF16 keeps float32's top 16 bits: that, exactly
        want = ((a.view(np.uint32) >> 16) << 16).view(np.float32)
        np.testing.assert_array_equal(got[name], want)
    for argv in (["generate", "--weights", bf16, "hi"],
                 ["eval", "--weights", bf16, "--data", "data/eval/tiny_heldout.jsonl"],
                 ["export", "--to", "gguf", tmp_path / "m.gguf", "--weights", bf16],
                 TRAIN + ["--out", "out/from-bf16", "--base", bf16] + FAST):
        rc, _, err = run_spark(argv, cwd=project)
        assert rc == 0, f"{argv[0]}: {err}"


def test_an_unknown_dtype_is_named_with_what_is_accepted(tmp_path):
    from sparktrain.model.weights import load_weights

    data = save({"x": np.zeros(2, np.float32)}, metadata={"spark": "{}"})
    n = int.from_bytes(data[:8], "little")
    path = tmp_path / "w.safetensors"
    path.write_bytes(data[:8] + data[8:8 + n].replace(b'"F32"', b'"F8E"') + data[8 + n:])
    with pytest.raises(SparkError, match=r"tensor x is F8E; .*accepted: F32, F16, BF16"):
        load_weights(path)


LONG = "x" * 300


@pytest.mark.parametrize("argv", [
    ["status", LONG],
    ["train", "--dataset", LONG, "--out", "out/q"] + FAST,
    ["train", "--dataset", f"data/{LONG}/rows.jsonl", "--out", "out/q"] + FAST,
    ["import", LONG, "--from", "hf", "--out", "out/w.safetensors"],
    ["eval", "--weights", LONG, "--data", "data/eval/tiny_heldout.jsonl"],
])
def test_names_over_the_file_name_limit_are_one_line(trained, argv):
    project, _ = trained
    before = snapshot(project)
    rc, _, err = run_spark(argv, cwd=project)
    assert_one_line_error(rc, err)
    assert snapshot(project) == before


def test_sweep_values_of_5000_digits_are_a_refused_point_not_a_traceback():
    from sparktrain.core.safeload import load_yaml
    from sparktrain.sweep.grid import expand, parse_axis, point_record

    params = load_yaml((ROOT / "params.yaml").read_bytes(), "params.yaml")
    [point] = expand([parse_axis("step.outer=" + "9" * 5000)], params)
    assert point.error  # refused by the params schema, reported per point
    record = point_record(point, None, {}, point.error)
    assert record["state"] == "failed"


@pytest.mark.parametrize("changes, needle", [
    ({"num_attention_heads": 0}, "n_head"),
    ({"num_attention_heads": -4}, "n_head"),
    ({"num_key_value_heads": 0}, "n_kv_head"),
    ({"hidden_size": 0}, "dim"),
    ({"num_hidden_layers": 0}, "n_layer"),
    ({"max_position_embeddings": -1}, "seq_len"),
])
def test_import_refuses_zero_and_negative_shapes(trained, tmp_path, changes, needle):
    project, weights = trained
    folder = tmp_path / "hf"
    rc, _, err = run_spark(["export", "--to", "hf", folder, "--weights", weights])
    assert rc == 0, err
    conf = json.loads((folder / "config.json").read_text())
    conf.update(changes)
    (folder / "config.json").write_text(json.dumps(conf))
    rc, _, err = run_spark(["import", folder, "--from", "hf", "--out", tmp_path / "w.st"])
    assert_one_line_error(rc, err, needle)
    assert not (tmp_path / "w.st").exists()


def test_text_rows_kind_follows_the_reader_not_a_sniff(tmp_path):
    from sparktrain.data.source import TextSource

    big = tmp_path / "big.jsonl"  # a first row of 200 KiB: under the 1 MiB row cap
    big.write_text(json.dumps({"text": "word " * 40_000}) + "\n" + json.dumps({"text": "b"})
                   + "\n")
    assert TextSource.claims(str(big))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "a" * 100_000, "completion": "b"}) + "\n")
    assert not TextSource.claims(str(pairs))


def test_text_rows_train_through_spark_train(trained):
    project, _ = trained
    rows = project / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": f"row {i}: the quick brown fox. " * 4}) + "\n"
                            for i in range(300)))
    rc, out, err = run_spark(["train", "--dataset", "rows.jsonl", "--out", "out/rows",
                              "--params", "params.yaml"] + FAST,
                             cwd=project)
    assert rc == 0, err
    line = json.loads(out.strip().splitlines()[-1])
    assert line["trained"] is True and line["loss_after"] < line["loss_before"]


# The peak of this process's own memory: VmHWM starts afresh at exec, where ru_maxrss keeps
# the forked parent's (pytest's, hundreds of MiB late in a run) high-water mark.
PEAK = ("import re, sys; from sparktrain.cli import main; rc = main(sys.argv[1:]); "
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
        "print('PEAK', hwm, file=sys.stderr); sys.exit(rc)")


def test_too_many_tiny_text_rows_are_refused_before_any_write_in_bounded_memory(tmp_path):
    rows = tmp_path / "many.jsonl"
    with open(rows, "w") as f:
        for i in range(100_001):
            f.write('{"text": "r%d"}\n' % i)
    done = subprocess.run([sys.executable, "-c", PEAK, "train", "--dataset", str(rows),
                           "--out", str(tmp_path / "out/m"), "--outer", "1", "--inner", "1",
                           "--warmup", "0"],  # the text recipe's 30 would be refused first
                          capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("PEAK")]
    assert done.returncode == 2 and len(lines) == 1 and "100,000 text rows" in lines[0], \
        done.stderr
    peak = next(int(ln.split()[1]) for ln in done.stderr.splitlines() if ln.startswith("PEAK"))
    print(f"\n100,001 tiny text rows: refused, peak RSS {peak >> 10} MiB")
    assert peak < 600 << 10  # KiB: the rows are 1.5 MB; a folder of them is not gigabytes
    assert not (tmp_path / "out").exists()


def test_sigterm_during_train_is_one_line_143_and_keeps_the_last_good_run(trained):
    project, weights = trained
    before = {name: (weights.parent / name).read_bytes()
              for name in ("weights.safetensors", "checkpoint.json", "ARTIFACT")}
    proc = subprocess.Popen([sys.executable, "-m", "sparktrain.cli"] + TRAIN
                            + ["--out", "out/j", "--outer", "400", "--inner", "8"],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + PROMPT_GUARD_S
    while not (weights.parent / ".live-run").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=PROMPT_GUARD_S)
    lines = [ln for ln in err.splitlines()
             if ln.strip() and not ln.startswith(("[j]", "spark train:"))]
    assert proc.returncode == 143, err
    assert lines == ["spark: terminated (SIGTERM); the last good outputs are intact"], err
    assert not (weights.parent / ".live-run").exists()
    for name, data in before.items():
        assert (weights.parent / name).read_bytes() == data, name


@pytest.mark.parametrize("env, argv, needle", [
    ({"SPARK_WORKERS": "100000"}, ["--shards", "2"], "SPARK_WORKERS"),
    ({"SPARK_WORKERS": "9" * 5000}, ["--shards", "2"], "SPARK_WORKERS"),
    ({}, ["--workers", "100000", "--shards", "2"], "1024"),
    ({}, ["--outer", str(10 ** 18)], "outer"),
    ({}, ["--outer", "100000", "--inner", "100000"], "micro-steps"),
])
def test_worker_and_step_limits_hold_on_every_path(trained, env, argv, needle):
    project, _ = trained
    rc, _, err = run_spark(TRAIN + ["--out", "out/limits", "--outer", "1", "--inner", "1"]
                           + argv, cwd=project, env={**os.environ, **env})
    assert_one_line_error(rc, err, needle)
    assert not (project / "out/limits").exists()
