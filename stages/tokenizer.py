"""DVC stage tokenizer: the job's tokenizer.json (out/train/<job>/tokenizer.json).

`tokenizer: byte` writes the fixed byte tokenizer and reads nothing. `tokenizer:
bpe` trains a byte-level BPE of `vocab_size` with the `tokenizers` library on
the texts the job's data source gives from its train split only (held-out
data is never read here).
"""
import sys
from pathlib import Path

from sparktrain.data.tokenizer import make_tokenizer
from sparktrain.core.fsutil import atomic_write_text
from sparktrain.core.jobfiles import TOKENIZER
from stages.common import params, run
from stages.job import job_source


def tokenizer_stage() -> Path:
    p = params()
    job, source = job_source(p)
    tok = make_tokenizer(p.tokenizer, p.vocab_size, source.tokenizer_texts)
    path = job.out_dir / TOKENIZER
    atomic_write_text(path, tok.to_json())
    return path


if __name__ == "__main__":
    sys.exit(run("tokenizer", tokenizer_stage))
