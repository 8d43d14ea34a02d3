"""The Gemma blocks of the tiny backbone (vLLM ``model_executor/models/gemma3.py``, HF ``modeling_diffusion_gemma.py``):
RMSNorm with vLLM's fused add, the gated GELU-tanh MLP, RoPE, attention with q/k/v norms, the sandwich-norm
decoder layer, the self-conditioning block and the causal / bidirectional attention mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from explainer.model.kv_cache import KVCache
from explainer.model.tiny_config import TinyConfig


class RMSNorm(nn.Module):
    """Gemma RMSNorm in fp32; ``with_scale=False`` is the weightless variant. ``forward(x, residual)``
    is vLLM's fused add + norm: returns ``(norm(x + residual), x + residual)``."""

    def __init__(self, dim: int, eps: float, with_scale: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if with_scale else None

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        out = x.float() * torch.pow(x.float().pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            out = out * self.weight.float()
        out = out.type_as(x)
        return out if residual is None else (out, residual)


class GatedMLP(nn.Module):
    """down(gelu_tanh(gate(x)) * up(x)) — Gemma's MLP, also the SC block's body."""

    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE. x [B, heads, T, hd], positions [B, T] (int64)."""
    hd = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))   # [hd/2]
    freqs = positions.float()[..., None] * inv_freq                                 # [B, T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]                                # [B, 1, T, hd]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


class Attention(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        h, nh, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        self.q_proj = nn.Linear(h, nh * hd, bias=False)
        self.k_proj = nn.Linear(h, nh * hd, bias=False)
        self.v_proj = nn.Linear(h, nh * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.v_norm = RMSNorm(hd, cfg.rms_norm_eps, with_scale=False)

    def forward(self, x, positions, mask, kv_cache: KVCache | None, local_idx: int):
        # x [B, T, H] -> q/k/v [B, heads, T, hd]
        B, T, _ = x.shape
        nh, hd = self.cfg.num_attention_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, T, nh, hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, nh, hd)).transpose(1, 2)
        v = self.v_norm(self.v_proj(x).view(B, T, nh, hd)).transpose(1, 2)
        q, k = rope(q, positions, self.cfg.rope_theta), rope(k, positions, self.cfg.rope_theta)
        if kv_cache is not None:
            k, v = kv_cache.append(local_idx, k, v)                     # [B, heads, P + T, hd]
        # mask [B or 1, 1, T, P + T] bool, True = may attend; scaling 1.0 (q/k are RMS-normed)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)   # [B, heads, T, hd]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, nh * hd))


class DecoderLayer(nn.Module):
    """Gemma sandwich-norm block in vLLM's (hidden_states, residual) form."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.mlp = GatedMLP(h, cfg.intermediate_size)
        self.post_feedforward_layernorm = RMSNorm(h, eps)

    def forward(self, hidden_states, residual, positions, mask, kv_cache, local_idx):
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(hidden_states, positions, mask, kv_cache, local_idx)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, residual = self.pre_feedforward_layernorm(hidden_states, residual)
        hidden_states = self.post_feedforward_layernorm(self.mlp(hidden_states))
        return hidden_states, residual


class SelfConditioning(nn.Module):
    """post_norm(inputs_embeds + gated_mlp(pre_norm(s))); pre_norm learned, post_norm weightless."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.pre_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        self.post_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, with_scale=False)

    def forward(self, inputs_embeds, soft_embeds):
        return self.post_norm(inputs_embeds + self.mlp(self.pre_norm(soft_embeds)))


def attention_mask(prefix_len: int, num_new: int, causal: bool) -> torch.Tensor:
    """[1, 1, T, P + T] bool. Causal: new token i sees keys 0..P+i. Bidirectional: sees all P + T."""
    if not causal:
        return torch.ones(1, 1, num_new, prefix_len + num_new, dtype=torch.bool)
    q = torch.arange(num_new)[:, None] + prefix_len
    return (torch.arange(prefix_len + num_new)[None, :] <= q)[None, None]
