"""The architecture options (docs/model.md "Architecture options"): each new layer pair and
the whole model with each option against central finite differences in float64; the options
stay out of a default config's record; a bad option is one line."""
import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.model import layers, options
from sparktrain.model.build import build_model
from sparktrain.model.config import SKIP, VALUE_MIX, ModelConfig, param_shapes
from sparktrain.params import parse_params

from .gradcheck import TOL, check_tensors
from .test_model_layers import _check, _rng
from .test_model_transformer import _gradcheck, big_params, token_batch
from .xpkit import TARGETS, host, target_device

BASE = dict(dim=8, n_layer=2, n_head=4, n_kv_head=2, seq_len=8)
OPTIONS = {"relu2": {"mlp": "relu2"}, "qk_norm": {"qk_norm": True},
           "logit_cap": {"logit_cap": 3.0}, "bigram": {"bigram": 64},
           "value_residual": {"value_residual": True}, "unet": {"unet": True},
           "all": {"mlp": "relu2", "qk_norm": True, "logit_cap": 3.0, "bigram": 64,
                   "value_residual": True, "unet": True}}
# layers of the whole-model check: 1 is cheapest; the options that join layers need more, an
# odd count (a middle block without a skip) and an even one (the innermost skip is the very
# residual stream it joins)
LAYERS = {"value_residual": 3, "unet": 3, "all": 4}


def test_relu2_backward():
    rng = _rng()
    inputs = {"h": rng.standard_normal((6, 4)), "w_up": rng.standard_normal((16, 4)),
              "w_down": rng.standard_normal((4, 16))}
    _check(options.relu2_forward, inputs,
           lambda layers_backward, cache: dict(zip(("h", "w_up", "w_down"),
                                                   options.relu2_backward(layers_backward, cache))))


def test_softcap_backward_and_bound():
    x = 4 * _rng().standard_normal((5, 7))
    _check(lambda x: options.softcap_forward(x, 2.5), {"x": x},
           lambda layers_backward, cache: {"x": options.softcap_backward(layers_backward, cache)})
    out, _ = options.softcap_forward(100 * x, 2.5)
    assert 2.4 < np.abs(out).max() <= 2.5


def test_value_mix_backward():
    rng = _rng()
    inputs = {"v": rng.standard_normal((6, 4)), "v1": rng.standard_normal((6, 4)),
              "lam": np.array([0.3])}
    _check(options.value_mix_forward, inputs,
           lambda layers_backward, cache: dict(zip(("v", "v1", "lam"),
                                                   options.value_mix_backward(layers_backward,
                                                                              cache))))


def test_skip_backward():
    rng = _rng()
    inputs = {"x": rng.standard_normal((2, 3, 4)), "skip": rng.standard_normal((2, 3, 4)),
              "w": np.array([0.7])}
    _check(options.skip_forward, inputs,
           lambda layers_backward, cache: dict(zip(("x", "skip", "w"),
                                                   options.skip_backward(layers_backward, cache))))


@pytest.mark.parametrize("name", OPTIONS)
def test_model_with_option_gradients(name):
    model = build_model(ModelConfig(**{**BASE, "n_layer": LAYERS.get(name, 1)}, **OPTIONS[name]))
    batch = token_batch()
    worst = _gradcheck(model, big_params(model), batch, batch.inputs)
    assert max(worst.values()) < TOL


def test_options_change_the_maths_and_the_shape_table():
    batch = token_batch()
    plain = build_model(ModelConfig(**BASE))
    params = big_params(plain)
    base_logits = plain.forward_logits(params, batch.inputs)
    bigram = {**params, "spark.bigram.weight": _rng(5).standard_normal((64, BASE["dim"]))}
    for name, weights in (("qk_norm", params), ("logit_cap", params), ("bigram", bigram)):
        model = build_model(ModelConfig(**BASE, **OPTIONS[name]))
        assert not np.allclose(model.forward_logits(weights, batch.inputs), base_logits), name
    capped = build_model(ModelConfig(**BASE, logit_cap=3.0)).forward_logits(params, batch.inputs)
    assert np.abs(capped).max() < 3.0 < np.abs(base_logits).max()
    names = list(param_shapes(ModelConfig(**BASE, bigram=64)))
    assert names[:2] == ["spark.embed.weight", "spark.bigram.weight"]
    relu2 = ModelConfig(**BASE, mlp="relu2")
    assert not any("mlp_gate" in n for n in param_shapes(relu2))
    assert len(param_shapes(relu2)) == len(param_shapes(ModelConfig(**BASE))) - BASE["n_layer"]


@pytest.mark.parametrize("n_layer", [2, 3, 4])
def test_value_residual_and_unet_at_zero_weight_are_the_plain_model(n_layer):
    """lambda 0 leaves every layer its own values, skip weights 0 add nothing: the plain
    model's logits; any other weight changes them (the option's wiring is live)."""
    batch = token_batch()
    cfg = {**BASE, "n_layer": n_layer}
    plain = build_model(ModelConfig(**cfg))
    params = big_params(plain)
    base_logits = plain.forward_logits(params, batch.inputs)
    for option, name, shape in (("value_residual", VALUE_MIX, (n_layer - 1,)),
                                ("unet", SKIP, (n_layer // 2,))):
        model = build_model(ModelConfig(**cfg, **{option: True}))
        assert param_shapes(model.cfg)[name] == shape
        off = model.forward_logits({**params, name: np.zeros(shape)}, batch.inputs)
        np.testing.assert_allclose(off, base_logits, rtol=1e-12, atol=1e-12)
        for i in range(shape[0]):  # each weight on its own moves the logits
            one = np.zeros(shape)
            one[i] = 0.5
            moved = model.forward_logits({**params, name: one}, batch.inputs)
            assert not np.allclose(moved, base_logits), (option, i)


def test_value_residual_at_one_gives_every_layer_the_first_values():
    """lambda 1: a layer's own v weight has no effect (a zero gradient); the first's does."""
    batch = token_batch()
    model = build_model(ModelConfig(**{**BASE, "n_layer": 3}, value_residual=True))
    params = {**big_params(model), VALUE_MIX: np.ones(2)}
    _, grads = model.loss_and_grads(params, batch)
    assert not grads["spark.layers.1.v.weight"].any() and not grads["spark.layers.2.v.weight"].any()
    assert np.abs(grads["spark.layers.0.v.weight"]).max() > 1e-6


def test_new_tensors_start_as_the_speedrun_and_sit_after_the_blocks():
    model = build_model(ModelConfig(**{**BASE, "n_layer": 5}, value_residual=True, unet=True,
                                    bigram=8))
    params = model.init_params(0)
    assert params[VALUE_MIX].tolist() == [0.5] * 4 and params[SKIP].tolist() == [0.0] * 2
    names = list(params)
    assert names[:2] == ["spark.embed.weight", "spark.bigram.weight"]
    assert names[-4:] == [VALUE_MIX, SKIP, "spark.final_norm.weight", "spark.lm_head.weight"]
    plain = build_model(ModelConfig(**{**BASE, "n_layer": 5}, bigram=8)).init_params(0)
    for n, a in plain.items():  # the other tensors are drawn as without the options
        assert np.array_equal(params[n], a), n


def test_a_fresh_unet_model_starts_as_the_plain_one():
    """The skip weights start at 0 and nothing else is drawn differently: the same logits."""
    batch = token_batch()
    cfg = {**BASE, "n_layer": 4}
    unet = build_model(ModelConfig(**cfg, unet=True))
    plain = build_model(ModelConfig(**cfg))
    np.testing.assert_array_equal(unet.forward_logits(unet.init_params(2), batch.inputs),
                                  plain.forward_logits(plain.init_params(2), batch.inputs))


def test_the_record_names_only_options_in_use():
    plain = ModelConfig(**BASE)
    assert set(plain.to_dict()) == {*BASE, "vocab", "train_attn"} and plain.options() == {}
    cfg = ModelConfig(**BASE, mlp="relu2", logit_cap=15.0)
    assert cfg.to_dict()["mlp"] == "relu2" and cfg.to_dict()["logit_cap"] == 15.0
    assert "qk_norm" not in cfg.to_dict()
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    joined = ModelConfig(**BASE, value_residual=True, unet=True)
    assert joined.options() == {"value_residual": True, "unet": True}
    assert ModelConfig.from_dict(joined.to_dict()) == joined


def test_bigram_ids_hash_each_pair_and_the_row_start():
    ids = np.array([[5, 7, 7], [7, 7, 5]])
    got = options.bigram_ids(ids, vocab=300, buckets=1000)
    mult = options.BIGRAM_MULT
    assert got.tolist() == [[(300 * mult + 5) % 1000, (5 * mult + 7) % 1000, (7 * mult + 7) % 1000],
                            [(300 * mult + 7) % 1000, (7 * mult + 7) % 1000, (7 * mult + 5) % 1000]]
    assert got[0, 2] == got[1, 1]  # the same pair, the same bucket, wherever it is


@pytest.mark.parametrize("bad, words", [({"bigram": -1}, "bigram must be an integer"),({"mlp": "gelu"}, "mlp must be one of swiglu, relu2"),
                                        ({"logit_cap": -1.0}, "logit_cap must be a number >= 0"),
                                        ({"qk_norm": 1}, "qk_norm must be true or false"),
                                        ({"value_residual": 1},
                                         "value_residual must be true or false"),
                                        ({"unet": "yes"}, "unet must be true or false"),
                                        ({"unet": True, "n_layer": 1},
                                         "unet needs at least 2 layers"),
                                        ({"value_residual": True, "n_layer": 1},
                                         "value_residual needs at least 2 layers"),
                                        ({"qk_norm": True, "train_attn": False},
                                         "need the attention model")])
def test_bad_options_are_one_line(bad, words):
    with pytest.raises(SparkError, match=words):
        ModelConfig(**{**BASE, **bad}).validate()


@pytest.mark.parametrize("arch, words", [
    ({"value_residual": 1}, "params: arch.value_residual must be bool, got int 1"),
    ({"unet": "yes"}, "params: arch.unet must be bool, got str 'yes'"),
    ({"unet": True, "scale": "one"}, "unet needs at least 2 layers")])
def test_a_bad_option_in_params_is_one_line(arch, words):
    scale = arch.pop("scale", "tiny")
    raw = {"job": "job-x-001", "program": "p.sparkbc", "scale": scale, "arch": arch,
           "scales": {"one": {"dim": 8, "n_layer": 1, "n_head": 2, "n_kv_head": 1, "seq_len": 8}}}
    with pytest.raises(SparkError) as err:
        parse_params(raw)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("target", TARGETS)
def test_the_options_on_a_namespace_match_numpy(target):
    """The generic (array-API) path a GPU takes: every option's float64 gradients equal the
    numpy path's to rounding (array-api-strict in make test, PyTorch in make test-gpu)."""
    dev = target_device(target)
    if dev.kind == "mps":
        pytest.skip("MPS has no float64")
    model = build_model(ModelConfig(**{**BASE, "n_layer": 4}, **OPTIONS["all"]))
    params = big_params(model)
    batch = token_batch()
    want_loss, want = model.loss_and_grads(params, batch)
    got_loss, got = model.loss_and_grads(dev.to_device(params), batch)
    assert got_loss == pytest.approx(want_loss, rel=1e-12)
    for n in want:
        np.testing.assert_allclose(host(dev, got[n]), want[n], rtol=1e-10, atol=1e-12, err_msg=n)
