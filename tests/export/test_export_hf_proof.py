"""The proof that an exported model is this model: transformers (and llama.cpp when its
Python binding is installed) compute the same logits and the same greedy text.

Needs the optional `hf` extra (torch, transformers, accelerate): `make test-hf`.
Without it these tests skip, so `make test` never downloads torch.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sparktrain.eval.generate import generate                     # noqa: E402
from sparktrain.export import gguf as gguf_export                  # noqa: E402
from sparktrain.export.hf import export_hf                         # noqa: E402
from sparktrain.model.build import build_model                     # noqa: E402
from sparktrain.model.weights import load_model                    # noqa: E402

from exportkit import project_prompts, train_tiny_pairs, write_weights  # noqa: E402

pytestmark = pytest.mark.hf
REL_TOL = 1e-5      # max |logit difference| / max |logit|, the bar
MAX_NEW = 24


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained on the project's dataset (about a second)."""
    return train_tiny_pairs(tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="module")
def random_weights(tmp_path_factory):
    path = tmp_path_factory.mktemp("random") / "w.safetensors"
    write_weights(path)
    return path


def prompt_batch(tok, prompts):
    """Right-padded [BOS] + prompt + [SEP] rows and their lengths, from the HF tokenizer."""
    rows = [tok(p)["input_ids"] for p in prompts]
    lens = np.array([len(r) for r in rows])
    grid = np.full((len(rows), lens.max()), 0xFF, dtype=np.int64)
    for i, r in enumerate(rows):
        grid[i, :len(r)] = r
    return grid, lens


def logits_gap(model, params, cfg, grid, lens):
    """max |HF - Spark| / max |Spark| over the real (unpadded) positions."""
    mask = (np.arange(grid.shape[1]) < lens[:, None])
    with torch.no_grad():
        hf = model(torch.tensor(grid), attention_mask=torch.tensor(mask.astype(np.int64)))
    hf = hf.logits.float().numpy()[mask]
    spark = build_model(cfg).forward_logits(params, grid)[mask]
    return float(np.abs(hf - spark).max() / np.abs(spark).max())


def hf_greedy(model, tok, prompt, max_new):
    ids = tok(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=max_new, do_sample=False)
    new = out[0, ids["input_ids"].shape[1]:].tolist()
    if new and new[-1] == 0xFF:
        new = new[:-1]
    return tok.decode(new)


@pytest.mark.parametrize("which", ["trained", "random_weights"])
def test_transformers_logits_and_greedy_text_equal_spark(which, request, tmp_path):
    weights = request.getfixturevalue(which)
    params, cfg, _ = load_model(weights)
    export_hf(weights, tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    prompts = project_prompts(12)
    for p in prompts + ["é, ü, 日本語 🙂"]:
        assert tok(p, add_special_tokens=False)["input_ids"] == list(p.encode()), p
    grid, lens = prompt_batch(tok, prompts)
    gap = logits_gap(model, params, cfg, grid, lens)
    print(f"\n{which}: max |logit diff| / max |logit| = {gap:.3e} over {int(lens.sum())} positions")
    assert gap < REL_TOL
    spark_text = generate(params, cfg, prompts, max_new=MAX_NEW)
    hf_text = [hf_greedy(model, tok, p, MAX_NEW) for p in prompts]
    print(f"{which}: greedy {sum(a == b for a, b in zip(spark_text, hf_text))}/{len(prompts)} "
          f"equal, e.g. {prompts[0]!r} -> {spark_text[0]!r}")
    assert hf_text == spark_text
    assert sum(len(t) for t in spark_text) > len(prompts)          # real text, not all EOS


def test_gguf_read_by_transformers_gives_the_same_logits(trained, tmp_path, monkeypatch):
    """transformers un-permutes GGUF q/k its own way; the logits must come back."""
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    params, cfg, _ = load_model(trained)
    gguf_export.export_gguf(trained, tmp_path / "m.gguf")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="m.gguf", local_files_only=True)
    grid = np.array([[0xFD, *b"hello there", 0xFE, *b"hi"]])
    lens = np.array([grid.shape[1]])
    gap = logits_gap(model, params, cfg, grid, lens)
    print(f"\ngguf via transformers: max |logit diff| / max |logit| = {gap:.3e}")
    assert gap < REL_TOL
    # the control: without the rope permutation the check fails
    monkeypatch.setattr(gguf_export, "rope_interleave", lambda w, heads: w)
    gguf_export.export_gguf(trained, tmp_path / "plain.gguf")
    plain = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="plain.gguf", local_files_only=True)
    assert logits_gap(plain, params, cfg, grid, lens) > 100 * REL_TOL


def test_llama_cpp_runs_the_gguf(trained, tmp_path):
    """llama.cpp itself, through its Python binding (llama-cpp-python), when installed."""
    llama_cpp = pytest.importorskip("llama_cpp")
    params, cfg, _ = load_model(trained)
    gguf_export.export_gguf(trained, tmp_path / "m.gguf")
    f32 = llama_cpp.GGML_TYPE_F32           # llama.cpp keeps its KV cache in float16 by default
    llm = llama_cpp.Llama(model_path=str(tmp_path / "m.gguf"), n_ctx=cfg.seq_len,
                          logits_all=True, verbose=False, seed=0, type_k=f32, type_v=f32)
    for text in ["hello there", "é, ü, 日本語 🙂"]:
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == list(text.encode())
    assert llm.tokenize(b"hi<|sep|>", add_bos=True, special=True) == [0xFD, *b"hi", 0xFE]
    worst = 0.0
    prompts = project_prompts(6)
    for p in prompts:
        ids = [0xFD, *p.encode(), 0xFE]
        llm.reset()
        llm.eval(ids)
        got = np.array(llm.scores[:len(ids)])
        want = build_model(cfg).forward_logits(params, np.array([ids]))[0]
        worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    print(f"\nllama.cpp: max |logit diff| / max |logit| = {worst:.3e}")
    assert worst < REL_TOL
    for p, want in zip(prompts, generate(params, cfg, prompts, max_new=MAX_NEW)):
        llm.reset()
        out = []
        for tok in llm.generate([0xFD, *p.encode(), 0xFE], top_k=1, temp=0.0):
            if tok == 0xFF or len(out) == MAX_NEW:
                break
            out.append(tok)
        assert bytes(out).decode("utf-8", errors="replace") == want, p
