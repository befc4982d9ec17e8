"""The Device a run's arrays live on (docs/gpu.md): what the loop asks of one (its ops,
what to record of it, its worker processes, its matmul peak for the MFU, whether an error
is it running out of memory), the host's and a device's measured matmul peak, and
`resolve`: a --device flag or step.device to a Device, each refusal one line."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from sparktrain import runtime
from sparktrain.core.errors import SparkError
from sparktrain.model.backend import INSTALL, for_namespace
from sparktrain.model.devices import DEVICES

# a device comes from a flag or from params.yaml: the message names both
ASKED = "--device {0} (or step.device: {0})"


CUBLAS_WORKSPACE = ":4096:8"  # what PyTorch's deterministic cuBLAS needs set before its first call


@dataclass(frozen=True)
class Device:
    kind: str                      # cpu | cuda | mps
    name: str                      # recorded in checkpoint/weights: cpu, cuda:<GPU name>, mps
    xp: object                     # the array namespace
    note: str = ""                 # one line for the log: what `auto` picked and why
    torch_device: object = None
    sync: Callable[[], None] = field(default=lambda: None)  # wait for queued work (timing)

    @property
    def ops(self):
        return for_namespace(self.xp)

    def to_device(self, tensors: dict) -> dict:
        """Host arrays -> this device (numpy: the same arrays, nothing copied)."""
        if self.host:
            return tensors
        return {n: self.xp.asarray(np.ascontiguousarray(a), device=self.torch_device)
                for n, a in tensors.items()}

    def to_host(self, tensors: dict) -> dict[str, np.ndarray]:
        """Arrays on this device -> host numpy (the weights file, the optimizer state)."""
        return {n: np.ascontiguousarray(self.ops.to_host(a)) for n, a in tensors.items()}

    @property
    def host(self) -> bool:
        """Arrays in this process's memory (numpy): worker processes can share them."""
        return self.kind == "cpu"

    def record(self) -> dict:
        """The fingerprint's and weights metadata's device: nothing on the CPU (the default
        job's bytes predate devices), else its name."""
        return {} if self.host else {"device": self.name}

    def made_with(self) -> dict:
        """checkpoint.json's BLAS kernel family and numpy / BLAS versions; nothing on a GPU."""
        return {"made_with": runtime.made_with()} if self.host else {}

    def kernel_record(self) -> dict:
        """perf.json's kernel fields: the family that ran and who chose it."""
        if not self.host:
            return {}
        return {"blas_kernel": runtime.made_with()["kernel"],
                "blas_kernel_source": runtime.start().source}

    def kernel_note(self) -> str | None:
        """One line when a CPU run uses a kernel family other than the portable one (said
        at import instead when numpy was loaded first)."""
        if not self.host or runtime.start().source == "preloaded":
            return None
        return runtime.note(runtime.start())

    def workers(self, requested: int | None) -> int | None:
        """Gradient processes: the CPU's `requested` (None: the usable cores); a GPU runs
        its shards one after another in this process."""
        return requested if self.host else 1

    def check_workers(self, workers: int | None) -> None:
        """SparkError (one line) when worker processes are asked of a GPU."""
        if workers and not self.host:
            raise SparkError(f"--workers times CPU worker processes; {self.name} runs one "
                             "process (drop --workers or use --device cpu)")

    def matmul_peak(self, fresh: bool = False) -> float:
        """Best float32 matmul FLOP/s here, MFU's denominator; measured once a process
        (`fresh`: again, as spark bench does before its timed steps)."""
        if fresh or self.name not in _PEAKS:
            _PEAKS[self.name] = host_matmul_peak() if self.host else device_matmul_peak(self)
        return _PEAKS[self.name]

    def is_out_of_memory(self, err: BaseException) -> bool:
        """Whether `err` is a GPU out of memory (PyTorch's OutOfMemoryError, or the
        RuntimeError of MPS / older releases); never on the CPU (check_fits refuses first)."""
        if self.host:
            return False
        return (type(err).__name__ == "OutOfMemoryError"
                or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower()))


_PEAKS: dict[str, float] = {}


def _best_rate(matmul, n: int, repeats: int, sync=lambda: None) -> float:
    """Best FLOP/s of `repeats` timed n x n matmuls, after one that warms kernels and pages."""
    matmul()
    sync()
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        matmul()
        sync()
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0))
    return best


def host_matmul_peak(sizes=(768, 1024, 1280), repeats=3) -> float:
    """Best float32 FLOP/s of square numpy matmuls around n = 1024, at this process's
    BLAS thread count."""
    rng = np.random.default_rng(0)
    best = 0.0
    for n in sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        c = np.empty((n, n), dtype=np.float32)
        best = max(best, _best_rate(lambda: np.matmul(a, b, out=c), n, repeats))
    return best


def device_matmul_peak(dev: Device, n=4096, repeats=5) -> float:
    """Best float32 FLOP/s of an n x n matmul on a GPU device (waits for each to finish)."""
    rng = np.random.default_rng(0)
    a, b = (dev.xp.asarray(rng.standard_normal((n, n), dtype=np.float32),
                           device=dev.torch_device) for _ in range(2))
    return _best_rate(lambda: a @ b, n, repeats, dev.sync)


CPU = Device("cpu", "cpu", np)


def _import_gpu():
    """(torch, its array-api namespace), or ImportError without the gpu extra."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    import torch
    import array_api_compat.torch as xp
    return torch, xp


def _gpu(torch, xp, kind: str, auto: bool = False) -> Device:
    """A GPU Device, with PyTorch's deterministic mode on."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False    # full float32 matmuls: CPU-close losses
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    name, sync = ((f"cuda:{torch.cuda.get_device_name(0)}", torch.cuda.synchronize)
                  if kind == "cuda" else ("mps", torch.mps.synchronize))
    return Device(kind, name, xp, note=f"device: {name}" + (" (auto)" if auto else ""),
                  torch_device=torch.device(kind), sync=sync)


_RESOLVED: dict[str, Device] = {}


def resolve(requested) -> Device:
    """The Device for `requested`, resolved once a process (the command line asks first);
    SparkError (one line, exit 2) when it cannot be had."""
    if not isinstance(requested, str) or requested not in DEVICES:
        raise SparkError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested not in _RESOLVED:
        _RESOLVED[requested] = _resolve(requested)
    return _RESOLVED[requested]


def _resolve(requested: str) -> Device:
    if requested == "cpu":
        return CPU
    try:
        torch, xp = _import_gpu()
    except ImportError:
        if requested == "auto":
            return Device("cpu", "cpu", np, note="device: cpu (auto: the gpu extra is not "
                                                 "installed, so no GPU library to ask)")
        raise SparkError(f"{ASKED.format(requested)}: {INSTALL}") from None
    mps_backend = getattr(torch.backends, "mps", None)
    cuda = bool(torch.cuda.is_available())
    mps = bool(mps_backend is not None and mps_backend.is_available())
    if requested == "auto":
        if cuda or mps:
            return _gpu(torch, xp, "cuda" if cuda else "mps", auto=True)
        return Device("cpu", "cpu", np, note=f"device: cpu (auto: PyTorch {torch.__version__} "
                                             "sees no CUDA or MPS device)")
    if requested == "cuda" and not cuda:
        raise SparkError(f"{ASKED.format('cuda')}: PyTorch {torch.__version__} sees no CUDA "
                         "device (no NVIDIA GPU, or a CPU-only PyTorch build); use cpu or auto")
    if requested == "mps" and not mps:
        raise SparkError(f"{ASKED.format('mps')}: PyTorch {torch.__version__} sees no Apple "
                         "MPS device; use cpu or auto")
    return _gpu(torch, xp, requested)
