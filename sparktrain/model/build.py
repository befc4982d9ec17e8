"""A model from a config: the kind the config names, with its maths."""
from __future__ import annotations

from sparktrain.model.base import Model
from sparktrain.model.config import ModelConfig
from sparktrain.model.meanpool import MeanPool
from sparktrain.model.transformer import Transformer

KINDS: dict[str, type[Model]] = {kind.name: kind for kind in (Transformer, MeanPool)}


def build_model(cfg: ModelConfig) -> Model:
    """The attention decoder or the mean-pool fallback, as cfg.kind says."""
    return KINDS[cfg.kind.name](cfg)
