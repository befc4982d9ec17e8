"""A job's prepared `corpus/`: files.json (what was read, token counts, the tokenizer's
sha256, the compressor baselines) and the streams train.bin / val.bin (docs/outputs.md)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparktrain.data.base import compressor_bpb
from sparktrain.data.corpus import Corpus
from sparktrain.data.stream import read_stream, stream_of, write_stream
from sparktrain.vocab import token_dtype
from sparktrain.core.errors import SparkError
from sparktrain.core.jobfiles import CORPUS_FILES, TRAIN_BIN, VAL_BIN
from sparktrain.core.fsutil import read_input, sha256_bytes, write_json
from sparktrain.core.progress import Progress
from sparktrain.core.safeload import load_json

@dataclass(frozen=True)
class Prepared:
    manifest: dict
    train: np.ndarray   # (N_train,) memory-mapped token ids
    val: np.ndarray     # (N_val,)

    @property
    def heldout_bytes(self) -> int:
        return self.manifest["heldout_bytes"]


def heldout_bytes(corpus: Corpus) -> bytes:
    """The held-out text in path order: what the model's and compressors' bpb measure."""
    return b"".join(f.text.encode("utf-8") for f in corpus.heldout)


def write_prepared(folder: str | Path, corpus: Corpus, tokenizer, tokenizer_sha256: str) -> Path:
    folder = Path(folder)
    with Progress("prepare", total=4, unit="steps") as bar:
        train = stream_of(tokenizer, [f.text for f in corpus.train])  # (N_train,)
        bar.advance(note=f"train split: {len(corpus.train)} files, {train.size:,} tokens")
        val = stream_of(tokenizer, [f.text for f in corpus.heldout])  # (N_val,)
        bar.advance(note=f"held-out split: {len(corpus.heldout)} files, {val.size:,} tokens")
        write_stream(folder / TRAIN_BIN, train, tokenizer.vocab)
        write_stream(folder / VAL_BIN, val, tokenizer.vocab)
        bar.advance(note=f"wrote {TRAIN_BIN}, {VAL_BIN}")
        baselines = compressor_bpb(heldout_bytes(corpus))
        bar.advance(note=f"zlib-9 {baselines['zlib9_bpb']:.3f} bpb, "
                         f"lzma-9e {baselines['lzma9e_bpb']:.3f} bpb on the held-out bytes")
    manifest = {**corpus.manifest(), "kind": "corpus", "tokenizer": tokenizer.kind,
                "tokenizer_sha256": tokenizer_sha256, "vocab": tokenizer.vocab,
                "dtype": token_dtype(tokenizer.vocab).newbyteorder("<").str,
                "train_tokens": int(train.size), "heldout_tokens": int(val.size),
                "heldout_baselines": baselines}
    write_json(folder / CORPUS_FILES, manifest)
    return folder / CORPUS_FILES


def write_pairs_note(folder: str | Path, dataset: str, dataset_bytes: bytes) -> Path:
    """A pairs job has no streams: files.json only says which file the rows come from."""
    path = Path(folder) / CORPUS_FILES
    write_json(path, {"kind": "pairs", "dataset": dataset,
                      "dataset_sha256": sha256_bytes(dataset_bytes)})
    return path


def read_prepared(folder: str | Path, tokenizer_sha256: str | None = None) -> Prepared:
    """The prepared corpus, checked against the tokenizer that will read it."""
    folder = Path(folder)
    files = folder / CORPUS_FILES
    try:
        manifest = load_json(read_input(files, "prepared corpus list"), os.fspath(files))
    except SparkError:
        raise SparkError(f"{files} is not JSON; run the prepare stage again") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != "corpus":
        raise SparkError(f"{files} is not a prepared corpus (the job's dataset is "
                         f"not a corpus folder)")
    if tokenizer_sha256 is not None and manifest.get("tokenizer_sha256") != tokenizer_sha256:
        raise SparkError(f"{files} was tokenized with another tokenizer.json "
                         f"(sha256 {str(manifest.get('tokenizer_sha256'))[:12]}...); run the "
                         f"prepare stage again")
    vocab = manifest["vocab"]
    train, val = read_stream(folder / TRAIN_BIN, vocab), read_stream(folder / VAL_BIN, vocab)
    for name, stream, key in (("train", train, "train_tokens"),
                              ("held-out", val, "heldout_tokens")):
        if len(stream) != manifest[key]:
            raise SparkError(f"the {name} stream of {folder} has {len(stream)} tokens, "
                             f"{CORPUS_FILES} says {manifest[key]}; run the prepare stage again")
    return Prepared(manifest, train, val)
