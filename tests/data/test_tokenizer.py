"""Byte and BPE tokenizers: round trips, specials, determinism, tokenizer.json checks."""
import numpy as np
import pytest

from sparktrain.data.tokenizer import (ByteTokenizer, load_tokenizer, make_tokenizer,
                                       parse_tokenizer, train_bpe)
from sparktrain.vocab import MIN_BPE_VOCAB, token_dtype
from sparktrain.core.errors import SparkError

TEXTS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n",
         "class Point:\n    def __init__(self, x, y):\n        self.x = x\n"] * 20


@pytest.fixture(scope="module")
def bpe():
    return train_bpe(TEXTS, 300)


def test_byte_tokenizer_is_utf8_bytes_with_specials_outside_utf8():
    t = ByteTokenizer()
    assert t.encode("aé").tolist() == [97, 0xC3, 0xA9]
    assert (t.bos, t.sep, t.eos, t.vocab) == (0xFD, 0xFE, 0xFF, 256)
    assert t.decode([t.bos, 97, 98, t.eos]) == "ab"
    assert parse_tokenizer(t.to_json().encode()).kind == "byte"


def test_bpe_round_trips_any_text_and_compresses(bpe):
    assert bpe.vocab == 300 and (bpe.bos, bpe.sep, bpe.eos) == (0, 1, 2)
    for text in TEXTS[:3] + ["ünïcödé ✓ \t\n", "unseen_identifier_xyz = 42"]:
        ids = bpe.encode(text)
        assert bpe.decode(ids) == text
        assert ids.min() >= 3  # text never becomes a special
    assert len(bpe.encode(TEXTS[0])) <= len(TEXTS[0].encode()) / 2


def test_specials_spelled_in_text_stay_text(bpe):
    ids = bpe.encode("x = '<|eos|>'")
    assert bpe.eos not in ids.tolist() and bpe.decode(ids) == "x = '<|eos|>'"


def test_bpe_training_is_deterministic(bpe):
    assert train_bpe(TEXTS, 300).to_json() == bpe.to_json()


def test_bpe_saved_and_loaded(bpe, tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text(bpe.to_json())
    back = load_tokenizer(p)
    assert back.kind == "bpe" and back.vocab == 300
    assert back.encode(TEXTS[1]).tolist() == bpe.encode(TEXTS[1]).tolist()


@pytest.mark.parametrize("bad", [100, 258, 65536, True])
def test_vocab_size_out_of_range(bad):
    with pytest.raises(SparkError, match=f"vocab_size must be an integer in \\[{MIN_BPE_VOCAB}, 65535\\]"):
        train_bpe(TEXTS, bad)


def test_unknown_kind_and_bad_files(tmp_path):
    with pytest.raises(SparkError, match="unknown tokenizer 'wordpiece'; known: byte, bpe"):
        make_tokenizer("wordpiece", 512, TEXTS)
    with pytest.raises(SparkError, match="not JSON"):
        parse_tokenizer(b"{nope", "t.json")
    with pytest.raises(SparkError, match="not a tokenizer.json of a byte or BPE"):
        parse_tokenizer(b'{"model": {"type": "WordPiece"}}', "t.json")
    with pytest.raises(SparkError, match="does not exist"):
        load_tokenizer(tmp_path / "missing.json")


def test_token_dtype_is_the_narrowest():
    assert token_dtype(256) == np.uint8 and token_dtype(257) == np.uint16
    assert token_dtype(65535) == np.uint16
    with pytest.raises(SparkError):
        token_dtype(70000)


def test_a_byte_completion_is_its_bytes_as_they_came(bpe):
    """Pairs generation and exact match through the tokenizer: bytes keep a special
    byte as U+FFFD (the layout of before tokenizers); a BPE decodes its ids."""
    t = ByteTokenizer()
    assert t.completion_text([104, 0xFD, 105]) == "h\ufffdi" and t.decode([104, 0xFD, 105]) == "hi"
    assert t.is_exactly(list(b"hi"), "hi") and not t.is_exactly([104, 0xFD, 105], "hi")
    ids = bpe.encode("return a + b").tolist()
    assert bpe.completion_text(ids) == "return a + b" and bpe.is_exactly(ids, "return a + b")


def test_no_tokenizer_is_ever_none():
    """A byte model gets a ByteTokenizer (data/tokenizer.BYTES): no second byte path."""
    import re
    from pathlib import Path

    import sparktrain

    pattern = re.compile(r"\b(tok|tokenizer)\s*(=\s*None|is None|is not None)")
    found = [f"{p.name}:{n}" for p in Path(sparktrain.__file__).parent.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
