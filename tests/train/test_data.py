"""Dataset rows, tokens, truncation, errors and batch layout (docs/model.md "Dataset rows", "Tokens")."""
import json

import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.model.base import PAD, PoolBatch, TokenBatch
from sparktrain.data.pairs import (BOS, EOS, SEP, Pair, encode_pair, iter_batches, load_dataset,
                                   load_pairs)


def write(tmp_path, text, name="d.jsonl"):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return p


def chat(user, assistant, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return json.dumps({"messages": msgs})


def test_both_row_shapes_blank_lines_and_family(tmp_path):
    p = write(tmp_path, "\n".join([
        chat("hi", "hello", system="be brief"),
        "",
        "   ",
        json.dumps({"prompt": "a", "completion": "b", "family": "copy", "extra": 1}),
        json.dumps({"messages": [
            {"role": "user", "content": "first"}, {"role": "assistant", "content": "x"},
            {"role": "user", "content": "second"}, {"role": "assistant", "content": "y"},
            {"role": "tool", "content": "ignored"}]}),
    ]) + "\n")
    pairs = load_pairs(p)
    assert pairs == [Pair("hi", "hello", 1, None), Pair("a", "b", 4, "copy"),
                     Pair("second", "y", 5, None)]


def test_exact_tokens_and_mask_of_a_small_pair():
    e = encode_pair(Pair("ab", "c", 1), seq_len=16)
    assert e.tokens.dtype == np.uint8  # byte tokens held small; batches widen to int64
    assert e.tokens.tolist() == [BOS, ord("a"), ord("b"), SEP, ord("c"), EOS]
    # targets: a b SEP c EOS -> only c and EOS are after the SEP
    assert e.mask.tolist() == [0, 0, 0, 1, 1]
    assert not e.truncated
    assert e.context.tolist() == [BOS, ord("a"), ord("b"), SEP]
    assert e.first_target == ord("c")


def test_utf8_bytes_are_tokens():
    e = encode_pair(Pair("é", "ü", 1), seq_len=16)
    assert e.tokens.tolist() == [BOS, 0xC3, 0xA9, SEP, 0xC3, 0xBC, EOS]
    assert e.mask.tolist() == [0, 0, 0, 1, 1, 1]


def test_truncation_keeps_last_tokens_and_original_mask():
    pair = Pair("abcdef", "xy", 1)  # BOS a b c d e f SEP x y EOS = 11 tokens
    e = encode_pair(pair, seq_len=5)
    assert e.truncated
    assert e.tokens.tolist() == [ord("e"), ord("f"), SEP, ord("x"), ord("y"), EOS]
    # targets f SEP x y EOS: x, y, EOS are after the SEP in the original
    assert e.mask.tolist() == [0, 0, 1, 1, 1]
    assert e.context.tolist() == [ord("c"), ord("d"), ord("e"), ord("f"), SEP]  # last seq_len
    # cut inside the completion: every remaining target counts
    e2 = encode_pair(Pair("ab", "wxyz", 1), seq_len=3)
    assert e2.tokens.tolist() == [ord("x"), ord("y"), ord("z"), EOS]
    assert e2.mask.tolist() == [1, 1, 1]
    # exactly seq_len + 1 tokens is not truncated
    assert not encode_pair(Pair("a", "b", 1), seq_len=4).truncated
    assert encode_pair(Pair("a", "bc", 1), seq_len=4).truncated


def test_token_batch_padding_layout():
    a = encode_pair(Pair("a", "b", 1), 16)       # 5 tokens -> 4 positions
    b = encode_pair(Pair("abc", "de", 2), 16)    # 8 tokens -> 7 positions
    batch = TokenBatch.from_rows([a, b])
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (2, 7)
    assert batch.inputs[0].tolist() == [BOS, ord("a"), SEP, ord("b"), PAD, PAD, PAD]
    assert batch.targets[0].tolist() == [ord("a"), SEP, ord("b"), EOS, PAD, PAD, PAD]
    assert batch.mask[0].tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert batch.inputs[1].tolist() == [BOS, ord("a"), ord("b"), ord("c"), SEP, ord("d"), ord("e")]
    assert batch.targets[1].tolist() == [ord("a"), ord("b"), ord("c"), SEP, ord("d"), ord("e"), EOS]
    assert batch.mask[1].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert batch.n_counted == 5
    assert batch.n_tokens == 4 + 7 and batch.width == 7  # row 0 ends at its EOS target
    assert PAD == EOS  # padding is a byte that text never holds


def test_pool_batch_layout():
    a = encode_pair(Pair("a", "b", 1), 16)
    b = encode_pair(Pair("abc", "de", 2), 16)
    pb = PoolBatch.from_rows([a, b])
    assert pb.context.tolist() == [[BOS, ord("a"), SEP, PAD, PAD],
                                   [BOS, ord("a"), ord("b"), ord("c"), SEP]]
    assert pb.context_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert pb.target.tolist() == [ord("b"), ord("d")]
    assert pb.n_counted == 2
    assert pb.n_tokens == 3 + 5 and pb.width == 5


def test_load_dataset_counts_and_iter_batches(tmp_path):
    rows = [json.dumps({"prompt": "p" * i, "completion": "c"}) for i in range(1, 6)]
    p = write(tmp_path, "\n".join(rows) + "\n")
    ds = load_dataset(p, seq_len=5)
    assert ds.n == 5 and len(ds.encoded) == 5
    assert ds.n_tokens == sum(len(e.tokens) - 1 for e in ds.encoded)
    assert ds.n_counted == 10  # completion byte + EOS per row, never cut
    assert ds.n_truncated == 3  # prompt of i bytes -> i + 4 tokens, > 6 for i >= 3
    import hashlib
    assert ds.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    batches = list(iter_batches(ds.encoded, 2, TokenBatch.from_rows))
    assert [b.inputs.shape[0] for b in batches] == [2, 2, 1]
    assert sum(b.n_counted for b in batches) == ds.n_counted
    pools = list(iter_batches(ds.encoded, 3, PoolBatch.from_rows))
    assert [p.target.shape[0] for p in pools] == [3, 2]
    with pytest.raises(SparkError, match="batch_size"):
        list(iter_batches(ds.encoded, 0, TokenBatch.from_rows))


@pytest.mark.parametrize("line, needle", [
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"prompt": "a"}', "missing 'completion'"),
    ('{"completion": "a"}', "missing 'prompt'"),
    ('{"prompt": "", "completion": "a"}', "'prompt' is empty"),
    ('{"prompt": "a", "completion": ""}', "'completion' is empty"),
    ('{"prompt": 3, "completion": "a"}', "'prompt' must be a string"),
    ('{"prompt": "a", "completion": "b", "family": 1}', "'family' must be a string"),
    ('{"text": "a"}', "neither"),
    ('{"messages": "hi"}', "'messages' must be a list"),
    ('{"messages": [{"role": "user", "content": "a"}]}', "no 'assistant' message"),
    ('{"messages": [{"role": "assistant", "content": "a"}]}', "no 'user' message"),
    ('{"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "b"}]}',
     "'user' message (the prompt) is empty"),
    ('{"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "b"}]}',
     "'content' must be a string"),
    ('{"messages": [3]}', "must be an object"),
])
def test_each_bad_row_names_file_and_line(tmp_path, line, needle):
    good = json.dumps({"prompt": "a", "completion": "b"})
    p = write(tmp_path, f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(SparkError) as err:
        load_pairs(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}:3: ")
    assert needle in msg
    assert "\n" not in msg


def test_file_level_errors(tmp_path):
    with pytest.raises(SparkError, match="does not exist"):
        load_pairs(tmp_path / "nope.jsonl")
    with pytest.raises(SparkError, match="is a folder"):
        load_pairs(tmp_path)
    with pytest.raises(SparkError, match="no rows"):
        load_pairs(write(tmp_path, ""))
    with pytest.raises(SparkError, match="no rows"):
        load_pairs(write(tmp_path, "\n  \n\n"))
    bad = write(tmp_path, b'{"prompt": "a", "completion": "b"}\n{"prompt": "\xff"}\n')
    with pytest.raises(SparkError, match=r":2: not UTF-8"):
        load_pairs(bad)
    with pytest.raises(SparkError, match="does not exist"):
        load_dataset(tmp_path / "nope.jsonl", 8)


def test_crlf_lines_are_accepted(tmp_path):
    p = write(tmp_path, '{"prompt": "a", "completion": "b"}\r\n\r\n{"prompt": "c", "completion": "d"}\r\n')
    assert [(q.prompt, q.line) for q in load_pairs(p)] == [("a", 1), ("c", 3)]


def test_committed_fixtures_load():
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    train = load_pairs(root / "data/train/dataset.jsonl")
    held = load_pairs(root / "data/eval/tiny_heldout.jsonl")
    assert len(train) == 24 and 8 <= len(held) <= 12
    assert all(p.prompt.isascii() and p.completion.isascii() for p in train + held)
    ds = load_dataset(root / "data/train/dataset.jsonl", seq_len=64)
    assert ds.n_truncated == 0
