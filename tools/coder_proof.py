"""`make spark-coder-proof`: train the medium Spark-coder on the standard library and
compare its held-out bits per byte with zlib-9, lzma-9e and PPMd on the same bytes (the
headline: model / PPMd primed with the train split, docs/training.md "The compressor baselines").

    python tools/coder_proof.py [--params data/programs/coder-proof.yaml]
                                [-S tokenizer=byte -S step.optimizer=sgd ...] [--no-gate]
    python tools/coder_proof.py --dvc-command   # the same job as `dvc exp run -S ...`

`-S key=value` overrides a param like `dvc exp run -S` (a YAML value; dots for
nested keys), so the comparison runs of docs/results/coder.md use the same tool.

Runs the pipeline's steps in one process (decode, tokenizer on the train split,
prepare, which measures the compressors on exactly the held-out bytes the model is scored on,
step, eval's held-out score), and greedily completes a few held-out code prompts. Prints
a table and writes out/train/<job>/coder_proof.json. Exit 0 only when the
run's claims hold and the model's held-out bpb is below zlib-9's. On a terminal
the training shows the loop's progress bar, elsewhere one line per pass
(docs/training.md "Progress").
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
import numpy as np

from sparktrain.data.baselines import BASELINE_ORDERS
from sparktrain.core.metric_keys import BASELINE_BPB
from sparktrain.data.source import source_for
from sparktrain.data.tokenizer import read_tokenizer
from sparktrain.core.errors import SparkError
from sparktrain.eval.generate import learned, learned_text
from sparktrain.core.fsutil import read_input, write_json
from sparktrain.core.jobfiles import CODER_PROOF, TOKENIZER, WEIGHTS
from sparktrain.model.sampling import generate_tokens
from sparktrain.model.weights import load_model
from sparktrain.params import parse_params
from sparktrain.train.recipes import dvc_set_flags
from sparktrain.train.job import job_from_program
from sparktrain.train.runner import Prepare, run_job
from sparktrain.core.safeload import load_yaml

N_PROMPTS, PROMPT_CHARS, MAX_NEW = 3, 160, 48


def completions(corpus, tok, params, cfg) -> list[dict]:
    """Greedy continuations of the first lines of a few held-out files."""
    prompts = [f.text[:PROMPT_CHARS] for f in corpus.heldout if len(f.text) > PROMPT_CHARS]
    prompts = prompts[:N_PROMPTS]
    contexts = [np.concatenate([[tok.bos], tok.encode(p)])[-cfg.seq_len:] for p in prompts]
    new = generate_tokens(params, cfg, contexts, [MAX_NEW] * len(contexts), eos=tok.eos)
    return [{"prompt": p, "completion": tok.decode(t)} for p, t in zip(prompts, new)]


def with_overrides(raw: dict, overrides: list[str]) -> dict:
    """`-S step.lr=0.01`: set a (nested) key of the raw params to a YAML value."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SparkError(f"-S {item!r}: expected KEY=VALUE")
        *path, last = key.split(".")
        node = raw
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SparkError(f"-S {item!r}: {part} is not a mapping")
        node[last] = load_yaml(value, "an override")
    return raw


def main(argv=None) -> int:
    # the docstring's first paragraph (its first line stopped mid-sentence)
    summary = " ".join(__doc__.split("\n\n", 1)[0].split())
    ap = argparse.ArgumentParser(
        description=summary, epilog="example: python tools/coder_proof.py -S tokenizer=byte "
                                    "-S step.outer=2 --no-gate   (a comparison run)")
    ap.add_argument("--params", default="data/programs/coder-proof.yaml",
                    help="the job's params file, params.yaml's schema (default: %(default)s)")
    ap.add_argument("-S", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a param (YAML value, dots for nested keys)")
    ap.add_argument("--dvc-command", action="store_true",
                    help="print the `dvc exp run` command that runs this job through the "
                         "pipeline (the same weights bytes) and exit")
    ap.add_argument("--no-gate", action="store_true",
                    help="exit 0 even when the model does not beat zlib-9 (comparison runs)")
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), time.process_time()
    raw = with_overrides(load_yaml(read_input(args.params, "params file"), args.params),
                         args.overrides)
    p = parse_params(raw)
    if args.dvc_command:
        print(shlex.join(["dvc", "exp", "run", *dvc_set_flags(raw)]))
        return 0
    job = job_from_program(p.program, p.job)
    folder = job.out_dir
    source = source_for(job.dataset, p)
    corpus = source.read()
    print(f"read {len(corpus.train)} train / {len(corpus.heldout)} held-out files "
          f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    if corpus.extra:  # corpus.extra: the train split's site-packages files
        print(f"  of them {corpus.extra['files']} from site-packages "
              f"({corpus.extra['bytes']:,} bytes)", file=sys.stderr)
    # the one run: the tokenizer and prepare stages' files (staged), the loop, the commit
    result = run_job(job, p.step, p.model_config(), source,
                     prepare=Prepare(p.tokenizer, p.vocab_size))
    ck = result.checkpoint
    tok, tok_sha256 = read_tokenizer(folder / TOKENIZER)
    params, cfg, _ = load_model(folder / WEIGHTS)
    what = learned(folder, source, p.eval)  # the whole held-out stream, the fixed prompts
    samples = completions(corpus, tok, params, cfg)
    report = {
        "job": job.id, "corpus": job.dataset, "heldout_bytes": what["heldout_bytes"],
        "heldout_files": len(corpus.heldout), "tokenizer": p.tokenizer, "vocab": ck["arch"]["vocab"],
        **({"corpus_extra": corpus.extra} if corpus.extra else {}),
        "scale": p.scale, "arch": ck["arch"], "n_params": ck["n_params"],
        "optimizer": p.step.optimizer, "tokens_seen": ck["tokens_seen"],
        "model_bpb": what["bpb"], "model_bpb_sliding": what["bpb_sliding"],
        "sliding_stride": what["sliding_stride"],
        **{k: what[k] for k in (*BASELINE_BPB, *BASELINE_ORDERS)},
        "ratio_to_ppmd_primed": what["bpb"] / what["ppmd_primed_bpb"],
        "ratio_sliding_to_ppmd_primed": what["bpb_sliding"] / what["ppmd_primed_bpb"],
        **({"model_bpb_dynamic": what["bpb_dynamic"], "dynamic": what["dynamic"],
            "ratio_dynamic_to_ppmd_primed": what["bpb_dynamic"] / what["ppmd_primed_bpb"]}
           if "bpb_dynamic" in what else {}),  # its seconds are printed, not recorded
        "ratio_to_lzma9e": what["bpb"] / what["lzma9e_bpb"],
        "ratio_sliding_to_lzma9e": what["bpb_sliding"] / what["lzma9e_bpb"],
        "below_zlib9": what["bpb"] < what["zlib9_bpb"],
        "below_ppmd_primed": what["bpb"] < what["ppmd_primed_bpb"],
        "bpb_per_pass_64window_estimate": [
            {"outer": c["outer"], "tokens": c["outer"] * p.step.inner * p.step.batch_size
             * cfg.seq_len, "bpb": c["heldout_bpb"]} for c in ck["loss_curve"]
            if "heldout_bpb" in c],
        "fixed_prompts": what["samples"], "sampling": what["sampling"],
        "samples": samples, "weights_sha256": ck["weights_sha256"],
        "step": dataclasses.asdict(p.step), "overrides": args.overrides,
    }  # no timings: the same inputs give the same bytes (they are printed instead)
    write_json(folder / CODER_PROOF, report)
    print("\n" + learned_text(what, f"{p.scale}, {p.tokenizer}"), end="")
    print(f"  model / lzma-9e (cold) = {report['ratio_to_lzma9e']:.4f}, sliding "
          f"{report['ratio_sliding_to_lzma9e']:.4f}")
    for s in samples:
        print(f"\n--- prompt (held-out file's start) ---\n{s['prompt']}\n--- greedy ---\n"
              f"{s['completion']}")
    perf = result.perf
    print(f"\ntraining {perf['tokens_per_s']:,.0f} tokens/s on {perf['workers']} process(es) x "
          f"{perf['blas_threads']} BLAS thread(s), {perf['shards']} shards")
    print(f"wall {time.perf_counter() - t0:.0f}s, cpu {time.process_time() - c0:.0f}s; "
          f"wrote {folder / 'coder_proof.json'}")
    if not report["below_zlib9"] and not args.no_gate:
        print("coder proof: held-out bpb is not below zlib-9's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SparkError as err:
        print(f"coder proof: error: {err}", file=sys.stderr)
        sys.exit(2)
