"""The four DVC stages as library calls; `stages/*.py` only pick one and run it.

Each stage reads params.yaml (validated: unknown keys and wrong types fail
before anything runs), calls the package and writes its files under
out/train/<job>/. `spark run` calls the same functions underneath, so the CLI
and the pipeline produce the same bytes.
"""
from __future__ import annotations

import sys
from pathlib import Path

from sparktrain.errors import SparkError
from sparktrain.fsutil import sha256_file, write_json

PARAMS = "params.yaml"


def job_folder(job_id: str) -> Path:
    return Path("out/train") / job_id


def decode_bc(params_path: str = PARAMS) -> Path:
    """program.json: the dump JSON plus the resolved, validated TRAIN for `job`."""
    from sparktrain.bc.dump import dump_json
    from sparktrain.train.config import load_params
    from sparktrain.train.job import job_from_program, read_program

    params = load_params(params_path)
    program = read_program(params.program)
    job = job_from_program(params.program, params.job, program)
    want = job_folder(job.job).as_posix()
    if Path(job.out).as_posix().rstrip("/") != want:
        raise SparkError(f"the pipeline writes under {want}; the TRAIN for {job.job!r} has "
                         f"out {job.out!r}")
    doc = dump_json(program)
    doc["job"] = job.to_dict()
    path = job_folder(job.job) / "program.json"
    write_json(path, doc)
    return path


def _job(params):
    from sparktrain.train.job import Job, validate_job
    from sparktrain.train.outputs import read_json

    path = job_folder(params.job) / "program.json"
    doc = read_json(path)
    if not doc or "job" not in doc:
        raise SparkError(f"{path} is missing or unreadable; run the decode-bc stage first")
    return validate_job(Job(**doc["job"]))


def train_status(params_path: str = PARAMS) -> Path:
    from sparktrain.train.config import load_params
    from sparktrain.train.plan import job_plan, write_status

    params = load_params(params_path)
    job = _job(params)
    plan = job_plan(job, params.model_config(), params.step.batch_size)
    return write_status(job, plan)


def step(params_path: str = PARAMS) -> Path:
    from sparktrain.errors import TrainingFailed
    from sparktrain.train.config import load_params
    from sparktrain.train.loop import run_failed, run_step

    params = load_params(params_path)
    job = _job(params)
    try:
        run_step(job, params.step, params.model_config())
    except TrainingFailed as err:
        run_failed(job, err, params.step)
        raise
    return job.out_dir / "checkpoint.json"


def evaluate(params_path: str = PARAMS) -> Path:
    """eval.json on the held-out file, and loss.png (training curve + held-out loss)."""
    from sparktrain.eval.metrics import evaluate as run_eval
    from sparktrain.eval.plot import heldout_points, write_loss_png
    from sparktrain.model.weights import load_model
    from sparktrain.train.config import load_params
    from sparktrain.train.data import load_pairs
    from sparktrain.train.outputs import read_json

    params = load_params(params_path)
    folder = job_folder(params.job)
    weights = folder / "weights.safetensors"
    tensors, cfg, _ = load_model(weights)
    pairs = load_pairs(params.eval.data)
    metrics = run_eval(tensors, cfg, pairs, batch_size=params.eval.batch_size,
                       max_new=params.eval.max_new, n_samples=params.eval.n_samples)
    metrics["data"] = params.eval.data
    metrics["weights_sha256"] = sha256_file(weights)
    path = folder / "eval.json"
    write_json(path, metrics)
    ckpt = read_json(folder / "checkpoint.json") or {}
    curve = ckpt.get("loss_curve") or []
    heldout = heldout_points(metrics, curve, path) if curve else None
    write_loss_png(folder / "loss.png", curve, heldout=heldout)
    return path


def main(stage, name: str) -> int:
    """Run one stage: one line on stderr and exit 2 for a user mistake."""
    from sparktrain.errors import TrainingFailed

    try:
        path = stage()
    except TrainingFailed as err:
        print(f"stage {name}: training failed: {err}", file=sys.stderr)
        return 1
    except SparkError as err:
        print(f"stage {name}: error: {err}", file=sys.stderr)
        return 2
    print(f"stage {name}: wrote {Path(path).as_posix()}", file=sys.stderr)
    return 0
