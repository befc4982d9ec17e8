"""The proof's job through the pipeline: `tools/coder_proof.py --dvc-command` prints
the `dvc exp run -S ...` command of a params file, and that command trains the same
weights bytes as the proof tool; `spark compare` shows it beside zlib-9 / lzma-9e.

A short budget of the tiny coder job here, with the proof's arch options and dynamic
evaluation; the proof's own params
(data/programs/coder-proof.yaml, about ten minutes) are the same command."""
from __future__ import annotations

import hashlib
import json
import shlex
import shutil

import pytest

from .conftest import dvc, run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHORT = """job: job-coder-tiny
program: data/programs/train-coder.sparkbc
scale: tiny
tokenizer: bpe
vocab_size: 300
corpus: {glob: ["*.py"], heldout: 0.1}
arch: {mlp: relu2, qk_norm: true, logit_cap: 15.0}
eval: {dynamic_lr: 0.001}
step: {outer: 2, inner: 3, lr: 0.01, batch_size: 4, optimizer: adamw, schedule: cosine,
       warmup: 2, min_lr: 0.001, checkpoint_every: 1, shards: 2}
"""


def test_dvc_exp_run_of_the_proof_params_gives_the_proof_tools_weights(repro_copy):
    repo = repro_copy
    (repo / "short.yaml").write_text(SHORT)
    folder = repo / "out/train/job-coder-tiny"
    tool = run(repo, "python", "tools/coder_proof.py", "--params", "short.yaml", "--no-gate")
    assert tool.returncode == 0, tool.stdout
    proof = json.loads((folder / "coder_proof.json").read_text())
    assert "model / lzma-9e" in tool.stdout and "64-window est." in tool.stdout
    command = run(repo, "python", "tools/coder_proof.py", "--params", "short.yaml",
                  "--dvc-command")
    assert command.returncode == 0, command.stdout
    argv = shlex.split(command.stdout)
    assert argv[:3] == ["dvc", "exp", "run"] and '++step.optimizer="adamw"' in argv
    assert '++arch.mlp="relu2"' in argv and "++eval.dynamic_lr=0.001" in argv
    shutil.rmtree(folder)
    dvc(repo, *argv[1:], "-n", "proof-short")
    weights = (folder / "weights.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest() == proof["weights_sha256"]
    ev = json.loads((folder / "eval.json").read_text())
    assert f"{ev['bpb']:.4f}" == f"{proof['model_bpb']:.4f}"
    assert (ev["zlib9_bpb"], ev["lzma9e_bpb"]) == (proof["zlib9_bpb"], proof["lzma9e_bpb"])
    # dynamic evaluation, labelled apart, in eval.json as in the proof's report
    assert ev["bpb_dynamic"] == proof["model_bpb_dynamic"] and proof["dynamic"]["updates"] > 0
    table = run(repo, "spark", "compare", "proof-short", "-o", "out/cmp.png")
    assert table.returncode == 0, table.stdout
    # the metrics table's head: the last table that starts so (a wide table puts the
    # runs' params first, then the metrics beside the numbers; compare.compare_table)
    head = [ln for ln in table.stdout.splitlines() if ln.startswith(("experiment", "#  "))][-1]
    assert {"bpb", "sliding", "dynamic", "zlib9", "lzma9e"} <= set(head.split()), head
