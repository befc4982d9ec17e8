"""model/device.py: `cpu | cuda | mps | auto` resolution and its one-line errors,
with PyTorch replaced by a fake (the real one is only in `make test-gpu`)."""
import os
import types

import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.model import device as devmod


@pytest.fixture(autouse=True)
def fresh_resolution(monkeypatch):
    """Each test resolves anew: its fake PyTorch, not an earlier test's Device."""
    monkeypatch.setattr(devmod, "_RESOLVED", {})


def fake_torch(cuda=False, mps=False, calls=None):
    calls = calls if calls is not None else []
    ns = types.SimpleNamespace
    return ns(
        __version__="2.9.0-fake",
        cuda=ns(is_available=lambda: cuda, get_device_name=lambda i: "NVIDIA GeForce RTX 4090",
                synchronize=lambda: calls.append("sync")),
        mps=ns(synchronize=lambda: None),
        backends=ns(mps=ns(is_available=lambda: mps), cuda=ns(matmul=ns(allow_tf32=True)),
                    cudnn=ns(allow_tf32=True, benchmark=True)),
        use_deterministic_algorithms=lambda on: calls.append(("deterministic", on)),
        device=lambda kind: f"device({kind})",
    )


def with_torch(monkeypatch, torch):
    monkeypatch.setattr(devmod, "_import_gpu", lambda: (torch, "xp-of-torch"))


def without_torch(monkeypatch):
    def missing():
        raise ImportError("No module named 'torch'")
    monkeypatch.setattr(devmod, "_import_gpu", missing)


def test_cpu_is_numpy_and_moves_nothing():
    dev = devmod.resolve("cpu")
    assert (dev.kind, dev.name, dev.xp) == ("cpu", "cpu", np)
    params = {"w": np.ones(3, np.float32)}
    assert dev.to_device(params)["w"] is params["w"]
    assert dev.to_host(params)["w"].tobytes() == params["w"].tobytes()


@pytest.mark.parametrize("bad", ["tpu", "CUDA", "", 3, None, True])
def test_unknown_devices_are_one_line(bad):
    with pytest.raises(SparkError) as err:
        devmod.resolve(bad)
    assert str(err.value) == f"device must be one of cpu, cuda, mps, auto, got {bad!r}"


@pytest.mark.parametrize("kind", ["cuda", "mps"])
def test_a_gpu_without_the_extra_names_the_install_line(monkeypatch, kind):
    without_torch(monkeypatch)
    with pytest.raises(SparkError) as err:
        devmod.resolve(kind)
    assert str(err.value) == (f"--device {kind} (or step.device: {kind}): install the gpu extra: "
                              f"pip install -e '.[gpu]'")


def test_auto_without_the_extra_is_the_cpu_and_says_so(monkeypatch):
    without_torch(monkeypatch)
    dev = devmod.resolve("auto")
    assert dev.kind == "cpu" and dev.xp is np
    assert "gpu extra is not installed" in dev.note and "\n" not in dev.note


@pytest.mark.parametrize("kind,word", [("cuda", "CUDA"), ("mps", "MPS")])
def test_the_extra_but_no_device_is_one_line(monkeypatch, kind, word):
    with_torch(monkeypatch, fake_torch())
    with pytest.raises(SparkError) as err:
        devmod.resolve(kind)
    msg = str(err.value)
    assert msg.startswith(f"--device {kind} (or step.device: {kind}): PyTorch 2.9.0-fake sees no ")
    assert word in msg and "\n" not in msg


def test_auto_with_the_extra_but_no_gpu_is_the_cpu(monkeypatch):
    with_torch(monkeypatch, fake_torch())
    dev = devmod.resolve("auto")
    assert dev.kind == "cpu" and "sees no CUDA or MPS device" in dev.note


@pytest.mark.parametrize("requested", ["cuda", "auto"])
def test_cuda_is_named_and_deterministic(monkeypatch, requested):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    calls = []
    torch = fake_torch(cuda=True, mps=True, calls=calls)
    with_torch(monkeypatch, torch)
    dev = devmod.resolve(requested)
    assert (dev.kind, dev.name, dev.xp) == ("cuda", "cuda:NVIDIA GeForce RTX 4090", "xp-of-torch")
    assert dev.torch_device == "device(cuda)"
    assert ("deterministic", True) in calls
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == devmod.CUBLAS_WORKSPACE
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.benchmark is False
    assert dev.name in dev.note
    dev.sync()
    assert "sync" in calls


def test_auto_falls_back_to_mps(monkeypatch):
    with_torch(monkeypatch, fake_torch(mps=True))
    dev = devmod.resolve("auto")
    assert (dev.kind, dev.name) == ("mps", "mps") and "(auto)" in dev.note


def test_a_device_is_resolved_once_a_process(monkeypatch):
    calls = []
    with_torch(monkeypatch, fake_torch(cuda=True, calls=calls))
    first = devmod.resolve("auto")
    assert devmod.resolve("auto") is first and calls.count(("deterministic", True)) == 1
    assert devmod.resolve("cpu") is devmod.CPU


def test_the_device_answers_what_the_loop_asks():
    cpu = devmod.CPU
    assert cpu.record() == {} and cpu.workers(3) == 3 and cpu.workers(None) is None
    assert not cpu.is_out_of_memory(MemoryError()) and cpu.matmul_peak() > 0
    cpu.check_workers(2)   # the CPU runs worker processes
    gpu = devmod.Device("cuda", "cuda:NVIDIA X", np)
    assert gpu.record() == {"device": "cuda:NVIDIA X"} and gpu.workers(4) == 1

    class OutOfMemoryError(RuntimeError):
        pass
    assert gpu.is_out_of_memory(OutOfMemoryError("CUDA out of memory"))
    assert gpu.is_out_of_memory(RuntimeError("MPS backend out of memory"))
    assert not gpu.is_out_of_memory(ValueError("shapes"))
    with pytest.raises(SparkError, match="runs one process"):
        gpu.check_workers(2)
