"""A pairs job (JSONL prompt/completion) with `tokenizer: bpe`: the BPE is trained
on the training file in the tokenizer stage, rows are its ids, the weights record
its sha256, and eval / generate read the pairs in those ids."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from sparkhelp import ROOT, assert_one_line_error, run_spark
from sparktrain.data.tokenizer import load_tokenizer, train_bpe
from sparktrain.core.fsutil import sha256_file
from sparktrain.model.weights import load_model
from sparktrain.data.pairs import Pair, encode_pair, load_dataset, load_pairs
from test_corpus_loop import coder_project, stage

JOB = "job-dry-001"
STEPS = ("decode_bc", "tokenizer", "prepare", "train_status", "step", "eval")


@pytest.fixture(scope="module")
def bpe_pairs(tmp_path_factory):
    root = coder_project(tmp_path_factory.mktemp("pairs-bpe"), job=JOB,
                         program="data/programs/train-step.sparkbc", tokenizer="bpe",
                         vocab_size=300, step={"outer": 4, "inner": 8, "lr": 0.1,
                                               "batch_size": 8})
    for name in STEPS:
        stage(root, name)
    return root, root / "out/train" / JOB


def test_a_pair_is_bos_prompt_sep_completion_eos_in_the_tokenizers_ids():
    texts = [t for p in load_pairs(ROOT / "data/train/dataset.jsonl")
             for t in (p.prompt, p.completion)]
    tok = train_bpe(texts, 300)
    assert 256 < tok.vocab <= 300 and (tok.bos, tok.sep, tok.eos) == (0, 1, 2)
    pair = Pair("what is 2+2?", "4 exactly", 0)
    e = encode_pair(pair, 64, tok)
    head = [tok.bos, *tok.encode(pair.prompt), tok.sep]
    assert e.tokens.tolist() == head + tok.encode(pair.completion).tolist() + [tok.eos]
    assert e.tokens.dtype == np.uint16  # a vocab above 256 does not fit a byte
    # targets after the SEP count: the completion's ids and the EOS
    assert e.mask.tolist() == [0.0] * (len(head) - 1) + [1.0] * (len(e.tokens) - len(head))
    assert e.context.tolist() == head and e.first_target == tok.encode(pair.completion)[0]
    cut = encode_pair(pair, 3, tok)  # truncation keeps the last seq_len + 1 tokens
    assert cut.truncated and cut.tokens.tolist() == e.tokens.tolist()[-4:]
    ds = load_dataset(ROOT / "data/train/dataset.jsonl", 64, tok)
    assert ds.encoded.tokens.dtype == np.uint16
    assert ds.encoded[0].tokens.tolist() == encode_pair(
        load_pairs(ROOT / "data/train/dataset.jsonl")[0], 64, tok).tokens.tolist()
    # no tokenizer: the byte tokens, as before
    assert encode_pair(pair, 64).tokens.tolist() == [0xFD, *b"what is 2+2?", 0xFE,
                                                     *b"4 exactly", 0xFF]


def test_the_pairs_job_trains_on_bpe_ids_and_records_the_tokenizer(bpe_pairs):
    root, folder = bpe_pairs
    tok = load_tokenizer(folder / "tokenizer.json")
    assert tok.kind == "bpe" and 256 < tok.vocab <= 300
    ck = json.loads((folder / "checkpoint.json").read_text())
    assert ck["loss_after"] < ck["loss_before"]
    assert ck["arch"]["vocab"] == tok.vocab
    assert ck["tokenizer"] == "bpe" and ck["dataset_kind"] == "pairs"
    assert ck["tokenizer_sha256"] == sha256_file(folder / "tokenizer.json")
    params, cfg, meta = load_model(folder / "weights.safetensors")
    assert cfg.vocab == tok.vocab and params["spark.embed.weight"].shape[0] == tok.vocab
    assert meta["tokenizer_sha256"] == ck["tokenizer_sha256"]
    plan = json.loads((folder / "status.json").read_text())  # the plan counts BPE ids too
    assert plan["arch"]["vocab"] == tok.vocab and plan["dataset_tokens"] == ck["dataset_tokens"]
    assert plan["tokenizer_sha256"] == ck["tokenizer_sha256"]
    # the rows are the BPE's ids: fewer tokens than bytes
    byte_tokens = load_dataset(root / "data/train/dataset.jsonl", cfg.seq_len).n_tokens
    assert ck["dataset_tokens"] < byte_tokens


def test_eval_scores_bpe_pairs_with_bits_per_byte(bpe_pairs):
    root, folder = bpe_pairs
    ev = json.loads((folder / "eval.json").read_text())
    detail = json.loads((folder / "eval_detail.json").read_text())
    assert 0 < ev["bpb"] < 16 and ev["loss"] > 0 and 0 <= ev["exact_match"] <= 1
    assert detail["tokenizer"] == "bpe"
    assert detail["vocab"] == load_tokenizer(folder / "tokenizer.json").vocab
    # spark eval gives the same numbers as the stage, with the tokenizer beside the weights
    rc, out, err = run_spark(["eval", "--weights", folder / "weights.safetensors", "--data",
                              root / "data/eval/tiny_heldout.jsonl", "--json"])
    assert rc == 0, err
    got = json.loads(out)
    assert {k: got[k] for k in ev if k != "weights_sha256"} == \
        {k: v for k, v in ev.items() if k != "weights_sha256"}
    assert [s["generated"] for s in got["samples"]] == \
        [s["generated"] for s in detail["samples"]]


def test_generate_completes_a_prompt_in_bpe_ids(bpe_pairs):
    root, folder = bpe_pairs
    rc, out, err = run_spark(["generate", "--weights", folder / "weights.safetensors",
                              "--max-new", "8", "what is 2+2?"])
    assert rc == 0, err
    again = run_spark(["generate", "--weights", folder / "weights.safetensors",
                       "--max-new", "8", "what is 2+2?"])
    assert again[1] == out  # greedy: the same text every time


def test_a_mismatched_tokenizer_is_refused(bpe_pairs, tmp_path):
    root, folder = bpe_pairs
    other = train_bpe(["a different text entirely, " * 20, "zzz yyy xxx " * 30], 300)
    wrong = tmp_path / "tokenizer.json"
    wrong.write_text(other.to_json())
    for cmd in (["eval", "--data", root / "data/eval/tiny_heldout.jsonl"],
                ["generate", "hi"]):
        rc, _, err = run_spark(cmd + ["--weights", folder / "weights.safetensors",
                                      "--tokenizer", wrong])
        assert_one_line_error(rc, err, "is not the tokenizer")
    # the eval stage reads the job's tokenizer.json: a swapped file is refused too
    copy = tmp_path / "proj"
    shutil.copytree(root, copy)
    (copy / "out/train" / JOB / "tokenizer.json").write_text(other.to_json())
    done = stage(copy, "eval", check=False)
    assert_one_line_error(done.returncode, done.stderr, "is not the tokenizer")
