"""DVC stage prepare: a corpus job's data, out/train/<job>/corpus/: files.json (every
file read, its size, sha256 and split; token counts; zlib-9 / lzma-9e bits per
byte of the held-out bytes) and the token streams train.bin / val.bin.

A pairs job (its dataset a JSONL file) only gets files.json naming the file:
the step stage reads the rows itself, so the default job stays as fast as it was.
"""
import sys
from pathlib import Path

from sparktrain.data.corpus import read_corpus
from sparktrain.data.prepare import write_pairs_note, write_prepared
from sparktrain.data.tokenizer import load_tokenizer
from sparktrain.fsutil import read_input, sha256_file
from stages.common import job_folder, load_job, params, run


def prepare() -> Path:
    p = params()
    job = load_job(p)
    folder = job_folder(p.job)
    if not job.is_corpus:
        return write_pairs_note(folder / "corpus", job.dataset, read_input(job.dataset, "dataset"))
    tokenizer_json = folder / "tokenizer.json"
    tokenizer = load_tokenizer(tokenizer_json)
    corpus = read_corpus(job.dataset, p.corpus.glob, p.corpus.heldout)
    return write_prepared(folder / "corpus", corpus, tokenizer, sha256_file(tokenizer_json))


if __name__ == "__main__":
    sys.exit(run("prepare", prepare))
