"""generate(): batched greedy equals a naive one-row loop; sampling is seeded."""
import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.data.tokenizer import BYTES
from sparktrain.eval.generate import generate, prompt_context
from sparktrain.model.build import build_model
from sparktrain.model.sampling import generate_tokens, pick_next
from sparktrain.data.pairs import BOS, EOS, SEP

from evalkit import SMALL, SMALL_POOL, oracle  # noqa: F401 (fixture)


def naive_greedy(params, cfg, prompt, max_new):
    """The reference: one prompt, whole sequence forward each step, no padding."""
    seq = [BOS] + list(prompt.encode()) + [SEP]
    out = []
    for _ in range(max_new):
        window = np.array([seq[-cfg.seq_len:]])
        tok = int(np.argmax(build_model(cfg).forward_logits(params, window)[0, -1]))
        if tok == EOS:
            break
        seq.append(tok)
        out.append(tok)
    return bytes(out).decode("utf-8", errors="replace")


def test_batched_greedy_equals_naive_loop_with_padding_and_sliding_window():
    params = build_model(SMALL).init_params(seed=5)
    prompts = ["a", "Say exactly: abc", "a somewhat longer prompt here"]  # lengths differ
    got = generate(params, SMALL, prompts, max_new=12)
    assert got == [naive_greedy(params, SMALL, p, 12) for p in prompts]
    assert all(len(g.encode("utf-8", "surrogatepass")) <= 12 * 3 for g in got)
    assert generate(params, SMALL, prompts[1:2], max_new=12) == got[1:2]


def test_stops_at_eos_and_max_new(oracle):
    assert generate({}, SMALL, ["Say exactly: hello", "Say exactly: hi"], max_new=64) == \
        ["hello", "hi"]
    assert generate({}, SMALL, ["Say exactly: hello"], max_new=2) == ["he"]
    assert generate({}, SMALL, ["Say exactly: hello"], max_new=0) == [""]


def test_long_prompt_keeps_its_last_tokens():
    prompt = "x" * 50 + "tail"
    ctx, cut = prompt_context(prompt, SMALL.seq_len)
    assert cut and len(ctx) == SMALL.seq_len and ctx[-1] == SEP
    assert bytes(ctx[-5:-1].tolist()) == b"tail"
    assert not prompt_context("short", SMALL.seq_len)[1]
    params = build_model(SMALL).init_params(seed=6)
    [tokens] = generate_tokens(params, SMALL, [ctx], [4], eos=EOS)
    assert generate(params, SMALL, [prompt], max_new=4) == [BYTES.completion_text(tokens)]


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    params = build_model(SMALL).init_params(seed=7)
    prompts = ["Say exactly: abc", "hello"]
    a = generate(params, SMALL, prompts, max_new=8, temperature=5.0, seed=1)
    assert generate(params, SMALL, prompts, max_new=8, temperature=5.0, seed=1) == a
    assert generate(params, SMALL, prompts, max_new=8, temperature=5.0, seed=2) != a
    assert generate(params, SMALL, prompts, max_new=8, temperature=5.0, top_k=1) == \
        generate(params, SMALL, prompts, max_new=8)


def test_pick_next_top_k_only_draws_the_k_likeliest():
    logits = np.tile(np.arange(256, dtype=np.float32), (4000, 1))  # (A, V)
    got = pick_next(logits, 100.0, 3, np.random.default_rng(0))
    assert set(got.tolist()) == {253, 254, 255}
    assert pick_next(logits[:2], 0.0, 0, None).tolist() == [255, 255]


def test_pool_model_generates_one_byte():
    params = build_model(SMALL_POOL).init_params(seed=8)
    [text] = generate(params, SMALL_POOL, ["Say exactly: ab"], max_new=10)
    assert len(text) <= 1


def test_bad_arguments():
    params = build_model(SMALL).init_params(seed=0)
    with pytest.raises(SparkError, match="prompt is empty"):
        generate(params, SMALL, [""])
    with pytest.raises(SparkError, match="temperature"):
        generate(params, SMALL, ["a"], temperature=-1)
    with pytest.raises(SparkError, match="top_k"):
        generate(params, SMALL, ["a"], top_k=-1)
