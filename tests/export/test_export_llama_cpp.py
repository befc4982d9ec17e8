"""The GGUF in the real client: llama.cpp, through its Python binding (llama-cpp-python,
built from the registry by `make test-llama`), reads a byte model and a BPE model as
Spark does: the same token ids for code, the same greedy text from a plain text prompt
(`create_completion`, as a user calls it), logits within 1e-4 with a float32 KV cache.

Skipped without llama_cpp, so `make test` never builds llama.cpp (about 30 minutes).
"""
import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")

from sparktrain.data.tokenizer import load_tokenizer              # noqa: E402
from sparktrain.export.gguf import export_gguf                    # noqa: E402
from sparktrain.model.build import build_model                    # noqa: E402
from sparktrain.model.weights import load_model                   # noqa: E402
from sparkhelp import ROOT, run_spark                             # noqa: E402

from exportkit import project_prompts, train_tiny_pairs  # noqa: E402

pytestmark = pytest.mark.llama
TOL = 1e-4          # max |logit difference| / max |logit|
MAX_NEW = 16
SNIPPETS = ["x += 1000000", "for i in range(10):\n    print(i)\n",
            "def f(a, b):\n    return a**2 + b  # it's 2x\n",
            "s = {'key': [1, 2.5, -3e10]}", "\tif not x:\n\t\traise ValueError('no')"]
CODE_PROMPTS = ["for i in range(", "def main():\n    ", "import os\n", "x = 1000000\ny = "]


@pytest.fixture(scope="module")
def byte_model(tmp_path_factory):
    """A tiny pairs model trained on the project's dataset (about a second)."""
    return train_tiny_pairs(tmp_path_factory.mktemp("byte"))


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory):
    """A code model: the tiny coder recipe (BPE 2048, AdamW) for a few passes on the
    committed standard-library modules (some seconds)."""
    d = tmp_path_factory.mktemp("bpe")
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/corpus/tiny", "--glob", "*.py",
                            "--out", d / "run", "--outer", 2, "--inner", 40, "--warmup", 5])
    assert rc == 0, err
    return d / "run" / "weights.safetensors"


def open_gguf(weights, tmp_path):
    export_gguf(weights, tmp_path / "m.gguf")
    _, cfg, _ = load_model(weights)
    f32 = llama_cpp.GGML_TYPE_F32            # llama.cpp's default KV cache is float16
    return llama_cpp.Llama(model_path=str(tmp_path / "m.gguf"), n_ctx=cfg.seq_len,
                           logits_all=True, verbose=False, seed=0, type_k=f32, type_v=f32)


def logits_gap(llm, weights, contexts) -> float:
    params, cfg, _ = load_model(weights)
    worst = 0.0
    for ids in contexts:
        llm.reset()
        llm.eval(ids)
        got = np.array(llm.scores[:len(ids)])
        want = build_model(cfg).forward_logits(params, np.array([ids]))[0]
        worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    return worst


def spark_generate(weights, prompt: str) -> str:
    rc, out, err = run_spark(["generate", "--weights", weights, "--max-new", MAX_NEW, prompt])
    assert rc == 0, err
    return out[:-1]                          # print's newline


def llama_complete(llm, prompt: str) -> str:
    llm.reset()
    done = llm.create_completion(prompt, max_tokens=MAX_NEW, temperature=0.0)
    return done["choices"][0]["text"]


def test_bpe_model_code_tokens_logits_and_completions(bpe_model, tmp_path):
    llm = open_gguf(bpe_model, tmp_path)
    tok = load_tokenizer(bpe_model.parent / "tokenizer.json")
    same = [llm.tokenize(s.encode(), add_bos=False, special=False) == tok.encode(s).tolist()
            for s in SNIPPETS]
    print(f"\nllama.cpp BPE: {sum(same)}/{len(SNIPPETS)} code snippets tokenised alike")
    assert all(same)
    assert llm.tokenize(b"x = 1", add_bos=True, special=True)[0] == 0       # BOS, nothing after
    gap = logits_gap(llm, bpe_model, [[0, *tok.encode(p).tolist()] for p in CODE_PROMPTS])
    print(f"llama.cpp BPE: max |logit diff| / max |logit| = {gap:.3e}")
    assert gap < TOL
    spark = [spark_generate(bpe_model, p) for p in CODE_PROMPTS]
    llama = [llama_complete(llm, p) for p in CODE_PROMPTS]
    print(f"llama.cpp BPE: {sum(a == b for a, b in zip(spark, llama))}/{len(spark)} "
          f"completions equal, e.g. {CODE_PROMPTS[0]!r} -> {spark[0]!r}")
    assert llama == spark
    assert sum(len(t) for t in spark) > len(spark)                        # real text


def test_byte_model_tokens_logits_and_completions(byte_model, tmp_path):
    llm = open_gguf(byte_model, tmp_path)
    same = [llm.tokenize(s.encode(), add_bos=False, special=False) == list(s.encode())
            for s in SNIPPETS]
    assert all(same)
    # a pairs prompt names its SEP in the text; llama.cpp adds BOS and nothing else
    assert llm.tokenize(b"hi<|sep|>", add_bos=True, special=True) == [0xFD, *b"hi", 0xFE]
    prompts = project_prompts(6)
    gap = logits_gap(llm, byte_model, [[0xFD, *p.encode(), 0xFE] for p in prompts])
    print(f"\nllama.cpp byte: max |logit diff| / max |logit| = {gap:.3e}")
    assert gap < TOL
    spark = [spark_generate(byte_model, p) for p in prompts]
    llama = [llama_complete(llm, p + "<|sep|>") for p in prompts]
    print(f"llama.cpp byte: {sum(a == b for a, b in zip(spark, llama))}/{len(spark)} "
          f"completions equal, e.g. {prompts[0]!r} -> {spark[0]!r}")
    assert llama == spark
    assert sum(len(t) for t in spark) > len(spark)
