"""DVC stage step: STEP: numpy SGD (or AdamW), on a pairs file or a prepared corpus
(sparktrain/train/corpus_loop.py); writes weights.safetensors, checkpoint.json and
ARTIFACT under out/train/<job>/ (perf.json too, undeclared: timings vary).

DVC deletes a stage's outputs before it runs it. When training fails, the
previous good outputs are copied back from the DVC cache (as dvc.lock records
them), so the workspace keeps the last trained model and its metrics agree.
"""
import sys
from pathlib import Path

from sparktrain.errors import TrainingFailed
from sparktrain.model.parallel import quiet_nonfinite
from sparktrain.repro.lock import restore_outputs
from sparktrain.train.corpus_loop import run_corpus_step
from sparktrain.train.loop import run_failed, run_step
from stages.common import load_job, params, run

STAGE = "step"


def step() -> Path:
    p = params()
    job = load_job(p)
    try:
        if job.is_corpus:  # held-out bpb per pass from the prepared val stream
            run_corpus_step(job, p.step, p.model_config())
        else:
            run_step(job, p.step, p.model_config(), heldout=p.eval.data,
                     tokenizer=job.out_dir / "tokenizer.json")
    except TrainingFailed as err:
        run_failed(job, err, p.step)
        raise TrainingFailed(f"{err}; {restore_outputs(STAGE)}") from None
    return job.out_dir / "checkpoint.json"


if __name__ == "__main__":
    with quiet_nonfinite():   # a divergence is one line, not numpy's warnings first
        sys.exit(run(STAGE, step))
