"""DVC stage decode-bc: decode the program and resolve the TRAIN of params.job.

Writes out/train/<job>/program.json: the program as `spark dump --json` shows
it, plus the resolved and validated TRAIN under "job".
"""
import sys
from pathlib import Path

from sparktrain.bc.codec import dump_json
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import write_json
from sparktrain.core.jobfiles import PROGRAM, job_dir
from sparktrain.train.job import job_from_program, read_program
from stages.common import params, run


def decode_bc() -> Path:
    p = params()
    program = read_program(p.program)
    job = job_from_program(p.program, p.job, program)
    want = job_dir(job.id).as_posix()
    if Path(job.out).as_posix().rstrip("/") != want:
        raise SparkError(f"the pipeline writes under {want}; the TRAIN for {job.id!r} has "
                         f"out {job.out!r}")
    doc = dump_json(program)
    doc["job"] = job.to_dict()
    path = job_dir(job.id) / PROGRAM
    write_json(path, doc)
    return path


if __name__ == "__main__":
    sys.exit(run("decode-bc", decode_bc))
