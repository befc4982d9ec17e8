"""Shared helpers of the eval tests: small configs and an oracle forward."""
import numpy as np
import pytest

from sparktrain.data.tasks import COPY_PREFIX
from sparktrain.model.config import ModelConfig
from sparktrain.data.pairs import EOS, SEP

SMALL = ModelConfig(dim=16, n_layer=1, n_head=2, n_kv_head=1, seq_len=32)
SMALL_POOL = ModelConfig(dim=16, n_layer=1, n_head=2, n_kv_head=1, seq_len=32, train_attn=False)


def copy_oracle_logits(params, cfg, inputs):
    """A perfect copier of `Say exactly: X`: after SEP it emits X then EOS.

    Written from the token stream alone, so it checks that eval feeds each row
    its own tokens and reads each row's own last position.
    """
    inputs = np.asarray(inputs)
    B, T = inputs.shape
    logits = np.zeros((B, T, 256), dtype=np.float32)
    for b in range(B):
        row = inputs[b].tolist()
        for t in range(T):
            seen = row[:t + 1]
            if SEP not in seen:
                logits[b, t, 0] = 20.0
                continue
            sep = seen.index(SEP)
            prompt = bytes(seen[1:sep])
            word = prompt[len(COPY_PREFIX):] if prompt.startswith(COPY_PREFIX.encode()) else b""
            k = t - sep
            logits[b, t, word[k] if k < len(word) else EOS] = 20.0
    return logits



@pytest.fixture
def oracle(monkeypatch):
    """Swap the attention model's forward for copy_oracle_logits (import this fixture by name)."""
    from sparktrain.model.build import Transformer
    monkeypatch.setattr(Transformer, "forward_logits",
                        lambda self, params, inputs: copy_oracle_logits(params, self.cfg, inputs))
