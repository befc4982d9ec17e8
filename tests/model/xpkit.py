"""The array namespaces the generic (non-numpy) code path is tested on.

  strict      array-api-strict (the dev extra): fails on any call outside the
              standard, so nothing numpy-only hides in the path a GPU takes.
  torch-cpu   PyTorch CPU tensors through array-api-compat (the gpu extra;
              `make test-gpu` installs it), skipped without it.
  torch-gpu   PyTorch on the CUDA or MPS device `--device auto` finds; skipped,
              with the reason, where there is none.
"""
import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.model import device as devmod

TARGETS = ["strict", "torch-cpu", "torch-gpu"]


def target_device(name: str) -> devmod.Device:
    """A Device for one test target, or pytest.skip with the reason."""
    if name == "strict":
        import array_api_strict
        dev = devmod.Device("strict", "array-api-strict", array_api_strict)
        # an emulated device: its matmul peak (a run's perf.json) is not worth 4096^3 matmuls
        devmod._PEAKS.setdefault(dev.name, 1e9)
        return dev
    try:
        torch, xp = devmod._import_gpu()
    except ImportError:
        pytest.skip("PyTorch / array-api-compat not installed (the gpu extra: make test-gpu)")
    if name == "torch-cpu":
        devmod._PEAKS.setdefault("torch-cpu", 1e9)  # as for strict: emulated
        return devmod.Device("torch-cpu", "torch-cpu", xp, torch_device=torch.device("cpu"))
    try:
        dev = devmod.resolve("auto")
    except SparkError as err:  # pragma: no cover - a broken install
        pytest.skip(str(err))
    if dev.kind == "cpu":
        pytest.skip(f"no GPU: {dev.note}")
    return dev


def host(dev: devmod.Device, a) -> np.ndarray:
    return np.asarray(dev.ops.to_host(a))
