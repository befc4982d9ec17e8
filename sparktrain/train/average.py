"""step.ema: an exponential moving average of the trained weights, the model the run commits
(docs/training.md "Reading the data more than once"). PyTorch's
`AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))` updated after every
optimizer step: the first update copies the weights, each later one moves the average
towards them, `avg += (1 - decay) * (w - avg)` (torch's `lerp_`), in float32 where the
weights live. The loss curve is measured on the average, so the pass points, the learned
check and the committed weights all describe the same model."""
from __future__ import annotations

from sparktrain.model import backend


class WeightAverage:
    """The average of `names`' tensors of a run's params, kept beside them on their device."""

    def __init__(self, decay: float, params: dict, names):
        self.decay, self.names = decay, list(names)
        self.be = backend.of_params(params)
        self.avg: dict | None = None  # None until the first update (torch's n_averaged == 0)

    def update(self, params: dict) -> None:
        """After an optimizer step: the first copies the weights, later ones lerp to them."""
        if self.avg is None:
            self.avg = {n: self.be.copy(params[n]) for n in self.names}
            return
        rate = self.be.f32(1.0 - self.decay)
        for n, a in self.avg.items():
            a += rate * (params[n] - a)

    def weights(self, params: dict) -> dict:
        """The params with the averaged tensors in place of the trained ones (before any
        update: the params themselves)."""
        return params if self.avg is None else {**params, **self.avg}

    def state(self) -> dict:
        """The average's tensors for the resume state (empty before the first update)."""
        return dict(self.avg or {})

    def load_state(self, tensors: dict, params: dict, load) -> None:
        """The saved average (host arrays, empty: none yet) put back where `params` live;
        `load(dst, host)` returns the array to keep, as the device's ops do."""
        self.avg = {n: load(self.be.copy(params[n]), tensors[n])
                    for n in self.names} if tensors else None

