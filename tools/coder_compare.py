"""The coder proof against its PyTorch peer, interleaved, and beside a busy process.

    python tools/coder_compare.py [--rounds 3] [--peer-python PY] [--busy] [--threads 2]
                                  [-S step.outer=2 ...]

Each round runs the whole coder proof (`tools/coder_proof.py`, the project's
numpy step on its gradient workers) and then the PyTorch peer
(`tools/torch_peer_coder.py`, eager + SDPA, `--threads` intra-op threads) on
the same prepared data, one after the other, so both see the same machine
state; the report takes the median over rounds of each figure and of the
per-round ratio. `--busy` then runs the proof once more beside one busy
single-threaded process and compares each outer pass's time with the same
pass's median quiet time. The peer needs torch (`--peer-python`: a Python with
the `hf` or `gpu` extra installed; default this one).

Writes out/coder_compare.json: the machine (cores, CPU model and SIMD flags,
load), the date, every run's figures and the medians (docs/results/speed.md, "A
PyTorch peer").
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparktrain import runtime  # noqa: E402  (first: the BLAS kernel and threads)

runtime.start()

from tools.readme_figures import machine  # noqa: E402
from tools.readme_pages import PAGES, rewrite  # noqa: E402
from sparktrain.core.safeload import load_json

RECORD = ROOT / "out" / "coder_compare.json"
PASS = re.compile(r"\] outer (\d+)/(\d+) .*?\s([\d.]+)s, ~")
BUSY = "while True: pass"


def _proof(overrides: list[str]) -> dict:
    """One coder proof run: its tokens/s, bpb, wall time and each pass's seconds."""
    args = [sys.executable, "tools/coder_proof.py", "--no-gate"]
    for o in overrides:
        args += ["-S", o]
    t0 = time.perf_counter()
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"coder proof failed (exit {p.returncode}): {p.stderr[-2000:]}")
    done = [(int(k), float(s)) for k, _, s in PASS.findall(p.stderr)]
    passes = [b - a for (_, a), (_, b) in zip([(0, 0.0)] + done, done)]
    job = load_json((ROOT / "out/train/job-coder-001/coder_proof.json").read_bytes(), "coder_proof.json")
    perf = load_json((ROOT / "out/train/job-coder-001/perf.json").read_bytes(), "perf.json")
    return {"tokens_per_s": perf["tokens_per_s"], "train_seconds": perf["train_seconds"],
            "heldout_bpb": job["model_bpb"], "zlib9_bpb": job["zlib9_bpb"],
            "wall_seconds": round(wall, 1), "pass_seconds": [round(s, 2) for s in passes],
            "workers": perf["workers"], "shards": perf["shards"],
            "blas_threads": perf["blas_threads"], "weights_sha256": job["weights_sha256"]}


def _peer(python: str, threads: int, overrides: list[str]) -> dict:
    args = [python, "tools/torch_peer_coder.py", "--json", "--threads", str(threads)]
    for o in overrides:
        args += ["-S", o]
    t0 = time.perf_counter()
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"PyTorch peer failed (exit {p.returncode}): {p.stderr[-2000:]}")
    r = load_json(p.stdout.strip().splitlines()[-1], "the peer's last line")
    return {"tokens_per_s": r["tokens_per_s"], "train_seconds": r["train_seconds"],
            "heldout_bpb": r["heldout_bpb"], "wall_seconds": round(time.perf_counter() - t0, 1),
            "peer": r["peer"], "threads": r["threads"]}


def _busy_proof(overrides: list[str]) -> dict:
    hog = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        return _proof(overrides)
    finally:
        hog.kill()
        hog.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--peer-python", default=sys.executable,
                    help="a Python with torch installed for the peer (default this one)")
    ap.add_argument("--threads", type=int, default=2, help="the peer's torch threads (default 2)")
    ap.add_argument("--busy", action="store_true",
                    help="also run the proof beside one busy single-threaded process")
    ap.add_argument("--no-peer", action="store_true", help="only the proof (quiet, --busy)")
    ap.add_argument("--readme", action="store_true",
                    help="rewrite the coder-peer block (docs/results/runs.md) from this "
                         "run's record")
    ap.add_argument("-S", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a param of both (YAML value, dots for nested keys)")
    args = ap.parse_args(argv)
    record = {"machine": machine(), "date": datetime.datetime.now(datetime.timezone.utc)
              .strftime("%Y-%m-%d"), "overrides": args.overrides, "rounds": []}
    for r in range(args.rounds):
        ours = _proof(args.overrides)
        print(f"round {r + 1}: proof {ours['tokens_per_s']:,.0f} tok/s, "
              f"{ours['heldout_bpb']:.4f} bpb, passes {ours['pass_seconds']}", flush=True)
        entry = {"proof": ours}
        if not args.no_peer:
            peer = _peer(args.peer_python, args.threads, args.overrides)
            entry["peer"] = peer
            entry["ratio"] = ours["tokens_per_s"] / peer["tokens_per_s"]
            print(f"round {r + 1}: peer {peer['tokens_per_s']:,.0f} tok/s, "
                  f"{peer['heldout_bpb']:.4f} bpb; ratio {entry['ratio']:.2f}", flush=True)
        record["rounds"].append(entry)
    rounds = record["rounds"]
    med = lambda key, who: statistics.median(e[who][key] for e in rounds)  # noqa: E731
    summary = {"proof_tokens_per_s": med("tokens_per_s", "proof"),
               "proof_heldout_bpb": med("heldout_bpb", "proof"),
               "proof_wall_seconds": med("wall_seconds", "proof"),
               "zlib9_bpb": rounds[0]["proof"]["zlib9_bpb"]}
    if not args.no_peer:
        summary.update(peer_tokens_per_s=med("tokens_per_s", "peer"),
                       peer_heldout_bpb=med("heldout_bpb", "peer"),
                       peer_wall_seconds=med("wall_seconds", "peer"),
                       ratio=statistics.median(e["ratio"] for e in rounds))
    quiet = [statistics.median(e["proof"]["pass_seconds"][k] for e in rounds)
             for k in range(len(rounds[0]["proof"]["pass_seconds"]))]
    summary["quiet_pass_seconds"] = quiet
    if args.busy:
        busy = _busy_proof(args.overrides)
        slow = [b / q for b, q in zip(busy["pass_seconds"], quiet)]
        record["busy"] = busy
        summary.update(busy_pass_seconds=busy["pass_seconds"],
                       busy_slowdown=[round(x, 2) for x in slow], busy_worst=max(slow),
                       busy_tokens_per_s=busy["tokens_per_s"])
    record["summary"] = summary
    record["machine_after"] = machine()
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=1, sort_keys=True))
    print(f"wrote {RECORD.relative_to(ROOT)}")
    if args.readme:
        for page in PAGES:
            text, done = rewrite(page.read_text(), {"coder-peer": table(record)})
            page.write_text(text)
            print(f"rewrote {page.relative_to(ROOT)}: {', '.join(done) or 'no coder-peer block'}")
    return 0


def table(record: dict) -> str:
    """The measured table of a full record (proof, peer, ratio, busy)."""
    s, m, r0 = record["summary"], record["machine"], record["rounds"][0]
    proof, peer = r0["proof"], r0["peer"]
    flags = " ".join(m["simd_flags"]) or "none found"
    lines = [
        "| run (same recipe, same prepared data) | training tokens/s | held-out bpb | wall |",
        "|---|---|---|---|",
        f"| `make spark-coder-proof`: numpy, {proof['shards']} shards on {proof['workers']} "
        f"worker processes x {proof['blas_threads']} BLAS thread | "
        f"{s['proof_tokens_per_s']:,.0f} | {s['proof_heldout_bpb']:.4f} | "
        f"{s['proof_wall_seconds']:.0f} s |",
        f"| {peer['peer']}, {peer['threads']} threads (`tools/torch_peer_coder.py`) | "
        f"{s['peer_tokens_per_s']:,.0f} | {s['peer_heldout_bpb']:.4f} | "
        f"{s['peer_wall_seconds']:.0f} s |",
        f"| zlib-9 on the same held-out bytes | | {s['zlib9_bpb']:.4f} | |",
        "",
        f"The proof trains at **{s['ratio']:.2f}x** the peer's tokens/s (median of the "
        f"per-round ratios, {len(record['rounds'])} interleaved rounds; "
        f"`python tools/coder_compare.py --busy --readme`)."]
    if "busy_worst" in s:
        lines.append(f"Beside one busy single-threaded process its slowest outer pass took "
                     f"{s['busy_worst']:.2f}x that pass's quiet time.")
    lines.append(f"Measured {record['date']} on {m['cores']} cores of {m['cpu']} "
                 f"({m['arch']}; SIMD: {flags}), load average {m['load_average'][0]} at the "
                 f"start.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
