"""A BPE model's Hugging Face export generates what `spark generate` generates: its
tokenizer adds BOS (and SEP for a pairs model) as Spark does, so transformers'
greedy generate from the plain prompt gives the same tokens.

Needs the optional `hf` extra (torch, transformers): `make test-hf`.
"""
import dataclasses


import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sparktrain.data.tokenizer import train_bpe                     # noqa: E402
from sparktrain.eval.generate import corpus_context, prompt_context  # noqa: E402
from sparktrain.core.fsutil import sha256_bytes                           # noqa: E402
from sparktrain.model.sampling import generate_tokens               # noqa: E402
from sparktrain.model.weights import load_model                      # noqa: E402
from sparkhelp import run_spark                                      # noqa: E402

from exportkit import SMALL, project_prompts, write_weights          # noqa: E402

pytestmark = pytest.mark.hf
MAX_NEW = 16


@pytest.mark.parametrize("kind", ["corpus", "pairs"])
def test_transformers_greedy_equals_spark_generate_for_a_bpe_model(tmp_path, kind):
    folder = tmp_path / "job"
    folder.mkdir()
    tok = train_bpe(project_prompts(40) * 4, 320)
    text = tok.to_json().encode()
    (folder / "tokenizer.json").write_bytes(text)
    weights = folder / "weights.safetensors"
    write_weights(weights, dataclasses.replace(SMALL, vocab=tok.vocab), seed=5,
                  dataset_kind=kind, tokenizer="bpe", tokenizer_sha256=sha256_bytes(text))
    rc, _, err = run_spark(["export", tmp_path / "hf", "--to", "hf", "--weights", weights])
    assert rc == 0, err
    params, cfg, _ = load_model(weights)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf",
                                                              local_files_only=True)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    prompts = project_prompts(6)
    for prompt in prompts:
        context = (prompt_context(prompt, cfg.seq_len, tok) if kind == "pairs"
                   else corpus_context(tok, prompt, cfg.seq_len))[0]
        spark = generate_tokens(params, cfg, [context], [MAX_NEW], eos=tok.eos)[0]
        ids = hf_tok(prompt, return_tensors="pt")   # special tokens on: transformers' default
        assert ids["input_ids"][0].tolist() == context.tolist()
        out = model.generate(**ids, max_new_tokens=MAX_NEW, do_sample=False)
        new = out[0, ids["input_ids"].shape[1]:].tolist()
        if new and new[-1] == tok.eos:
            new = new[:-1]
        assert new == spark, prompt
        assert hf_tok.decode(new) == tok.decode(spark)
