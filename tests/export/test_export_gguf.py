"""`spark export --to gguf`, read back with the gguf package's own reader."""
import json

import gguf
import numpy as np
import pytest

from sparktrain.export.gguf import GGUF_NULL_MERGE, export_gguf
from sparktrain.export.names import name_map
from sparktrain.export.tokenizer import bytes_to_unicode
from sparkhelp import assert_one_line_error, run_spark

from exportkit import SMALL, rope_deinterleave, write_weights


@pytest.fixture
def exported(tmp_path):
    w = tmp_path / "w.safetensors"
    params = write_weights(w)
    out = tmp_path / "model.gguf"
    export_gguf(w, out)
    return w, out, params


def field(reader, key):
    return reader.fields[key].contents()


def test_llama_keys(exported):
    _, out, _ = exported
    r = gguf.GGUFReader(out)
    assert field(r, "general.architecture") == "llama"
    assert field(r, "general.file_type") == 0                       # all float32
    want = {"context_length": 48, "embedding_length": 32, "block_count": 2,
            "feed_forward_length": 128, "attention.head_count": 4,
            "attention.head_count_kv": 2, "rope.dimension_count": 8, "vocab_size": 256}
    assert {k: field(r, f"llama.{k}") for k in want} == want
    assert field(r, "llama.rope.freq_base") == 10000.0
    assert field(r, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert json.loads(field(r, "spark.metadata"))["step_n"] == 7


def test_tensors_named_shaped_and_q_k_interleaved(exported):
    _, out, params = exported
    r = gguf.GGUFReader(out)
    tensors = {t.name: np.array(t.data) for t in r.tensors}
    names = name_map(SMALL, "gguf")
    assert sorted(tensors) == sorted(names.values())
    for spark, name in names.items():
        got = tensors[name]
        assert got.dtype == np.float32 and got.shape == params[spark].shape, name
        kind = spark.split(".")[-2]
        if kind in ("q", "k") and spark.startswith("spark.layers."):
            assert not np.array_equal(got, params[spark])           # really permuted
            heads = SMALL.n_head if kind == "q" else SMALL.n_kv_head
            got = rope_deinterleave(got, heads)
        np.testing.assert_array_equal(got, params[spark], err_msg=name)


def test_byte_vocabulary(exported):
    _, out, _ = exported
    r = gguf.GGUFReader(out)
    tokens = field(r, "tokenizer.ggml.tokens")
    chars = bytes_to_unicode()
    assert len(tokens) == 256
    assert tokens[:253] == [chars[b] for b in range(253)]            # id = byte value
    assert tokens[253:] == ["<|bos|>", "<|sep|>", "<|eos|>"]
    assert field(r, "tokenizer.ggml.token_type")[250:] == [1, 1, 1, 3, 3, 3]
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    assert field(r, "tokenizer.ggml.pre") == "gpt-2"     # llama.cpp: GPT-2's split, as ours
    # llama-cpp-python appends a SEP key's token to every text prompt: none is written
    assert not any("sep" in key for key in r.fields)
    assert field(r, "tokenizer.ggml.merges") == [GGUF_NULL_MERGE]
    assert (field(r, "tokenizer.ggml.bos_token_id"), field(r, "tokenizer.ggml.eos_token_id")) \
        == (253, 255)


def test_same_weights_same_bytes(exported, tmp_path):
    w, out, _ = exported
    export_gguf(w, tmp_path / "again.gguf")
    assert (tmp_path / "again.gguf").read_bytes() == out.read_bytes()


def test_existing_file_needs_force_and_a_folder_is_refused(exported, tmp_path):
    w, out, _ = exported
    before = out.read_bytes()
    rc, _, err = run_spark(["export", "--to", "gguf", out, "--weights", w])
    assert_one_line_error(rc, err, "--force")
    assert out.read_bytes() == before
    rc, _, err = run_spark(["export", "--to", "gguf", tmp_path, "--weights", w, "--force"])
    assert_one_line_error(rc, err, "folder")
    rc, _, err = run_spark(["export", "--to", "gguf", out, "--weights", w, "--force"])
    assert rc == 0, err
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf", "w.safetensors"]
