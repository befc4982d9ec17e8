"""The name table covers every tensor once, and the GGUF q/k permutation keeps attention."""
import numpy as np
import pytest

from sparktrain.export.gguf import rope_interleave
from sparktrain.export.names import TENSORS, name_map
from sparktrain.model import layers
from sparktrain.model.config import SCALES, ModelConfig, param_shapes

from model.reference import from_planes, to_planes  # tests/model, the planes layout helpers
from exportkit import rope_deinterleave

CONFIGS = [SCALES["tiny"], SCALES["large"], ModelConfig(dim=48, n_layer=3, n_head=6, n_kv_head=3),
           ModelConfig(dim=16, n_layer=1, n_head=2, n_kv_head=2)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"d{c.dim}L{c.n_layer}h{c.n_head}kv{c.n_kv_head}")
@pytest.mark.parametrize("fmt", ["hf", "gguf"])
def test_every_spark_tensor_has_one_distinct_name(cfg, fmt):
    names = name_map(cfg, fmt)
    assert list(names) == list(param_shapes(cfg))            # shape-table order, all of it
    assert len(set(names.values())) == len(names)             # no two tensors share a name
    assert not any("{" in n for n in names.values())


def test_known_names_of_both_formats():
    hf, gg = name_map(SCALES["tiny"], "hf"), name_map(SCALES["tiny"], "gguf")
    assert hf["spark.layers.1.mlp_norm.weight"] == "model.layers.1.post_attention_layernorm.weight"
    assert hf["spark.lm_head.weight"] == "lm_head.weight"
    assert gg["spark.layers.0.o.weight"] == "blk.0.attn_output.weight"
    assert gg["spark.embed.weight"] == "token_embd.weight"
    assert len(TENSORS) == 12


def interleaved_rope(u, base=layers.ROPE_BASE):
    """llama.cpp's llama rope written out: pairs (u_2i, u_2i+1), u (T, heads, hd)."""
    T, heads, hd = u.shape
    out = u.copy()
    for p in range(T):
        for i in range(hd // 2):
            a = p * base ** (-2.0 * i / hd)
            x, y = u[p, :, 2 * i], u[p, :, 2 * i + 1]
            out[p, :, 2 * i] = x * np.cos(a) - y * np.sin(a)
            out[p, :, 2 * i + 1] = x * np.sin(a) + y * np.cos(a)
    return out


def spark_rope(u):
    """The project's own rope on (T, heads, hd), through its planes layout."""
    T, heads, hd = u.shape
    planes = to_planes(u[None])                       # (2, 1, T, heads hd/2)
    out, _ = layers.rope_forward(planes, hd)
    return from_planes(out, hd)[0]                    # (T, heads, hd)


@pytest.mark.parametrize("heads,hd", [(4, 8), (2, 16), (1, 4)])
def test_interleaved_rope_of_permuted_rows_is_the_permuted_spark_rope(heads, hd):
    rng = np.random.default_rng(heads * hd)
    C, T = 12, 6
    w = rng.standard_normal((heads * hd, C))                  # (heads hd, C)
    h = rng.standard_normal((T, C))                          # (T, C)
    spark = spark_rope((h @ w.T).reshape(T, heads, hd))
    gguf = interleaved_rope((h @ rope_interleave(w, heads).T).reshape(T, heads, hd))
    want = (rope_interleave(spark.reshape(T, -1).T, heads).T).reshape(T, heads, hd)
    np.testing.assert_allclose(gguf, want, rtol=1e-12, atol=1e-12)
    # the same permutation on q and k: attention scores do not change
    np.testing.assert_allclose(np.einsum("thd,shd->hts", gguf, gguf),
                               np.einsum("thd,shd->hts", spark, spark), rtol=1e-10, atol=1e-10)
    # and without it they would
    wrong = interleaved_rope((h @ w.T).reshape(T, heads, hd))
    assert not np.allclose(wrong, want)


def test_deinterleave_inverts_interleave():
    w = np.arange(4 * 8 * 3, dtype=np.float32).reshape(32, 3)
    assert not np.array_equal(rope_interleave(w, 4), w)
    np.testing.assert_array_equal(rope_deinterleave(rope_interleave(w, 4), 4), w)
    # head 0, pair 1 of llama.cpp = rows (1, 1 + hd/2) of the rotate-half layout
    np.testing.assert_array_equal(rope_interleave(w, 4)[2:4], w[[1, 5]])
