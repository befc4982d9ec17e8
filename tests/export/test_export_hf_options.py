"""A model with architecture options, exported to Hugging Face (Arcee or Qwen 3 for relu2 or
qk_norm alone, else the Spark architecture: its own modelling code, `trust_remote_code=True`),
is this model in transformers: the same logits (1e-5 of the largest) and the same greedy ids
as `spark generate` (past the context window too, for the Spark architecture), for each
option alone, the proof's set and all of them together (docs/export.md "What exports").

Needs the optional `hf` extra (torch, transformers): `make test-hf`.
"""
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sparktrain.eval.generate import generate                      # noqa: E402
from sparktrain.model.build import build_model                     # noqa: E402
from sparktrain.model.weights import load_model                    # noqa: E402
from sparkhelp import run_spark                                     # noqa: E402

from exportkit import SMALL, project_prompts, write_weights         # noqa: E402

pytestmark = pytest.mark.hf
REL_TOL = 1e-5      # max |logit difference| / max |logit|, the issue's bar
MAX_NEW = 40        # past SMALL's 48-token window for most prompts: the window slides
OPTIONS = {"relu2": {"mlp": "relu2"}, "qk_norm": {"qk_norm": True},
           "logit_cap": {"logit_cap": 2.0}, "bigram": {"bigram": 37},
           "value_residual": {"value_residual": True, "n_layer": 3},
           "unet": {"unet": True, "n_layer": 3}, "unet_even": {"unet": True, "n_layer": 4},
           # data/programs/coder-proof.yaml's set
           "proof": {"mlp": "relu2", "qk_norm": True, "logit_cap": 15.0},
           "all": {"mlp": "relu2", "qk_norm": True, "logit_cap": 2.0, "bigram": 37,
                   "value_residual": True, "unet": True, "n_layer": 4}}


def exported(tmp_path, options, seed=3):
    """Spark weights of SMALL with `options`, exported as docs/export.md writes it."""
    cfg = dataclasses.replace(SMALL, **options).validate()
    weights = tmp_path / "w.safetensors"
    params = write_weights(weights, cfg, seed=seed)
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "hf", "--weights", weights])
    assert rc == 0, err
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "hf", trust_remote_code=True, local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True,
                                                     local_files_only=True)
    return params, cfg, model, tok


def hf_greedy(model, tok, prompt, max_new):
    """transformers' greedy ids after the prompt, EOS dropped (random weights emit any byte,
    specials too: ids, not text, are compared)."""
    ids = tok(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=max_new, do_sample=False)
    new = out[0, ids["input_ids"].shape[1]:].tolist()
    return new[:-1] if new and new[-1] == 0xFF else new


# one option alone is an architecture of transformers (docs/export.md "What exports")
CLASSES = {"relu2": "ArceeForCausalLM", "qk_norm": "Qwen3ForCausalLM"}


@pytest.mark.parametrize("name", OPTIONS)
def test_an_option_models_logits_and_greedy_text_equal_spark(name, tmp_path):
    params, cfg, model, tok = exported(tmp_path, OPTIONS[name])
    assert type(model).__name__ == CLASSES.get(name, "SparkForCausalLM")
    assert model.dtype == torch.float32
    prompts = project_prompts(8)
    rows = [tok(p)["input_ids"] for p in prompts]
    for row in rows:
        with torch.no_grad():
            hf = model(torch.tensor([row])).logits.numpy()[0]
        spark = build_model(cfg).forward_logits(params, np.array([row]))[0]
        gap = float(np.abs(hf - spark).max() / np.abs(spark).max())
        assert gap < REL_TOL, (row, gap)
    if name in CLASSES:  # transformers' own models run on past the window: stay within it
        prompts = [p for p, row in zip(prompts, rows) if len(row) + 8 <= cfg.seq_len]
        assert prompts
        new = [min(MAX_NEW, cfg.seq_len - len(tok(p)["input_ids"])) for p in prompts]
    else:                # the Spark architecture slides its window as spark generate
        new = [MAX_NEW] * len(prompts)
    for prompt, n in zip(prompts, new):
        spark_ids: list = []
        generate(params, cfg, [prompt], max_new=n, tokens_out=spark_ids)
        assert hf_greedy(model, tok, prompt, n) == spark_ids[0], prompt
    if name not in CLASSES:
        assert max(len(tok(p)["input_ids"]) for p in prompts) + MAX_NEW > cfg.seq_len  # slid


def test_right_padding_keeps_the_logits_and_left_padding_is_refused(tmp_path):
    params, cfg, model, tok = exported(tmp_path, OPTIONS["all"])
    grid = np.array([[0xFD, *b"hello there", 0xFE], [0xFD, *b"hi", 0xFE] + [0xFF] * 9])
    mask = np.array([[1] * 13, [1] * 4 + [0] * 9])
    with torch.no_grad():
        hf = model(torch.tensor(grid), attention_mask=torch.tensor(mask)).logits.numpy()
    spark = build_model(cfg).forward_logits(params, grid)
    real = mask.astype(bool)
    assert np.abs(hf[real] - spark[real]).max() < REL_TOL * np.abs(spark[real]).max()
    with pytest.raises(ValueError, match="left padding"):
        model(torch.tensor(grid), attention_mask=torch.tensor(mask[:, ::-1].copy()))


def test_a_trained_model_with_options_loads_with_equal_logits():
    """The coder proof's model (`make spark-coder-proof`: relu2, qk_norm, logit_cap 15),
    when out/train holds it (skipped otherwise: training it takes ten minutes)."""
    import tempfile

    from sparkhelp import ROOT

    weights = ROOT / "out/train/job-coder-001/weights.safetensors"
    if not weights.exists() or not load_model(weights)[1].options():
        pytest.skip("no trained model with options in out/train (make spark-coder-proof)")
    params, cfg, _ = load_model(weights)
    with tempfile.TemporaryDirectory() as tmp:
        rc, _, err = run_spark(["export", "--to", "hf", f"{tmp}/hf", "--weights", weights])
        assert rc == 0, err
        model = transformers.AutoModelForCausalLM.from_pretrained(
            f"{tmp}/hf", trust_remote_code=True, local_files_only=True)
        tok = transformers.AutoTokenizer.from_pretrained(f"{tmp}/hf", trust_remote_code=True,
                                                         local_files_only=True)
        row = tok("def main(argv):\n    for i in range(")["input_ids"]
        with torch.no_grad():
            hf = model(torch.tensor([row])).logits.numpy()[0]
        spark = build_model(cfg).forward_logits(params, np.array([row]))[0]
        assert np.abs(hf - spark).max() < REL_TOL * np.abs(spark).max()


def test_the_qwen3_gguf_of_a_qk_norm_model_gives_the_same_logits(tmp_path):
    """transformers reads the `qwen3` GGUF (its GGUF reader takes no head size from the file
    and assumes Qwen 3's 128, so the config is given it); llama.cpp itself: make test-llama."""
    pytest.importorskip("gguf")
    cfg = dataclasses.replace(SMALL, qk_norm=True).validate()
    params = write_weights(tmp_path / "w.safetensors", cfg)
    rc, _, err = run_spark(["export", "--to", "gguf", tmp_path / "m.gguf",
                            "--weights", tmp_path / "w.safetensors"])
    assert rc == 0, err
    conf = transformers.AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf")
    conf.head_dim = cfg.head_dim
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf",
                                                              config=conf)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    grid = np.array([[0xFD, *b"hello there", 0xFE, *b"hi"]])
    with torch.no_grad():
        hf = model(torch.tensor(grid)).logits.numpy()
    spark = build_model(cfg).forward_logits(params, grid)
    assert np.abs(hf - spark).max() < REL_TOL * np.abs(spark).max()
