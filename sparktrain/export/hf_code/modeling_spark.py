"""SparkForCausalLM: the Spark Train decoder in PyTorch, for
`AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`. Written by
`spark export --to hf` beside configuration_spark.py (Spark Train, docs/export.md "Models with
architecture options"; the maths: docs/model.md "The model", "Architecture options").

A Llama (RMSNorm, RoPE on the pairs (u_i, u_{i+hd/2}), grouped-query causal attention, an
untied head, no biases) with the options a Llama cannot express, each off unless config.json
sets it: the ReLU^2 MLP, q/k RMSNorm per head, the logit soft-cap, the hashed bigram table,
the value residual and the U-net skips. Tensor names are Llama's, plus `model.bigram.weight`,
`model.value_mix.weight` and `model.skip.weight` for the options that add tensors.

No KV cache: every step of `generate` runs the whole window again (these models are small),
and the window is the last `max_position_embeddings` tokens, as `spark generate` slides it.
No left padding: give one prompt, prompts of one length, or pad on the right.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_spark import SparkConfig

BIGRAM_MULT = 1_000_003  # the bigram option's hash: (prev * BIGRAM_MULT + cur) % buckets


def rms_norm(x, eps, weight=None):
    """x / sqrt(mean(x^2) + eps) over the last axis, times weight when one is given."""
    out = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return out if weight is None else out * weight


def rope(u, cos, sin):
    """Rotate the pairs (u_i, u_{i+hd/2}) of every head: u (B, heads, T, hd)."""
    u1, u2 = u.chunk(2, dim=-1)
    return u * cos + torch.cat([-u2, u1], dim=-1) * sin


def rope_tables(T, hd, theta, device):
    """cos, sin (T, hd): angle p * theta^(-2i/hd) for pair i, both halves, in float64."""
    freqs = theta ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64) / hd)  # (hd/2,)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * freqs[None, :]    # (T, hd/2)
    full = torch.cat([angle, angle], dim=1)                                   # (T, hd)
    return torch.cos(full).float().to(device), torch.sin(full).float().to(device)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.eps, self.weight)


class Scalars(nn.Module):
    """A vector of learned scalars saved as `<name>.weight` (value_mix, skip)."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))


class SparkAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        C, hd = config.hidden_size, config.head_dim
        self.H, self.KV, self.hd = config.num_attention_heads, config.num_key_value_heads, hd
        self.q_proj = nn.Linear(C, self.H * hd, bias=False)
        self.k_proj = nn.Linear(C, self.KV * hd, bias=False)
        self.v_proj = nn.Linear(C, self.KV * hd, bias=False)
        self.o_proj = nn.Linear(self.H * hd, C, bias=False)
        self.qk_norm, self.eps = config.qk_norm, config.rms_norm_eps

    def forward(self, h, cos, sin, v_first=None, lam=None):
        """h (B, T, C) -> (B, T, C) and this layer's values before any mixing."""
        B, T, _ = h.shape
        q = self.q_proj(h).view(B, T, self.H, self.hd).transpose(1, 2)    # (B, H, T, hd)
        k = self.k_proj(h).view(B, T, self.KV, self.hd).transpose(1, 2)   # (B, KV, T, hd)
        v = self.v_proj(h).view(B, T, self.KV, self.hd).transpose(1, 2)   # (B, KV, T, hd)
        v_own = v
        if lam is not None:                   # value_residual: v + lam (v_first - v)
            v = v + lam * (v_first - v)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.qk_norm:                      # after rope, as Spark (a rotation keeps norms)
            q, k = rms_norm(q, self.eps), rms_norm(k, self.eps)
        G = self.H // self.KV                 # query head j reads kv head j // G
        k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.hd)                  # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1)
        att = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)                   # (B, T, C)
        return self.o_proj(y), v_own


class SparkMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        C, F4 = config.hidden_size, config.intermediate_size
        self.relu2 = config.mlp == "relu2"
        if not self.relu2:
            self.gate_proj = nn.Linear(C, F4, bias=False)
        self.up_proj = nn.Linear(C, F4, bias=False)
        self.down_proj = nn.Linear(F4, C, bias=False)

    def forward(self, h):
        if self.relu2:                        # relu(h Wup^T)^2 Wdown^T
            return self.down_proj(F.relu(self.up_proj(h)).square())
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class SparkBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = SparkAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SparkMLP(config)

    def forward(self, x, cos, sin, v_first=None, lam=None):
        att, v = self.self_attn(self.input_layernorm(x), cos, sin, v_first, lam)
        x = x + att
        return x + self.mlp(self.post_attention_layernorm(x)), v


class SparkModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        n = config.num_hidden_layers
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.bigram:
            self.bigram = nn.Embedding(config.bigram, config.hidden_size)
        self.layers = nn.ModuleList(SparkBlock(config) for _ in range(n))
        if config.value_residual:
            self.value_mix = Scalars(n - 1)   # entry L - 1: layer L's lambda
        if config.unet:
            self.skip = Scalars(n // 2)       # entry i: block i's output into block n-1-i
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids):
        """input_ids (B, T) -> the final norm's output (B, T, C)."""
        cfg = self.config
        B, T = input_ids.shape
        x = self.embed_tokens(input_ids)                                  # (B, T, C)
        if cfg.bigram:                        # the row's first token pairs with id vocab_size
            first = torch.full((B, 1), cfg.vocab_size, dtype=input_ids.dtype,
                               device=input_ids.device)
            prev = torch.cat([first, input_ids[:, :-1]], dim=1)
            x = x + self.bigram((prev * BIGRAM_MULT + input_ids) % cfg.bigram)
        cos, sin = rope_tables(T, cfg.head_dim, cfg.rope_theta, x.device)
        n, outs, v_first = cfg.num_hidden_layers, [], None
        for L, block in enumerate(self.layers):
            if cfg.unet and L >= n - n // 2:  # block n-1-L's output, weighted
                x = x + self.skip.weight[n - 1 - L] * outs[n - 1 - L]
            lam = self.value_mix.weight[L - 1] if cfg.value_residual and L else None
            x, v = block(x, cos, sin, v_first, lam)
            if cfg.value_residual and L == 0:
                v_first = v
            if L < n // 2:
                outs.append(x)
        return self.norm(x)


class SparkPreTrainedModel(PreTrainedModel):
    config_class = SparkConfig
    base_model_prefix = "model"
    _no_split_modules = ["SparkBlock"]

    def _init_weights(self, module):
        """Fresh weights only for a model made from a config (export always writes all)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)


class SparkForCausalLM(SparkPreTrainedModel, GenerationMixin):
    def __init__(self, config):
        super().__init__(config)
        self.model = SparkModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        mask = attention_mask
        if mask is not None and bool((mask[:, 1:] > mask[:, :-1]).any()):
            # right padding is harmless (attention is causal); a pad before a token is not
            raise ValueError("SparkForCausalLM supports no left padding: give one prompt, "
                             "prompts of one length, or pad on the right")
        logits = self.lm_head(self.model(input_ids))                      # (B, T, V)
        cap = self.config.logit_cap
        if cap:                               # cap tanh(logits / cap)
            logits = cap * torch.tanh(logits / cap)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        """The whole window each step: the last max_position_embeddings tokens."""
        window = self.config.max_position_embeddings
        mask = None if attention_mask is None else attention_mask[:, -window:]
        return {"input_ids": input_ids[:, -window:], "attention_mask": mask}
