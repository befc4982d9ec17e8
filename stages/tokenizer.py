"""DVC stage tokenizer: the job's tokenizer.json (out/train/<job>/tokenizer.json).

`tokenizer: byte` writes the fixed byte tokenizer and reads nothing. `tokenizer:
bpe` trains a byte-level BPE of `vocab_size` with the `tokenizers` library on
the train split only: a corpus's training files (held-out files are never read
here), or a pairs job's training JSONL (prompts and completions; the held-out
eval file is never read here).
"""
import sys
from pathlib import Path

from sparktrain.data.corpus import read_corpus
from sparktrain.data.tokenizer import make_tokenizer
from sparktrain.fsutil import atomic_write_text
from sparktrain.train.data import load_pairs
from stages.common import job_folder, load_job, params, run


def training_texts(p, job) -> list[str]:
    if p.tokenizer == "byte":
        return []
    if not job.is_corpus:  # each text as the pairs loop encodes it
        return [text for pair in load_pairs(job.dataset)
                for text in (pair.prompt, pair.completion)]
    return [f.text for f in read_corpus(job.dataset, p.corpus.glob, p.corpus.heldout).train]


def tokenizer_stage() -> Path:
    p = params()
    job = load_job(p)
    tok = make_tokenizer(p.tokenizer, p.vocab_size, training_texts(p, job))
    path = job_folder(p.job) / "tokenizer.json"
    atomic_write_text(path, tok.to_json())
    return path


if __name__ == "__main__":
    sys.exit(run("tokenizer", tokenizer_stage))
