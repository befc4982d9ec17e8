"""A job: a program's TRAIN declaration, checked before a file is touched."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from sparktrain.bc.codec import read_program as read_sparkbc
from sparktrain.bc.program import job_of, train_decls
from sparktrain.data.base import STDLIB
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import check_regular, sha256_file
from sparktrain.core.gate import check_job_live, check_output
from sparktrain.core.jobfiles import JOBS_ROOT, check_job_id

SUPPORTED_METHODS = ("spark_distill_cpu",)
FRESH_INIT = "fresh-init"
MAX_OUT_CHARS = 1024  # an `out` path longer than this is a crafted one, not a job folder


@dataclass(frozen=True)
class Job:
    id: str                       # last path component of `out`
    dataset: str                  # JSONL path, or a corpus folder (or @stdlib), relative
    base: str                     # a .safetensors path, or a name meaning fresh init
    out: str                      # the job folder, inside out/
    method: str = "spark_distill_cpu"
    bind: str | None = None       # the TRAIN's bind name (program jobs only)
    program: str | None = None    # the .sparkbc path (program jobs only)
    sparkbc_sha256: str | None = None

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    def rel(self, name: str) -> str:
        """A file of this job as a relative POSIX path (never absolute: reproducible)."""
        return f"{self.out.rstrip('/')}/{name}"

    @property
    def base_is_weights(self) -> bool:
        return self.base.endswith(".safetensors") or Path(self.base).is_file()

    def to_dict(self) -> dict:
        """As program.json records it (the id under the original's key "job")."""
        d = asdict(self)
        return {"job": d.pop("id"), **d}

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        d = dict(d)
        return cls(id=d.pop("job"), **d)


def check_out(out: str, root: Path | None = None) -> None:
    """`out` must resolve inside the project's out/ folder."""
    if len(out) > MAX_OUT_CHARS or any(len(part.encode("utf-8")) > 255 for part in out.split("/")):
        raise SparkError(f"out path of {len(out)} characters is too long (at most "
                         f"{MAX_OUT_CHARS}, each folder name at most 255 bytes)")
    root = (root or Path.cwd()).resolve()
    try:
        target = (root / out).resolve()
    except (OSError, RuntimeError) as err:
        raise SparkError(f"out {out[:80]!r}... cannot be resolved ({err})") from None
    out_root = root / JOBS_ROOT.parts[0]
    if target == out_root or out_root not in target.parents:
        raise SparkError(f"out {out!r} resolves outside the project's out/ folder")


def check_dataset(dataset: str) -> None:
    """A folder of text files, the interpreter's standard library, or a regular file."""
    if dataset != STDLIB and not Path(dataset).is_dir():
        check_regular(dataset, "dataset")


def job_from_program(program_path: str, job_id: str, program=None) -> Job:
    """The TRAIN of `program_path` whose job id is `job_id`, fully validated."""
    check_job_id(job_id)
    decls = train_decls(program if program is not None else read_program(program_path))
    matches = [d for d in decls if d.job == job_id]
    if not matches:
        known = ", ".join(sorted({d.job for d in decls})) or "none"
        raise SparkError(f"program {program_path} has no TRAIN for job {job_id!r} "
                         f"(jobs declared: {known})")
    d = matches[-1]
    return job_from_train(program_path, d.dataset, d.base, d.out, d.method, d.bind)


def job_from_train(program_path: str, dataset: str, base: str, out: str, method: str,
                   bind: str | None) -> Job:
    """A Job from one TRAIN's operands (its id is the last component of `out`)."""
    return validate_job(Job(id=job_of(out), dataset=dataset, base=base, out=out, method=method,
                            bind=bind, program=str(program_path),
                            sparkbc_sha256=sha256_file(program_path)))


def read_program(path):
    return read_sparkbc(path)[0]


def validate_job(job: Job) -> Job:
    check_job_id(job.id)
    check_out(job.out)
    if job.method not in SUPPORTED_METHODS:
        raise SparkError(f"unsupported method {job.method!r}; "
                         f"supported: {', '.join(SUPPORTED_METHODS)}")
    check_dataset(job.dataset)
    return gate_job(job)


def gate_job(job: Job) -> Job:
    """The output gate on the job folder: new or ours, never an input (own weights: update)."""
    if job.base_is_weights and not Path(job.base).is_file():
        raise SparkError(f"base weights {job.base} do not exist")
    out = Path(job.out)
    base = job.base if job.base_is_weights else None
    if base is not None and out.resolve() in Path(base).resolve().parents:
        base = None
    check_output(out, "job", (job.dataset, base))
    check_job_live(out)
    return job


def adhoc_job(dataset: str, out: str, base: str | None) -> Job:
    """`spark train --dataset D --out DIR`: no `out/` confinement beyond a safe job id."""
    name = check_job_id(job_of(out))
    check_dataset(dataset)
    return gate_job(Job(id=name, dataset=dataset, base=base or FRESH_INIT, out=out))
