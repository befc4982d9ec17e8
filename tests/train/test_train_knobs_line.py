"""`spark train --dataset` says first where its knobs came from, and logs the
held-out loss per pass when --heldout is given."""
from sparkhelp import ROOT, run_spark


def test_first_line_names_the_defaults_and_heldout_is_logged(tmp_path):
    (tmp_path / "params.yaml").write_text("step:\n  lr: 0.05\n")   # not read without --params
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                            "--out", tmp_path / "o", "--outer", "1", "--inner", "3",
                            "--heldout", ROOT / "data/eval/tiny_heldout.jsonl"], cwd=tmp_path)
    assert rc == 0, err
    lines = err.splitlines()
    assert lines[0].startswith("spark train: knobs from the defaults and flags (no --params")
    assert "lr 0.1," in lines[0] and "outer 1, inner 3" in lines[0]
    assert "tiny_heldout.jsonl" in lines[0]
    assert any("outer 1/1" in ln and "held-out" in ln for ln in lines[1:])


def test_with_params_the_first_line_names_the_file(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text((ROOT / "params.yaml").read_text().replace("  lr: 0.03", "  lr: 0.2"))
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                            "--out", tmp_path / "o", "--outer", "1", "--inner", "4", "--params", params], cwd=ROOT)
    assert rc == 0, err
    assert err.splitlines()[0].startswith(f"spark train: knobs from {params} and flags: lr 0.2,")
