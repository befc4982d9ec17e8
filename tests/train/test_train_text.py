"""Your own text in one line: `spark train --dataset FOLDER --glob '*.txt'` (or JSONL
{"text": ...} rows) trains with the tiny coder recipe's knobs, not the pairs job's byte /
SGD defaults that lose to zlib, and `spark eval --weights W` scores the model on the
held-out split prepared beside it, outside DVC."""
import json
import shutil

import pytest
import yaml

from sparkhelp import ROOT, assert_one_line_error, run_spark

FAST = ["--outer", "1", "--inner", "3", "--warmup", "1"]   # the recipe, a few steps of it


def knobs_line(err: str) -> str:
    """`spark train`'s line naming its knobs (after the tokenizer and prepare lines)."""
    return next(ln for ln in err.splitlines() if ln.startswith("spark train: knobs"))


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notes")
    for p in sorted((ROOT / "data/corpus/tiny").glob("*.py"))[:24]:
        shutil.copy(p, folder / f"{p.stem}.txt")
    return folder


def test_a_folder_without_glob_says_how_to_name_its_files(text_folder, tmp_path):
    rc, _, err = run_spark(["train", "--dataset", text_folder, "--out", tmp_path / "o"])
    assert_one_line_error(rc, err, "matches no file", "--glob '*.txt'")
    assert not (tmp_path / "o").exists()


def test_a_text_folder_trains_with_the_recipe_and_spark_eval_scores_it(text_folder, tmp_path):
    out = tmp_path / "o"
    rc, _, err = run_spark(["train", "--dataset", text_folder, "--glob", "*.txt",
                            "--out", out, *FAST])
    assert rc == 0, err
    first = knobs_line(err)
    recipe = yaml.safe_load((ROOT / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    assert "tiny coder recipe" in first and f"optimizer {recipe['step']['optimizer']}" in first, \
        first
    assert "the dataset's own split" in first
    ck = json.loads((out / "checkpoint.json").read_text())
    assert ck["tokenizer"] == "bpe" and ck["dataset_kind"] == "corpus"
    rc, stdout, err = run_spark(["eval", "--weights", out / "weights.safetensors", "--json"])
    assert rc == 0, err
    m = json.loads(stdout)
    assert 0 < m["bpb"] < 16 and m["zlib9_bpb"] > 0 and m["heldout_bytes"] > 0
    assert m["weights"] == str(out / "weights.safetensors")
    rc, _, err = run_spark(["eval", "--weights", out / "weights.safetensors",
                            "--data", ROOT / "data/eval/tiny_heldout.jsonl"])
    assert_one_line_error(rc, err, "corpus model", "drop --data")


def test_jsonl_text_rows_train_with_the_recipe(text_folder, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": block}) + "\n"   # a row a paragraph
                            for p in sorted(text_folder.iterdir())
                            for block in p.read_text().split("\n\n") if block.strip()))
    rc, _, err = run_spark(["train", "--dataset", rows, "--out", tmp_path / "o", *FAST])
    assert rc == 0, err
    assert "tiny coder recipe" in knobs_line(err)
    ck = json.loads((tmp_path / "o/checkpoint.json").read_text())
    assert ck["dataset_kind"] == "text"


def test_a_pairs_model_still_needs_data_and_glob_needs_a_dataset(tmp_path):
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                            "--out", tmp_path / "pairs", "--outer", "1", "--inner", "2"])
    assert rc == 0, err
    assert "knobs from the defaults" in knobs_line(err)     # pairs: the defaults, as before
    rc, _, err = run_spark(["eval", "--weights", tmp_path / "pairs/weights.safetensors"])
    assert_one_line_error(rc, err, "pairs model", "--data")
    rc, _, err = run_spark(["train", "--glob", "*.txt", "--out", tmp_path / "o"])
    assert_one_line_error(rc, err, "--glob", "--dataset FOLDER")


def test_heldout_sets_a_folders_fraction_and_params_may_hold_only_changes(text_folder,
                                                                          tmp_path):
    """A newcomer's folder: --heldout is the fraction of its files held out (a held-out
    JSONL path for it is refused, not ignored), and a params file of two keys is read."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("step:\n  outer: 1\n  inner: 2\n")       # no job, no program: the defaults
    out = tmp_path / "o"
    rc, _, err = run_spark(["train", "--dataset", text_folder, "--glob", "*.txt", "--out", out,
                            "--params", mine, "--heldout", "0.5"])
    assert rc == 0, err
    first = knobs_line(err)
    assert f"knobs from {mine} and flags" in first and "outer 1, inner 2" in first, first
    assert "the dataset's own split, 0.5 of its files" in first
    assert "tiny_heldout" not in first, "a corpus run names no pairs file"
    files = json.loads((out / "corpus" / "files.json").read_text())
    assert files["heldout_fraction"] == 0.5
    assert 0.3 < files["heldout_files"] / (files["heldout_files"] + files["train_files"]) < 0.7
    rc, _, err = run_spark(["train", "--dataset", text_folder, "--glob", "*.txt",
                            "--out", tmp_path / "p", "--heldout",
                            ROOT / "data/eval/tiny_heldout.jsonl"])
    assert_one_line_error(rc, err, "--heldout", "fraction of files held out")
    assert not (tmp_path / "p").exists()


def test_an_empty_heldout_split_names_the_flag_that_sets_it(tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.py", "b.py"):     # at 0.1 both land in the train split
        (folder / name).write_text("x = 1\n" * 50)
    rc, _, err = run_spark(["train", "--dataset", folder, "--out", tmp_path / "o", *FAST])
    assert_one_line_error(rc, err, "held-out split is empty", "spark train --heldout")


def test_a_params_file_of_one_key_trains_a_pairs_job(tmp_path):
    (tmp_path / "lr.yaml").write_text("step:\n  lr: 0.05\n")
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                            "--out", tmp_path / "o", "--outer", "1", "--inner", "2",
                            "--params", tmp_path / "lr.yaml"], cwd=ROOT)
    assert rc == 0, err
    assert "lr 0.05," in knobs_line(err) and "held-out data/eval/tiny_heldout.jsonl" in \
        knobs_line(err), "a params file's eval.data (its default) is measured, as before"
