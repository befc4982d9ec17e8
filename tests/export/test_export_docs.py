"""docs/export.md's command lines run as written, from a scratch project's root: every
`spark` line of its sh blocks exits 0 on weights of the job each names (the light
libraries: `make test`), and with transformers (`make test-hf`) each block whole, its
`python -c` included, prints the text its `spark generate` line prints."""
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparktrain.core.fsutil import sha256_bytes
from sparktrain.data.tokenizer import train_bpe
from sparktrain.model.config import SCALES
from sparkhelp import ROOT, project  # noqa: F401  (the scratch-project fixture)

from exportkit import SMALL, project_prompts, write_weights

DOC = ROOT / "docs/export.md"
BIN = Path(sys.executable).parent  # spark, spark-code and python of this environment
# the jobs the blocks name -> the arch of the weights written for them: the default job's
# byte model, the tiny coder recipe's (no option) and the coder proof's (relu2, qk_norm, cap)
JOBS = {"job-dry-001": SMALL,
        "job-coder-tiny": dataclasses.replace(SCALES["tiny"], dim=64),
        "job-coder-001": dataclasses.replace(SCALES["medium"], mlp="relu2", qk_norm=True,
                                             logit_cap=15.0)}


def sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)


def run(block: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-e", "-c", block], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


def place_weights(root: Path, job: str) -> None:
    """Weights of JOBS[job] in out/train/JOB: a byte model, or a corpus BPE model with its
    tokenizer.json beside it (as a job folder holds them)."""
    folder = root / "out/train" / job
    folder.mkdir(parents=True)
    cfg = JOBS[job]
    if job == "job-dry-001":
        write_weights(folder / "weights.safetensors", cfg)
        return
    tok = train_bpe(project_prompts(40) * 4, 320)
    text = tok.to_json().encode()
    (folder / "tokenizer.json").write_bytes(text)
    write_weights(folder / "weights.safetensors", dataclasses.replace(cfg, vocab=tok.vocab),
                  seed=5, dataset_kind="corpus", tokenizer="bpe",
                  tokenizer_sha256=sha256_bytes(text))


def test_every_spark_line_of_the_docs_runs(project):  # noqa: F811
    lines = [ln.split("  #")[0] for block in sh_blocks() for ln in block.splitlines()
             if ln.startswith("spark ")]
    assert any("--to gguf" in ln for ln in lines) and any("job-coder-001" in ln for ln in lines)
    for job in JOBS:
        place_weights(project, job)
    for line in lines:
        p = run(line, project)
        assert p.returncode == 0, f"{line}\n{p.stderr}"


@pytest.mark.hf
@pytest.mark.parametrize("job", ["job-coder-tiny", "job-coder-001"])
def test_a_block_prints_spark_generates_text_in_transformers(project, job):  # noqa: F811
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    block = next(b for b in sh_blocks() if "python -c" in b and f"/{job}/" in b)
    place_weights(project, job)
    # the export and the python -c snippet, then the `spark generate` line on its own
    head, generate_line = re.match(r"(.*?)^(spark generate [^\n]*)", block, re.S | re.M).groups()
    hf, spark = run(head, project), run(generate_line.split("  #")[0], project)
    assert hf.returncode == 0 and spark.returncode == 0, hf.stderr + spark.stderr
    wrote, hf_text = hf.stdout.split("\n", 1)          # `spark export` says what it wrote
    assert wrote.startswith("wrote out/hf-")
    assert hf_text.rstrip("\n") == spark.stdout.rstrip("\n") and hf_text.strip()
