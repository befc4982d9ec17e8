"""The model card (README.md) of `spark export --to hf`: made from the job's records
(checkpoint.json's knobs and counts, eval.json's held-out metrics), only when they
are about the very weights exported; the same bytes every time."""
import hashlib
import json
import shutil

import yaml

from sparktrain.export.hf import export_hf
from sparktrain.params import StepConfig

from exportkit import write_weights

EVAL = {"loss": 2.3456789, "perplexity": 10.4412, "next_token_accuracy": 0.375,
        "exact_match": 0.125, "copy_recall": 0.5}


def _job(tmp_path, lr=0.0375, tokens=12345):
    """A job folder as the step and eval stages leave it: weights, checkpoint, eval."""
    folder = tmp_path / "out" / "train" / "job-card"
    folder.mkdir(parents=True)
    w = folder / "weights.safetensors"
    write_weights(w, job="job-card")
    sha = hashlib.sha256(w.read_bytes()).hexdigest()
    ckpt = {"job": "job-card", "step_n": 7, "trained": True, "weights_sha256": sha,
            "weights": "out/train/job-card/weights.safetensors", "loss_before": 5.5,
            "loss_after": 1.25, "micro_steps": 32, "tokens_seen": tokens,
            "dataset": "data/train/rows.jsonl", "dataset_sha256": "ab" * 32, "device": "cpu",
            "program": "data/programs/p.sparkbc", "sparkbc_sha256": "cd" * 32,
            "outer": 4, "inner": 8, "lr": lr, "batch_size": 8, "seed": 3}
    (folder / "checkpoint.json").write_text(json.dumps(ckpt))
    (folder / "eval.json").write_text(json.dumps(EVAL))
    return w


def _card(folder):
    text = (folder / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body, text


def test_the_card_is_made_from_the_jobs_checkpoint_and_eval(tmp_path):
    w = _job(tmp_path)
    export_hf(w, tmp_path / "hf")
    meta, body, text = _card(tmp_path / "hf")
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"
    assert "spark-train" in meta["tags"] and "llama" in meta["tags"]
    results = meta["model-index"][0]["results"][0]["metrics"]
    assert {m["type"]: m["value"] for m in results} == EVAL
    assert "| lr | 0.0375 |" in body and "| seed | 3 |" in body
    assert "12,345 training tokens" in body and "5.5000 -> 1.2500" in body
    assert "| perplexity | 10.4412 |" in body
    assert hashlib.sha256(w.read_bytes()).hexdigest() in body
    assert "AutoModelForCausalLM.from_pretrained" in body and "<|sep|>" in body
    assert str(tmp_path) not in text          # no absolute paths in a shared file


def test_other_records_give_another_card_and_the_same_records_the_same_bytes(tmp_path):
    w = _job(tmp_path)
    export_hf(w, tmp_path / "a")
    export_hf(w, tmp_path / "b")
    assert (tmp_path / "a/README.md").read_bytes() == (tmp_path / "b/README.md").read_bytes()
    other = tmp_path / "other"
    w2 = _job(other, lr=0.2, tokens=999)
    export_hf(w2, other / "hf")
    _, body, _ = _card(other / "hf")
    assert "| lr | 0.2 |" in body and "999 training tokens" in body


def test_weights_away_from_their_records_get_no_borrowed_metrics(tmp_path):
    w = _job(tmp_path)
    alone = tmp_path / "elsewhere" / "weights.safetensors"
    alone.parent.mkdir()
    shutil.copy(w, alone)                      # no checkpoint beside it
    export_hf(alone, tmp_path / "hf-alone")
    meta, body, _ = _card(tmp_path / "hf-alone")
    assert "model-index" not in meta and "training record" in body and "| lr |" not in body
    ckpt = json.loads((w.parent / "checkpoint.json").read_text())
    ckpt["weights_sha256"] = "00" * 32          # the checkpoint is about other weights
    (w.parent / "checkpoint.json").write_text(json.dumps(ckpt))
    export_hf(w, tmp_path / "hf-stale")
    meta, body, _ = _card(tmp_path / "hf-stale")
    assert "model-index" not in meta and "| perplexity |" not in body


def test_the_card_lists_every_recorded_knob_of_the_schema():
    from sparktrain.export.card import KNOBS
    assert {"lr", "outer", "inner", "seed", "batch_size"} <= set(KNOBS)
    assert not {"workers", "device", "step_n"} & set(KNOBS)
    assert set(KNOBS) <= {f for f in StepConfig.__dataclass_fields__}


def test_the_card_says_the_templates_own_wrapping_and_no_absolute_dataset(tmp_path):
    """A corpus model's ids have no SEP (export/tokenizer.py's template: BOS prompt), and a
    dataset recorded by its absolute path is named by its last part only."""
    from sparktrain.export.card import tokenizer_kind
    from sparktrain.export.tokenizer import with_spark_template

    w = _job(tmp_path)
    ckpt_path = w.parent / "checkpoint.json"
    ckpt = json.loads(ckpt_path.read_text())
    ckpt["dataset"] = str(tmp_path / "my-code")
    ckpt_path.write_text(json.dumps(ckpt))
    export_hf(w, tmp_path / "hf")
    _, body, text = _card(tmp_path / "hf")
    assert "(dataset `my-code`, sha256" in body and str(tmp_path) not in text
    assert "wraps a prompt as BOS prompt SEP, as `spark generate` does" in body   # pairs
    tok_text = (tmp_path / "hf" / "tokenizer.json").read_text()
    corpus = tokenizer_kind(with_spark_template(tok_text, pairs=False), {})
    assert "wraps a prompt as BOS prompt, as `spark generate` does" in corpus, corpus
