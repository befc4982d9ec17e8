"""The names a run's device is asked by (params.yaml's step.device, every `--device`): the
one list, light enough for the params schema to read without the device code, which
resolves each (model/device.py; docs/gpu.md)."""

DEVICES = ("cpu", "cuda", "mps", "auto")
