"""The model card (README.md) of a Hugging Face export: front matter the Hub reads, the
architecture, what the job folder records of the training and held-out evaluation, the
tokenizer, how to load it (docs/export.md "The model card")."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path, PurePath

from tokenizers import Tokenizer

from sparktrain.core.errors import printable
from sparktrain.core.jobfiles import CHECKPOINT, TOKENIZER
from sparktrain.core.safeload import load_json
from sparktrain.core.values import is_finite
from sparktrain.core.metric_keys import CARD_BASELINES, CARD_KEYS
from sparktrain.export.names import hf_arch
from sparktrain.export.tokenizer import special_ids
from sparktrain.knobs import card
from sparktrain.model.config import ModelConfig, n_params
from sparktrain.params import StepConfig
from sparktrain.train.jobstate import job_state
from sparktrain.train.outputs import read_job_json

CARD_FILE = "README.md"
# The knobs the card's table shows, when the checkpoint records them (each knob's role)
KNOBS = card(StepConfig)
# What a quoted string may not hold: a line break, a table cell break, raw HTML, a code-span break
CARD_SAFE = str.maketrans({"\r": " ", "\n": " ", "|": "\\|", "<": "&lt;", ">": "&gt;", "`": "'"})


def job_records(weights: str | os.PathLike) -> dict:
    """What the job folder holding `weights` says about them: {"checkpoint": ...,
    "state": job_state(...)}, or {} when the folder's checkpoint is not about
    these very weights (a copied or renamed file, an edited one)."""
    folder = Path(weights).parent
    ckpt = read_job_json(folder / CHECKPOINT)
    if not isinstance(ckpt, dict) or Path(str(ckpt.get("weights", ""))).name != Path(weights).name:
        return {}
    state = job_state(folder)
    if state.get("state") != "trained" or not state.get("weights_verified"):
        return {}
    return {"checkpoint": ckpt, "state": state}


def _num(v) -> str:
    return "unknown" if not is_finite(v) else f"{v:.4f}" if isinstance(v, float) else str(v)


def _text(v) -> str:
    """A string the card quotes, on one line whatever it holds (every control character and
    line separator escaped: \u2028, \x0b, \x85 ... start a line for some readers), made
    safe (CARD_SAFE) and cut to 200 characters."""
    return printable(str(v)).translate(CARD_SAFE)[:200]


def _front_matter(job: str, tags: list[str], metrics: dict) -> list[str]:
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation", "tags:"]
    lines += [f"- {t}" for t in tags]
    if metrics:  # model-index: what the Hub shows as evaluation results
        lines += ["model-index:", f"- name: {json.dumps(job)}", "  results:",
                  "  - task:", "      type: text-generation", "    dataset:",
                  "      name: held-out split", "      type: held-out", "    metrics:"]
        for k, v in metrics.items():
            lines += [f"    - type: {k}", f"      value: {json.dumps(v)}"]
    return lines + ["---"]


def model_card(meta: dict, cfg: ModelConfig, tok_kind: str, records: dict) -> str:
    """README.md's text for an export of weights with metadata `meta` and arch `cfg`."""
    ckpt, state = records.get("checkpoint", {}), records.get("state", {})
    job = str(meta.get("job") or ckpt.get("job") or "spark-model")
    metrics = {k: state["eval"][k] for k in CARD_KEYS
               if k in state.get("eval", {}) and is_finite(state["eval"][k])}
    corpus = "corpus" if ckpt.get("dataset_kind") or "bpb" in metrics else "pairs"
    options, arch = cfg.options(), hf_arch(cfg)  # spark: the folder's own code (custom_code)
    tags = ["spark-train", "custom_code" if arch == "spark" else arch, "causal-lm",
            "numpy-trained", corpus]
    kind = {"spark": "Spark-architecture (a Llama with options)", "llama": "Llama-architecture",
            "arcee": "Arcee-architecture (a Llama with a ReLU^2 MLP)",
            "qwen3": "Qwen3-architecture (a Llama with q/k norms)"}[arch]
    out = _front_matter(job, tags, metrics)
    out += ["", f"# {_text(job)}", "",
            f"A small {kind} causal language model ({n_params(cfg):,} "
            f"parameters) trained from scratch with Spark Train, a numpy training pipeline "
            f"driven by SPARK_BC programs, then exported with `spark export --to hf`.", "",
            "## Architecture", "",
            "| dim | layers | heads | kv heads | head dim | context | vocab |",
            "|---|---|---|---|---|---|---|",
            f"| {cfg.dim} | {cfg.n_layer} | {cfg.n_head} | {cfg.n_kv_head} | {cfg.head_dim} "
            f"| {cfg.seq_len} | {cfg.vocab} |", "",
            "RMSNorm, RoPE, grouped-query causal attention, "
            f"{'ReLU^2 MLP' if cfg.mlp == 'relu2' else 'SwiGLU'}; float32 weights, "
            "untied embeddings.", ""]
    if options:
        out += ["Architecture options" + (" (`configuration_spark.py`, `modeling_spark.py` "
                "in this folder compute them)" if arch == "spark" else "") + ": " + ", ".join(f"`{k}: {_text(json.dumps(v))}`"
                                                    for k, v in options.items()) + ".", ""]
    out += ["## Training", ""]
    out += _training(job, meta, ckpt)
    out.append("")
    if metrics:
        detail = state.get("eval_detail", {})
        out += ["## Held-out evaluation", "",
                "On rows (or files) never trained on, from the job's eval.json:", "",
                "| metric | value |", "|---|---|"]
        out += [f"| {k} | {_num(v)} |" for k, v in metrics.items()]
        out += [f"| {k} | {_num(detail[k])} |" for k in CARD_BASELINES
                if is_finite(detail.get(k))] + [""]
    out += ["## Tokenizer", "", tok_kind, "",
            "## Use it", "", "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            'tok = AutoTokenizer.from_pretrained("PATH"'
            + (", trust_remote_code=True)" if arch == "spark" else ")   # this folder"),
            'model = AutoModelForCausalLM.from_pretrained("PATH"'
            + (", trust_remote_code=True)" if arch == "spark" else ")"),
            'ids = tok("hi", return_tensors="pt")',
            "out = model.generate(**ids, max_new_tokens=32)",
            "print(tok.decode(out[0, ids.input_ids.shape[1]:], skip_special_tokens=True))",
            "```", ""]
    if ckpt.get("weights_sha256"):
        out += [f"Spark weights sha256 `{_text(ckpt['weights_sha256'])}`; "
                "`spark import --from hf` gives back the same bytes.", ""]
    return "\n".join(out)


def _training(job: str, meta: dict, ckpt: dict) -> list[str]:
    """The card's training section: what the job's checkpoint.json records."""
    if not ckpt:
        return [f"Step {meta.get('step_n')}. The weights were not exported from their job "
                "folder, so the training record (knobs, data, held-out metrics) is not "
                "included; `spark status` on the job folder shows it."]
    seen = ckpt.get("tokens_seen")
    seen = f"{seen:,}" if is_finite(seen) else "an unknown number of"
    out = [f"Job `{_text(job)}`, step {_num(ckpt.get('step_n'))}, "
           f"{_num(ckpt.get('micro_steps'))} micro-steps on {seen} training tokens "
           f"(dataset `{_text(_portable(ckpt.get('dataset')))}`, sha256 "
           f"`{_text(ckpt.get('dataset_sha256'))}`); device `{_text(ckpt.get('device'))}`.",
           "",
           f"Training loss {_num(ckpt.get('loss_before'))} -> "
           f"{_num(ckpt.get('loss_after'))} (whole training set, nats per token).", "",
           "| knob | value |", "|---|---|"]
    out += [f"| {k} | {_text(json.dumps(ckpt[k]))} |" for k in KNOBS
            if k in ckpt and (not isinstance(ckpt[k], float) or math.isfinite(ckpt[k]))]
    if ckpt.get("sparkbc_sha256"):
        out += ["", f"Program `{_text(ckpt.get('program'))}` "
                f"(sha256 `{_text(ckpt['sparkbc_sha256'])}`)."]
    return out


def _portable(path):
    """A recorded path as a card shows it: an absolute one by its last part only (this
    machine's folders mean nothing to a reader; the sha256 beside it names the data)."""
    return PurePath(path).name if isinstance(path, str) and os.path.isabs(path) else path


def _wrapping(doc: dict, names: dict) -> str:
    """What the tokenizer's template puts around a prompt, in words: `BOS prompt SEP` for a
    pairs model, `BOS prompt` for a corpus one (export/tokenizer.py), "" without one."""
    processor = doc.get("post_processor") or {}
    if processor.get("type") != "TemplateProcessing":
        return ""
    words = ["prompt" if "Sequence" in item else
             names.get((item.get("SpecialToken") or {}).get("id"), "?")
             for item in processor.get("single") or [] if isinstance(item, dict)]
    return f"; `tok(prompt)` wraps a prompt as {' '.join(words)}, as `spark generate` does"


def tokenizer_kind(tok_text: str, ckpt: dict) -> str:
    """A few sentences on the tokenizer, from tokenizer.json itself."""
    doc, tok = load_json(tok_text, TOKENIZER), Tokenizer.from_str(tok_text)
    model = doc.get("model") or {}
    kind = ("byte-level (one token per byte, no merges)" if model.get("type") == "BPE"
            and not model.get("merges") else model.get("type", "unknown"))
    name = ckpt.get("tokenizer")
    which = f" (the job's `{name}`)" if isinstance(name, str) else ""
    ids = special_ids(tok_text)
    specials = ", ".join(f"{k.upper()} `{tok.id_to_token(i)}` (id {i})" for k, i in ids.items())
    wraps = _wrapping(doc, {tok.id_to_token(i): k.upper() for k, i in ids.items()})
    return (f"`tokenizer.json`{which}: a {kind} tokenizer of "
            f"{tok.get_vocab_size(with_added_tokens=True):,} tokens; {specials}{wraps}. "
            f"Generation stops at EOS.")
