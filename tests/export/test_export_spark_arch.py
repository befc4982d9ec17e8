"""`spark export` of a model with architecture options, with the light libraries only
(docs/export.md "Models with architecture options"): to hf, the Spark architecture's folder
(its modelling code, config.json's auto_map naming it, the options, the tensors); to gguf, one
line naming the option and the hf route. transformers' side: test_export_hf_options.py."""
import ast
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

from sparktrain.export.names import name_map
from sparktrain.export.spark_arch import AUTO_MAP, CODE_DIR, CODE_FILES
from sparktrain.model.config import OPTION_DEFAULTS
from sparkhelp import assert_one_line_error, run_spark

from exportkit import SMALL, rope_deinterleave, write_weights

LLAMA_FILES = ["README.md", "config.json", "generation_config.json", "model.safetensors",
               "tokenizer.json", "tokenizer_config.json"]
OPTIONS = [("mlp", "relu2"), ("qk_norm", True), ("logit_cap", 15.0), ("bigram", 64),
           ("value_residual", True), ("unet", True)]


def with_options(tmp_path, **options):
    cfg = dataclasses.replace(SMALL, **options).validate()
    w = tmp_path / "w.safetensors"
    return w, cfg, write_weights(w, cfg)


@pytest.mark.parametrize("option, value", OPTIONS[2:])  # relu2 or qk_norm alone: below
def test_an_option_exports_the_spark_architecture_to_hf(tmp_path, option, value):
    w, cfg, params = with_options(tmp_path, **{option: value})
    out = tmp_path / "hf"
    rc, stdout, err = run_spark(["export", "--to", "hf", out, "--weights", w])
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == sorted(LLAMA_FILES + list(CODE_FILES))
    conf = json.loads((out / "config.json").read_text())
    assert conf["architectures"] == ["SparkForCausalLM"] and conf["model_type"] == "spark"
    for target in conf["auto_map"].values():          # each names a file the folder holds
        assert (out / (target.split(".")[0] + ".py")).is_file()
    assert {k: conf[k] for k in OPTION_DEFAULTS} == {k: getattr(cfg, k) for k in OPTION_DEFAULTS}
    assert conf[option] == value and conf["tie_word_embeddings"] is False
    assert conf["spark_metadata"]["arch"][option] == value
    for name in CODE_FILES:                           # the package's files, as they are
        assert (out / name).read_bytes() == (CODE_DIR / name).read_bytes()
    tensors = load_file(out / "model.safetensors")
    names = name_map(cfg, "hf")
    assert sorted(tensors) == sorted(names.values())
    for spark, hf in names.items():
        np.testing.assert_array_equal(tensors[hf], params[spark])
    card = (out / "README.md").read_text()
    assert "trust_remote_code=True" in card and "custom_code" in card and option in card


@pytest.mark.parametrize("option, value, arch", [("mlp", "relu2", "arcee"),
                                                 ("qk_norm", True, "qwen3")])
def test_one_option_transformers_computes_exports_as_its_architecture(tmp_path, option, value,
                                                                     arch):
    w, cfg, params = with_options(tmp_path, **{option: value})
    out = tmp_path / "hf"
    rc, _, err = run_spark(["export", "--to", "hf", out, "--weights", w])
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == LLAMA_FILES     # no code of its own
    conf = json.loads((out / "config.json").read_text())
    assert conf["model_type"] == arch and "auto_map" not in conf
    assert conf["architectures"] == [{"arcee": "ArceeForCausalLM",
                                      "qwen3": "Qwen3ForCausalLM"}[arch]]
    assert conf["hidden_act"] == ("relu2" if arch == "arcee" else "silu")
    tensors = load_file(out / "model.safetensors")
    norms = {n for n in tensors if n.endswith(("q_norm.weight", "k_norm.weight"))}
    assert len(norms) == (2 * cfg.n_layer if arch == "qwen3" else 0)
    for n in norms:
        np.testing.assert_array_equal(tensors[n], np.ones(cfg.head_dim, np.float32))
    assert ("model.layers.0.mlp.gate_proj.weight" in tensors) == (arch == "qwen3")
    assert "trust_remote_code" not in (out / "README.md").read_text()
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", tmp_path / "back"])
    assert rc == 0, err
    assert (tmp_path / "back").read_bytes() == w.read_bytes()    # the same bytes back


def test_a_qwen3_norm_weight_spark_has_not_is_refused(tmp_path):
    from safetensors.numpy import save_file

    w, _, _ = with_options(tmp_path, qk_norm=True)
    out = tmp_path / "hf"
    assert run_spark(["export", "--to", "hf", out, "--weights", w])[0] == 0
    tensors = load_file(out / "model.safetensors")
    tensors["model.layers.1.self_attn.k_norm.weight"][0] = 2.0
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", tmp_path / "back"])
    assert_one_line_error(rc, err, "k_norm.weight is not 8 ones")
    assert not (tmp_path / "back").exists()


def test_all_options_name_their_own_tensors_and_the_bytes_repeat(tmp_path):
    w, cfg, _ = with_options(tmp_path, bigram=64, value_residual=True, unet=True, n_layer=4)
    for out in ("a", "b"):
        rc, _, err = run_spark(["export", "--to", "hf", tmp_path / out, "--weights", w])
        assert rc == 0, err
    tensors = load_file(tmp_path / "a" / "model.safetensors")
    assert tensors["model.bigram.weight"].shape == (64, cfg.dim)
    assert tensors["model.value_mix.weight"].shape == (3,)
    assert tensors["model.skip.weight"].shape == (2,)
    for name in LLAMA_FILES + list(CODE_FILES):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_model_without_options_stays_a_llama(tmp_path):
    w = tmp_path / "w.safetensors"
    write_weights(w)
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "hf", "--weights", w])
    assert rc == 0, err
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == LLAMA_FILES
    conf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert conf["model_type"] == "llama" and "auto_map" not in conf


@pytest.mark.parametrize("options", [{"logit_cap": 15.0}, {"bigram": 64},
                                     {"value_residual": True}, {"unet": True},
                                     {"mlp": "relu2", "qk_norm": True},
                                     {"mlp": "relu2", "qk_norm": True, "logit_cap": 15.0}])
def test_gguf_refuses_what_no_llama_cpp_architecture_computes_naming_hf(tmp_path, options):
    w, _, _ = with_options(tmp_path, **options)
    out = tmp_path / "a.gguf"
    rc, _, err = run_spark(["export", "--to", "gguf", out, "--weights", w])
    named = ", ".join(f"{k}: {v}" for k, v in options.items())
    assert_one_line_error(rc, err, f"option{'s' * (len(options) > 1)} {named}", "llama.cpp",
                          "--to hf", "trust_remote_code=True")
    assert not out.exists()


@pytest.mark.parametrize("option, value, arch", [("mlp", "relu2", "arcee"),
                                                 ("qk_norm", True, "qwen3")])
def test_gguf_of_one_option_is_the_llama_cpp_architecture_computing_it(tmp_path, option, value,
                                                                      arch):
    import gguf

    w, cfg, params = with_options(tmp_path, **{option: value})
    out = tmp_path / "a.gguf"
    rc, _, err = run_spark(["export", "--to", "gguf", out, "--weights", w])
    assert rc == 0, err
    r = gguf.GGUFReader(out)
    assert r.fields["general.architecture"].contents() == arch
    assert r.fields[f"{arch}.block_count"].contents() == cfg.n_layer
    assert r.fields[f"{arch}.attention.layer_norm_rms_epsilon"].contents() == \
        pytest.approx(1e-5)
    tensors = {t.name: np.array(t.data) for t in r.tensors}
    gguf_arch = getattr(gguf.MODEL_ARCH, arch.upper())       # the names llama.cpp loads
    allowed = {gguf.TENSOR_NAMES[t].format(bid=L) + ".weight"
               for t in gguf.MODEL_TENSORS[gguf_arch] for L in range(cfg.n_layer)}
    assert set(tensors) <= allowed
    q = tensors["blk.0.attn_q.weight"]
    if arch == "arcee":   # llama's rope order: q/k permuted; an MLP with no gate
        assert not any("ffn_gate" in n for n in tensors)
        np.testing.assert_array_equal(rope_deinterleave(q, cfg.n_head),
                                      params["spark.layers.0.q.weight"])
    else:                 # rotate-half rope as Spark's: q/k as they are; norms of ones
        np.testing.assert_array_equal(q, params["spark.layers.0.q.weight"])
        np.testing.assert_array_equal(tensors["blk.1.attn_k_norm.weight"],
                                      np.ones(cfg.head_dim, np.float32))
        assert r.fields["qwen3.attention.key_length"].contents() == cfg.head_dim


@pytest.mark.parametrize("options", [{"logit_cap": 15.0},
                                     {"mlp": "relu2", "qk_norm": True, "logit_cap": 15.0},
                                     {"bigram": 64, "value_residual": True, "unet": True}])
def test_export_then_import_of_the_spark_folder_is_byte_identical(tmp_path, options):
    w, _, _ = with_options(tmp_path, **options)
    assert run_spark(["export", "--to", "hf", tmp_path / "hf", "--weights", w])[0] == 0
    rc, out, err = run_spark(["import", "--from", "hf", tmp_path / "hf",
                              "--out", tmp_path / "back.safetensors"])
    assert rc == 0, err
    assert (tmp_path / "back.safetensors").read_bytes() == w.read_bytes()


@pytest.mark.parametrize("edit, needle", [({"logit_cap": -1.0}, "logit_cap must be"),
                                          ({"mlp": "gelu"}, "mlp must be one of"),
                                          ({"qk_norm": False}, "disagrees")])
def test_a_spark_folder_with_bad_or_edited_options_is_one_line(tmp_path, edit, needle):
    w, _, _ = with_options(tmp_path, mlp="relu2", qk_norm=True)
    assert run_spark(["export", "--to", "hf", tmp_path / "hf", "--weights", w])[0] == 0
    conf = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**conf, **edit}))
    rc, _, err = run_spark(["import", "--from", "hf", tmp_path / "hf",
                            "--out", tmp_path / "back.safetensors"])
    assert_one_line_error(rc, err, needle)
    assert not (tmp_path / "back.safetensors").exists()


def test_spark_config_takes_every_option_and_export_loads_no_torch():
    """configuration_spark.py (read, not run: it needs transformers) has a parameter for
    every option the model has, and config.json's auto_map names its classes."""
    tree = ast.parse((CODE_DIR / "configuration_spark.py").read_text())
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                and n.name == "__init__")
    assert set(OPTION_DEFAULTS) <= {a.arg for a in init.args.args}
    classes = {n.name for f in CODE_FILES for n in ast.walk(ast.parse((CODE_DIR / f).read_text()))
               if isinstance(n, ast.ClassDef)}
    assert {v.split(".")[1] for v in AUTO_MAP.values()} <= classes
    code = ("import sys, sparktrain.export.hf, sparktrain.export.spark_arch;"
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules];"
            "sys.exit(f'loaded {bad}' if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
