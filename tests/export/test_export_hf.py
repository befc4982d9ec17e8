"""`spark export --to hf` / `spark import --from hf` with the light libraries only:
the folder's names, shapes, config values and tokenizer; the byte-identical round trip."""
import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

from sparktrain.export.hf import META_FIELD, export_hf, import_hf, spark_config
from sparktrain.export.names import name_map
from sparktrain.export.tokenizer import byte_tokenizer
from sparktrain.model.config import param_shapes
from sparktrain.model.weights import load_model
from sparkhelp import assert_one_line_error, run_spark

from exportkit import SMALL, TEXTS, write_weights

FILES = ["README.md", "config.json", "generation_config.json", "model.safetensors",
         "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture
def exported(tmp_path):
    w = tmp_path / "weights.safetensors"
    params = write_weights(w)
    out = tmp_path / "hf"
    assert export_hf(w, out) == FILES
    return w, out, params


def test_folder_holds_llama_config_and_tensors(exported):
    _, out, params = exported
    assert sorted(p.name for p in out.iterdir()) == FILES
    conf = json.loads((out / "config.json").read_text())
    assert conf["architectures"] == ["LlamaForCausalLM"] and conf["model_type"] == "llama"
    assert (conf["hidden_size"], conf["num_hidden_layers"], conf["num_attention_heads"],
            conf["num_key_value_heads"], conf["intermediate_size"], conf["head_dim"]) == \
        (32, 2, 4, 2, 128, 8)
    assert (conf["vocab_size"], conf["max_position_embeddings"]) == (256, 48)
    assert conf["rms_norm_eps"] == 1e-5 and conf["rope_theta"] == 10000.0
    assert conf["rope_scaling"] is None and conf["rope_parameters"]["rope_type"] == "default"
    assert conf["tie_word_embeddings"] is False
    assert not conf["attention_bias"] and not conf["mlp_bias"]
    assert (conf["bos_token_id"], conf["eos_token_id"]) == (0xFD, 0xFF)
    assert conf[META_FIELD]["step_n"] == 7
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 0xFF and gen["do_sample"] is False
    tensors = load_file(out / "model.safetensors")
    names = name_map(SMALL, "hf")
    assert sorted(tensors) == sorted(names.values())
    for spark, hf in names.items():
        assert tensors[hf].dtype == np.float32
        assert tensors[hf].shape == param_shapes(SMALL)[spark]
        np.testing.assert_array_equal(tensors[hf], params[spark])   # HF rope = Spark rope


def test_tokenizer_ids_are_bytes_and_prompts_get_bos_sep(exported):
    _, out, _ = exported
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == 256
    for text in TEXTS + ["a" * 3000]:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert ids == list(text.encode("utf-8")), text
        assert tok.decode(ids) == text
        assert tok.encode(text).ids == [0xFD] + list(text.encode("utf-8")) + [0xFE]
    assert [tok.id_to_token(i) for i in (0xFD, 0xFE, 0xFF)] == ["<|bos|>", "<|sep|>", "<|eos|>"]
    assert tok.decode([104, 105, 0xFF], skip_special_tokens=True) == "hi"
    conf = json.loads((out / "tokenizer_config.json").read_text())
    assert conf["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (conf["bos_token"], conf["eos_token"], conf["model_max_length"]) == \
        ("<|bos|>", "<|eos|>", 48)


def test_same_weights_same_bytes(exported, tmp_path):
    w, out, _ = exported
    again = tmp_path / "again"
    export_hf(w, again)
    for name in FILES:
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    assert byte_tokenizer().to_str() == byte_tokenizer().to_str()


def test_export_then_import_is_byte_identical(exported, tmp_path):
    w, out, _ = exported
    rc, stdout, err = run_spark(["import", "--from", "hf", out, "--out", tmp_path / "back.safetensors"])
    assert rc == 0, err
    assert (tmp_path / "back.safetensors").read_bytes() == w.read_bytes()


def test_a_foreign_llama_becomes_spark_weights(exported, tmp_path):
    _, out, params = exported
    conf = json.loads((out / "config.json").read_text())
    del conf[META_FIELD], conf["rope_parameters"]           # as another tool writes it
    (out / "config.json").write_text(json.dumps(conf))
    tensors = load_file(out / "model.safetensors")
    tensors = {k: v.astype(np.float16) for k, v in tensors.items()}
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(4, np.float32)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    meta = import_hf(out, tmp_path / "w.safetensors")
    got, cfg, meta2 = load_model(tmp_path / "w.safetensors")
    assert cfg == SMALL and meta2 == meta and meta["imported_from"] == "hf"
    assert meta["step_n"] == 0
    for name, a in params.items():
        np.testing.assert_array_equal(got[name], a.astype(np.float16).astype(np.float32))


def test_import_reads_sharded_folders(exported, tmp_path):
    _, out, params = exported
    tensors = load_file(out / "model.safetensors")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:5],
              "model-00002-of-00002.safetensors": names[5:]}
    for fname, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, out / fname, metadata={"format": "pt"})
    (out / "model.safetensors").unlink()
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: f for f, keys in shards.items() for k in keys}}))
    import_hf(out, tmp_path / "w.safetensors")
    got, _, _ = load_model(tmp_path / "w.safetensors")
    for name, a in params.items():
        np.testing.assert_array_equal(got[name], a)


def test_spark_config_accepts_transformers_defaults_for_missing_keys():
    conf = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 48, "vocab_size": 256,
            "intermediate_size": 128, "rms_norm_eps": 1e-5}
    cfg = spark_config(conf, "config.json")
    assert (cfg.n_kv_head, cfg.seq_len) == (4, 48)          # no kv heads given: MHA


# ---------------------------------------------------------------- bad input

def _edit_config(folder, **changes):
    conf = json.loads((folder / "config.json").read_text())
    conf.update(changes)
    (folder / "config.json").write_text(json.dumps(conf))


@pytest.mark.parametrize("changes,needle", [
    ({"attention_bias": True}, "bias"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, "linear"),
    ({"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "dynamic"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}, "rope_theta"),
    ({"rms_norm_eps": 1e-6}, "rms_norm_eps"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"intermediate_size": 100}, "intermediate_size"),
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "not llama"),
    ({"vocab_size": 32000}, "vocab"),
    ({"num_key_value_heads": 3}, "n_kv_head"),
    ({"hidden_size": 64, "head_dim": None, "intermediate_size": 256, META_FIELD: None}, "shape"),
])
def test_an_incompatible_config_is_one_line_and_writes_nothing(exported, tmp_path, changes, needle):
    _, out, _ = exported
    _edit_config(out, **changes)
    target = tmp_path / "w.safetensors"
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", target])
    assert_one_line_error(rc, err, needle)
    assert not target.exists()


@pytest.mark.parametrize("edit,needle", [
    ("bias", "is a bias"), ("extra", "no Spark counterpart"), ("missing", "lacks tensor"),
    ("int32", "int32"),
])
def test_bad_tensors_are_one_line(exported, tmp_path, edit, needle):
    _, out, _ = exported
    tensors = load_file(out / "model.safetensors")
    if edit == "bias":
        tensors["model.layers.0.self_attn.q_proj.bias"] = np.zeros(32, np.float32)
    elif edit == "extra":
        tensors["model.layers.9.mlp.up_proj.weight"] = np.zeros((128, 32), np.float32)
    elif edit == "missing":
        del tensors["model.norm.weight"]
    else:
        tensors["model.norm.weight"] = np.zeros(32, np.int32)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", tmp_path / "w.safetensors"])
    assert_one_line_error(rc, err, needle)
    assert not (tmp_path / "w.safetensors").exists()


def test_edited_spark_metadata_that_disagrees_is_refused(exported, tmp_path):
    _, out, _ = exported
    _edit_config(out, num_hidden_layers=1)
    tensors = load_file(out / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if ".layers.1." not in k}, out / "model.safetensors")
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", tmp_path / "w.safetensors"])
    assert_one_line_error(rc, err, "disagrees")


def test_weights_without_spark_metadata_are_refused(tmp_path):
    plain = tmp_path / "plain.safetensors"
    save_file({"x": np.zeros(3, np.float32)}, plain)
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "out", "--weights", plain])
    assert_one_line_error(rc, err, "not Spark weights")
    assert not (tmp_path / "out").exists()


def test_unknown_format_is_one_line(tmp_path):
    w = tmp_path / "w.safetensors"
    write_weights(w)
    rc, _, err = run_spark(["export", "--to", "onnx", tmp_path / "out", "--weights", w])
    assert_one_line_error(rc, err, "onnx")
    rc, _, err = run_spark(["import", "--from", "gguf", tmp_path, "--out", tmp_path / "x"])
    assert_one_line_error(rc, err, "gguf")


def test_non_empty_out_needs_force_and_force_replaces(tmp_path):
    w = tmp_path / "w.safetensors"
    write_weights(w)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    rc, _, err = run_spark(["export", "--to", "hf", out, "--weights", w])
    assert_one_line_error(rc, err, "--force")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    # --force replaces only a folder this tool wrote (the output gate): never keep.txt's
    rc, _, err = run_spark(["export", "--to", "hf", out, "--weights", w, "--force"])
    assert_one_line_error(rc, err, "not an exported Hugging Face folder this tool wrote")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    (out / "keep.txt").unlink()
    for _ in range(2):  # an empty folder, then the export it holds, replaced
        rc, _, err = run_spark(["export", "--to", "hf", out, "--weights", w, "--force"])
        assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "w.safetensors"]  # no leftovers
    (tmp_path / "empty").mkdir()
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "empty", "--weights", w])
    assert rc == 0, err


def test_import_over_an_existing_file_needs_force(exported, tmp_path):
    w, out, _ = exported
    target = tmp_path / "taken.safetensors"
    target.write_bytes(b"old")
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", target])
    assert_one_line_error(rc, err, "--force")
    assert target.read_bytes() == b"old"
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", target, "--force"])
    assert_one_line_error(rc, err, "not a Spark weights file this tool wrote")
    assert target.read_bytes() == b"old"
    target.write_bytes(w.read_bytes())  # Spark weights: --force replaces them
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", target, "--force"])
    assert rc == 0 and target.read_bytes() == w.read_bytes()


def test_mean_pool_weights_and_a_wrong_tokenizer_are_refused(tmp_path):
    from sparktrain.model.config import ModelConfig

    pool = tmp_path / "pool.safetensors"
    write_weights(pool, ModelConfig(dim=16, train_attn=False))
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "a", "--weights", pool])
    assert_one_line_error(rc, err, "mean-pool")
    w = tmp_path / "w.safetensors"
    write_weights(w)
    small = Tokenizer.from_str(byte_tokenizer().to_str())
    small.add_tokens(["extra"])
    (tmp_path / "tok.json").write_text(small.to_str())
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "b", "--weights", w,
                            "--tokenizer", tmp_path / "tok.json"])
    assert_one_line_error(rc, err, "257 tokens")
    (tmp_path / "bad.json").write_text("{not json")
    rc, _, err = run_spark(["export", "--to", "gguf", tmp_path / "c.gguf", "--weights", w,
                            "--tokenizer", tmp_path / "bad.json"])
    assert_one_line_error(rc, err, "tokenizer.json")
    assert not any((tmp_path / n).exists() for n in ("a", "b", "c.gguf"))


def test_a_given_tokenizer_is_copied_as_is(tmp_path):
    w = tmp_path / "w.safetensors"
    write_weights(w)
    text = byte_tokenizer().to_str(pretty=True)
    (tmp_path / "tok.json").write_text(text)
    export_hf(w, tmp_path / "out", tmp_path / "tok.json")
    assert (tmp_path / "out" / "tokenizer.json").read_text() == text


def test_literal_special_text_stays_bytes_when_asked(exported):
    _, out, _ = exported
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.encode("a<|eos|>", add_special_tokens=False).ids == [97, 0xFF]
    tok.encode_special_tokens = True
    assert tok.encode("a<|eos|>", add_special_tokens=False).ids == list(b"a<|eos|>")


def test_export_and_import_never_load_torch():
    """The light path: `make test` installs no torch, and export must not need it."""
    code = ("import sys, sparktrain.export.hf, sparktrain.export.gguf, sparktrain.cli.export;"
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules];"
            "sys.exit(f'loaded {bad}' if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_a_checkpoint_holding_nan_is_refused(exported, tmp_path):
    _, out, _ = exported
    tensors = load_file(out / "model.safetensors")
    tensors["model.norm.weight"][3] = np.nan
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    rc, _, err = run_spark(["import", "--from", "hf", out, "--out", tmp_path / "w.safetensors"])
    assert_one_line_error(rc, err, "NaN")
    assert not (tmp_path / "w.safetensors").exists()
