"""The pairs data source: JSONL (prompt, completion) rows, scored on eval.data's pairs."""
from __future__ import annotations

from sparktrain.data.base import EvalSet, TrainingData
from sparktrain.data.pairs import LOSS_BATCH, RowBatches, load_dataset, load_pairs, loss_batches
from sparktrain.data.pairs_score import evaluate
from sparktrain.data.prepare import write_pairs_note
from sparktrain.core.fsutil import read_input
from sparktrain.model.config import flops_per_token, line_count


def tokenizer_record(tokenizer, tokenizer_sha256: str | None) -> dict:
    """A pairs model's tokenizer record: none for bytes (every reader's default), else its own."""
    if tokenizer.kind == "byte":
        return {}
    return {"dataset_kind": "pairs", "tokenizer": tokenizer.kind,
            "tokenizer_sha256": tokenizer_sha256}


class PairsSource:
    """JSONL (prompt, completion) rows, the loss on completion targets; held out: eval.data."""
    kind = "pairs"
    prompted = True   # a model of it answers a prompt ([BOS] prompt [SEP] -> completion)
    streamed = False  # its rows are read and encoded in memory by the step itself
    loss_rows = LOSS_BATCH

    def __init__(self, dataset: str, heldout: str | None = None):
        self.dataset, self.heldout = dataset, heldout

    @classmethod
    def claims(cls, dataset: str) -> bool:
        return True  # any regular file: its rows say what is wrong with it

    @classmethod
    def from_knobs(cls, dataset: str, knobs, heldout: str | None) -> "PairsSource":
        return cls(dataset, heldout)

    def row_bound(self) -> int | None:
        return line_count(self.dataset)  # a batch never holds more rows than the file

    def tokenizer_texts(self) -> list[str]:
        """Each prompt and completion, as encode_pair reads them."""
        return [text for pair in load_pairs(self.dataset)
                for text in (pair.prompt, pair.completion)]

    def prepare(self, folder, tokenizer, tokenizer_sha256: str):
        """No streams: the step reads the rows itself; files.json names the file."""
        return write_pairs_note(folder, self.dataset, read_input(self.dataset, "dataset"))

    def plan(self, cfg, batch_size: int, tokenizer, tokenizer_sha256: str | None) -> dict:
        dataset = load_dataset(self.dataset, cfg.seq_len, tokenizer)
        pairs_per_step = min(batch_size, dataset.n)
        mean_tokens = dataset.n_tokens / dataset.n
        return {"dataset_sha256": dataset.sha256, "dataset_rows": dataset.n,
                "dataset_tokens": dataset.n_tokens,
                "dataset_counted_targets": dataset.n_counted,
                "truncated": dataset.n_truncated, "pairs_per_micro_step": pairs_per_step,
                "flops_per_micro_step": int(round(flops_per_token(cfg) * mean_tokens
                                                  * pairs_per_step)),
                **tokenizer_record(tokenizer, tokenizer_sha256)}

    def training_data(self, folder, model, tokenizer, tokenizer_sha256, step):
        dataset = load_dataset(self.dataset, model.cfg.seq_len, tokenizer)
        heldout = None
        if self.heldout is not None:
            rows = load_dataset(self.heldout, model.cfg.seq_len, tokenizer).encoded
            heldout = EvalSet(loss_batches(rows, model.make_batch))
        record = tokenizer_record(tokenizer, tokenizer_sha256)
        return TrainingData(
            describe=f"{dataset.n} pairs",
            sampler=RowBatches(dataset.encoded, step.batch_size, step.seed, model.make_batch),
            train_set=EvalSet(loss_batches(dataset.encoded, model.make_batch)),
            heldout_set=heldout,
            checkpoint={"dataset_sha256": dataset.sha256, "dataset_n": dataset.n,
                        "dataset_tokens": dataset.n_tokens, "truncated": dataset.n_truncated,
                        **record, **({"heldout": self.heldout} if self.heldout else {})},
            weights_meta={"dataset_sha256": dataset.sha256, **record},
            fingerprint={"dataset_sha256": dataset.sha256, "tokenizer_sha256": tokenizer_sha256,
                         "heldout": self.heldout})

    def evaluate(self, folder, params, cfg, tokenizer, tokenizer_sha256, eval_cfg) -> dict:
        """Loss, accuracy, copy recall and exact match on eval.data's pairs."""
        metrics = evaluate(params, cfg, load_pairs(eval_cfg.data),
                           batch_size=eval_cfg.batch_size, max_new=eval_cfg.max_new,
                           n_samples=eval_cfg.n_samples, tokenizer=tokenizer)
        metrics["data"] = eval_cfg.data
        return metrics
