"""Generated task data: deterministic, committed, checkable, held out for real."""
import json
from pathlib import Path

from sparktrain.data.tasks import (EVAL_FILE, PREFIXES, TRAIN_FILE, family_of, is_heldout,
                                   make_rows, write_scale_data)
from sparktrain.data.pairs import load_dataset, load_pairs

ROOT = Path(__file__).resolve().parents[2]


def test_regenerated_files_equal_the_committed_ones(tmp_path):
    written = write_scale_data(tmp_path, seed=0)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [TRAIN_FILE, EVAL_FILE]
    for rel in (TRAIN_FILE, EVAL_FILE):
        assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes(), rel


def test_same_seed_same_bytes_other_seed_other_rows(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_scale_data(a, seed=3)
    write_scale_data(b, seed=3)
    write_scale_data(c, seed=4)
    assert (a / TRAIN_FILE).read_bytes() == (b / TRAIN_FILE).read_bytes()
    assert (a / TRAIN_FILE).read_bytes() != (c / TRAIN_FILE).read_bytes()


def _answer(family, prompt):
    """Each family's rule, written independently of the generator."""
    arg = prompt[len(PREFIXES[family]):]
    if family == "copy":
        return arg
    if family == "reverse":
        return arg[::-1]
    if family == "upper":
        return arg.upper()
    if family == "next":
        return str(int(arg) + 1) if arg.isdigit() else chr(ord(arg) + 1)
    key, listing = arg.split(" in: ")
    return dict(kv.split("=") for kv in listing.split())[key]


def test_rows_are_correct_short_and_fit_the_tiny_context():
    for rel, n in ((TRAIN_FILE, 2000), (EVAL_FILE, 200)):
        rows = [json.loads(line) for line in (ROOT / rel).read_text().splitlines()]
        assert len(rows) == n
        assert len({r["prompt"] for r in rows}) == n  # no duplicate prompts
        for r in rows:
            assert family_of(r["prompt"]) == r["family"]
            assert _answer(r["family"], r["prompt"]) == r["completion"], r
            if r["family"] in ("copy", "reverse", "upper"):
                word = r["prompt"].split(": ", 1)[1]
                assert 3 <= len(word) <= 8 and word.isalpha() and word.islower()
        assert load_dataset(ROOT / rel, seq_len=64).n_truncated == 0
    assert {r.family for r in load_pairs(ROOT / EVAL_FILE)} == set(PREFIXES)


def test_heldout_words_come_from_their_own_side():
    for heldout in (False, True):
        for r in make_rows(1, heldout):
            if r["family"] in ("copy", "upper"):
                assert is_heldout(r["prompt"].split(": ", 1)[1]) == heldout


def test_no_eval_prompt_is_a_training_prompt():
    train_files = sorted((ROOT / "data/train").glob("*.jsonl"))
    eval_files = sorted((ROOT / "data/eval").glob("*.jsonl"))
    assert len(train_files) >= 2 and len(eval_files) >= 2
    train_prompts = {p.prompt for f in train_files for p in load_pairs(f)}
    for f in eval_files:
        overlap = {p.prompt for p in load_pairs(f)} & train_prompts
        assert not overlap, f"{f.name} shares prompts with training: {sorted(overlap)[:3]}"


def test_family_inference():
    assert family_of("Say exactly: x") == "copy"
    assert family_of("Look up a in: a=b") == "lookup"
    assert family_of("hello") == "chat"
    assert family_of("hello", "custom") == "custom"
