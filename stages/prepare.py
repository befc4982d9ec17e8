"""DVC stage prepare: the job's data, out/train/<job>/corpus/, as its data source
prepares it: for a corpus (or text rows), files.json (every file read, its size,
sha256 and split; token counts; zlib-9 / lzma-9e bits per byte of the held-out
bytes) and the token streams train.bin / val.bin; for pairs, files.json naming
the file (the step reads the rows itself).
"""
import sys
from pathlib import Path

from sparktrain.data.tokenizer import read_tokenizer
from sparktrain.core.jobfiles import CORPUS, TOKENIZER
from stages.common import params, run
from stages.job import job_source


def prepare() -> Path:
    p = params()
    job, source = job_source(p)
    tokenizer, sha256 = read_tokenizer(job.out_dir / TOKENIZER)
    return source.prepare(job.out_dir / CORPUS, tokenizer, sha256)


if __name__ == "__main__":
    sys.exit(run("prepare", prepare))
