"""The state of one training run, a typed public record: what the loop (loop.py) sets up,
updates and hands to the readers beside it, the records of the run (records.py) and its
resume state (resume.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sparktrain.data.base import TrainingData
from sparktrain.model.base import Model
from sparktrain.model.device import Device
from sparktrain.model.parallel import GradientEngine
from sparktrain.params import StepConfig
from sparktrain.train.folder import JobFolder
from sparktrain.train.job import Job


@dataclass
class Run:
    """Everything the loop reads, and the state it updates."""
    job: Job
    folder: JobFolder              # the job folder, locked by this run's owner (runner.py)
    step: StepConfig
    model: Model
    data: TrainingData
    device: Device                 # model/device.py: where params and state live
    params: dict                   # on the run's device (numpy arrays on the CPU)
    base_step: int                 # the base weights' step_n (0 for a fresh init)
    step_n: int                    # the step_n this run stamps
    trainable: list[str]
    start: dict[str, np.ndarray]   # trainable tensors before training (host)
    optimizer: object              # train/optim.py: SGD, AdamW or Muon, keyed like params
    fingerprint: str               # what a resume state must match (resume.fingerprint)
    engine: GradientEngine = field(default=None)  # loss_and_grads over step.shards shards
    best: dict | None = None       # step.keep_best: host copy of the best pass's params (best.py)
    average: object = None         # step.ema: train/average.py's WeightAverage

    def model_params(self) -> dict:
        """The weights the run would commit now: the average under step.ema, else params."""
        return self.params if self.average is None else self.average.weights(self.params)

    def host_params(self) -> dict[str, np.ndarray]:
        return self.device.to_host(self.params)
