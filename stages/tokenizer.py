"""DVC stage tokenizer: the job's tokenizer.json (out/train/<job>/tokenizer.json).

`tokenizer: byte` writes the fixed byte tokenizer and reads nothing. `tokenizer:
bpe` trains a byte-level BPE of `vocab_size` with the `tokenizers` library on
the train split only: a corpus's training files (held-out files are never read
here). A pairs job trains on byte tokens; `tokenizer: bpe` is refused for it.
"""
import sys
from pathlib import Path

from sparktrain.data.corpus import read_corpus
from sparktrain.data.tokenizer import make_tokenizer
from sparktrain.errors import SparkError
from sparktrain.fsutil import atomic_write_text
from stages.common import job_folder, load_job, params, run


def training_texts(p, job) -> list[str]:
    if p.tokenizer == "byte":
        return []
    if not job.is_corpus:  # the pairs loop encodes rows as bytes: a BPE would go unused
        raise SparkError(f"tokenizer: {p.tokenizer} applies to corpus jobs (a TRAIN whose "
                         f"dataset is a folder or @stdlib); the pairs job {job.job} trains "
                         "on byte tokens (tokenizer: byte)")
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
