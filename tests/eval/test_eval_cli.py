"""spark eval / generate / make-data / plot, and their one-line errors (exit 2)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparktrain.cli import main
from sparktrain.model.build import build_model
from sparktrain.model.weights import save_weights

from evalkit import SMALL
from sparkhelp import run_spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "w.safetensors"
    params = build_model(SMALL).init_params(seed=0)
    save_weights(path, params, {"arch": SMALL.to_dict(), "step_n": 1})
    return path


@pytest.fixture
def heldout(tmp_path):
    path = tmp_path / "held.jsonl"
    path.write_text('{"prompt": "Say exactly: abc", "completion": "abc", "family": "copy"}\n'
                    '{"messages": [{"role": "user", "content": "hi"}, '
                    '{"role": "assistant", "content": "yo"}]}\n')
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, out, err, needle):
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("spark: error: ") and needle in err, err
    assert "Traceback" not in err


def test_eval_json_and_table_and_out_file(capsys, tmp_path, weights, heldout):
    code, out, err = run(capsys, "eval", "--weights", weights, "--data", heldout, "--json",
                         "-o", tmp_path / "eval.json")
    assert code == 0 and err == ""
    m = json.loads(out)
    assert m["n"] == 2 and m["n_copy_probes"] == 1 and set(m["families"]) == {"copy", "chat"}
    assert (tmp_path / "eval.json").read_text() == out
    code, out2, _ = run(capsys, "eval", "--weights", weights, "--data", heldout, "--json")
    assert out2 == out  # deterministic
    code, table, _ = run(capsys, "eval", "--weights", weights, "--data", heldout)
    assert code == 0 and "next_token_accuracy" in table and "copy" in table
    assert f"{m['loss']:.4f}" in table


def test_generate_prints_text_and_notes_truncation(capsys, weights):
    code, out, err = run(capsys, "generate", "--weights", weights, "--max-new", "5", "hello")
    assert code == 0 and out.endswith("\n")
    n = len(out[:-1].encode())           # ASCII or replacement characters: bytes made
    why = "--max-new 5 reached" if n >= 5 else "end-of-text token (EOS) came next"
    assert err.startswith("spark: note: ") and err.count("\n") == 1 and why in err, err
    # the reason is the one that held: EOS, when fewer than --max-new bytes came
    code, _, err = run(capsys, "generate", "--weights", weights, "--max-new", "1", "hello")
    assert code == 0 and err.startswith("spark: note: 1 byte generated; stopped: --max-new 1")
    code, out2, err = run(capsys, "generate", "--weights", weights, "--max-new", "5",
                          "y" * 100)
    assert code == 0 and "keeping its last 32 tokens" in err


def test_make_data_and_plot(capsys, tmp_path):
    code, out, _ = run(capsys, "make-data", "--out-dir", tmp_path, "--seed", "0")
    assert code == 0 and "2000 rows" in out
    assert (tmp_path / "data/eval/scale_heldout.jsonl").read_bytes() == \
        (ROOT / "data/eval/scale_heldout.jsonl").read_bytes()
    ckpt = tmp_path / "checkpoint.json"
    ckpt.write_text(json.dumps({"loss_curve": [{"outer": 0, "loss": 5.5, "phase": "start"},
                                               {"outer": 1, "loss": 4.5,
                                                "phase": "after_outer"}]}))
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"loss": 4.9}))
    code, out, _ = run(capsys, "plot", "--checkpoint", ckpt, "--eval", ev, "-o", tmp_path / "l.png")
    assert code == 0 and (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"


def test_errors_are_one_line_exit_2(capsys, tmp_path, weights, heldout):
    foreign = tmp_path / "foreign.safetensors"
    from safetensors.numpy import save_file
    import numpy as np
    save_file({"x": np.zeros(2, np.float32)}, str(foreign))
    wrong_shape = tmp_path / "wrong.safetensors"
    params = build_model(SMALL).init_params(seed=0)
    params["spark.embed.weight"] = params["spark.embed.weight"][:, :8]
    save_weights(wrong_shape, params, {"arch": SMALL.to_dict()})
    bad_rows = tmp_path / "bad.jsonl"
    bad_rows.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "a"}\n')
    ckpt = tmp_path / "ckpt.json"
    ckpt.write_text('{"job": "x"}')
    cases = [
        (["eval", "--weights", tmp_path / "none", "--data", heldout], "does not exist"),
        (["eval", "--weights", foreign, "--data", heldout], "not Spark weights"),
        (["eval", "--weights", wrong_shape, "--data", heldout], "has shape"),
        (["eval", "--weights", weights, "--data", bad_rows], f"{bad_rows}:2: missing 'completion'"),
        (["eval", "--weights", weights, "--data", tmp_path], "is a folder"),
        (["eval", "--weights", weights, "--data", heldout, "--batch-size", "0"], "--batch-size"),
        (["generate", "--weights", weights, ""], "prompt is empty"),
        (["generate", "--weights", foreign, "hi"], "not Spark weights"),
        (["generate", "--weights", weights, "--temperature", "-1", "hi"], "temperature"),
        (["plot", "--checkpoint", tmp_path / "none.json", "-o", tmp_path / "p.png"],
         "does not exist"),
        (["plot", "--checkpoint", ckpt, "-o", tmp_path / "p.png"], "no 'loss_curve'"),
        (["plot", "--checkpoint", heldout, "-o", tmp_path / "p.png"], "not JSON"),
    ]
    for argv, needle in cases:
        one_line_error(*run(capsys, *argv), needle)
    assert not (tmp_path / "p.png").exists()


def test_real_process_error_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sparktrain.cli", "eval", "--weights",
                           str(tmp_path / "none"), "--data", str(tmp_path / "none.jsonl")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_generate_help_counts_tokens_not_bytes():
    rc, out, _ = run_spark(["generate", "--help"])
    assert rc == 0
    flat = " ".join(out.split())
    assert "--max-new tokens (bytes for a byte model)" in flat and "--max-new bytes" not in flat
