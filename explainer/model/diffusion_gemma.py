"""Tiny DiffusionGemma-style backbone, sliceable into pipeline-parallel (PP) stages.

Mirrors vLLM ``model_executor/models/diffusion_gemma.py`` (one Gemma backbone, two modes) and the
facts of HF ``modeling_diffusion_gemma.py``:

* **One weight set, two modes**, chosen per call by ``causal``:
  - encoder mode (``causal=True``): prompt prefill and committing a finished canvas; causal over
    prefix + new tokens; its K/V is kept.
  - decoder mode (``causal=False``): denoising a canvas; every canvas token sees the whole committed
    prefix and the whole canvas (bidirectional). The forward still writes the canvas K/V (as vLLM
    does); the caller truncates it away again (vLLM's ``num_computed_tokens`` rollback).
* RoPE positions continue after the prefix: canvas positions are ``prefix_len .. prefix_len + L - 1``.
* Gemma blocks: RMSNorm sandwich (input / post-attention / pre-FFN / post-FFN norms), q/k RMSNorm
  with learned scale, weightless v norm, attention scaling 1.0 (as Gemma 4), gated GELU-tanh MLP.
  The residual stream is carried next to the hidden states like vLLM's Gemma (fused add + norm), so
  a PP stage boundary hands over ``IntermediateTensors{"hidden_states", "residual"}``.
* Embedding × sqrt(hidden); tied LM head; final-logit softcap 30 in fp32.
* Self-conditioning (first stage, decoder mode only):
  ``out = post_norm(inputs_embeds + down(gelu_tanh(gate(pre_norm(s))) * up(pre_norm(s))))`` with
  ``s = softmax(processed logits) @ E × sqrt(hidden)`` (fp32, ``soft_embedding``, last stage) and
  ``s = 0`` on a canvas's first step. As in HF, the encoder pass (prefill, commit) applies **no**
  self-conditioning: callers embed with ``embed_input_ids`` only. (vLLM applies the SC block with a
  zero soft embedding on commit steps; this toy follows HF and documents it here.)

A stage owns layers ``[start_layer, end_layer)``; the others are ``PPMissingLayer`` placeholders so
parameter names stay global (vLLM's ``make_layers``). The first stage owns the embedding and the SC
block; the last stage owns the final norm and its own copy of the embedding matrix for the tied head
and ``soft_embedding`` (as vLLM's last rank does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from explainer.errors import UsageError
from explainer.model.kv_cache import KVCache
from explainer.model.layers import DecoderLayer, RMSNorm, SelfConditioning, attention_mask
from explainer.model.stages import IntermediateTensors, PPMissingLayer
from explainer.model.tiny_config import TinyConfig


class DiffusionGemmaModel(nn.Module):
    """One PP stage: layers [start_layer, end_layer). ``DiffusionGemmaModel(cfg)`` is the whole model."""

    def __init__(self, config: TinyConfig, start_layer: int = 0, end_layer: int | None = None):
        super().__init__()
        n = config.num_hidden_layers
        end_layer = n if end_layer is None else end_layer
        if not 0 <= start_layer < end_layer <= n:
            raise UsageError(f"layer range [{start_layer}, {end_layer}) is not a non-empty slice of 0..{n}")
        self.config, self.start_layer, self.end_layer = config, start_layer, end_layer
        self.is_first_rank, self.is_last_rank = start_layer == 0, end_layer == n
        self.normalizer = config.hidden_size ** 0.5
        if self.is_first_rank or self.is_last_rank:
            # first stage: input embedding; last stage: its own copy for the tied head + soft_embedding
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if self.is_first_rank:
            self.self_conditioning = SelfConditioning(config)
        self.layers = nn.ModuleList(
            DecoderLayer(config) if start_layer <= i < end_layer else PPMissingLayer() for i in range(n))
        if self.is_last_rank:
            self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @property
    def num_local_layers(self) -> int:
        return self.end_layer - self.start_layer

    def new_kv_cache(self) -> KVCache:
        return KVCache(self.num_local_layers)

    # ---- first stage -------------------------------------------------------------------------
    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[B, T] int64 -> [B, T, H], × sqrt(H)."""
        V = self.config.vocab_size
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= V):
            bad = sorted({int(t) for t in input_ids.flatten() if not 0 <= int(t) < V})
            raise UsageError(f"token ids {bad} are outside the vocabulary; accepted: 0..{V - 1}")
        return self.embed_tokens(input_ids) * self.normalizer

    def apply_self_conditioning(self, inputs_embeds, self_conditioning_embeds=None):
        """[B, L, H] canvas embeddings + [B, L, H] soft embeddings (None = zeros, a canvas's first step)."""
        if self_conditioning_embeds is None:
            self_conditioning_embeds = torch.zeros_like(inputs_embeds)
        return self.self_conditioning(inputs_embeds, self_conditioning_embeds)

    # ---- last stage --------------------------------------------------------------------------
    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[B, T, H] final-normed hidden -> fp32 soft-capped logits [B, T, V] (tied head)."""
        logits = F.linear(hidden_states.float(), self.embed_tokens.weight.float())
        cap = self.config.final_logit_softcapping
        return torch.tanh(logits / cap) * cap

    def soft_embedding(self, processed_logits: torch.Tensor) -> torch.Tensor:
        """[B, L, V] processed logits -> probs @ E × sqrt(H), fp32 [B, L, H]."""
        probs = processed_logits.float().softmax(dim=-1)
        return (probs @ self.embed_tokens.weight.float()) * self.normalizer

    # ---- every stage -------------------------------------------------------------------------
    def make_empty_intermediate_tensors(self, batch_size: int, dtype=torch.float32, device="cpu",
                                        num_tokens: int | None = None) -> IntermediateTensors:
        """Zero buffers a non-first stage receives into: [batch_size, T, H] ("hidden_states", "residual").
        ``num_tokens`` defaults to the canvas length (a denoise / commit step). vLLM's signature is
        ``(batch_size, dtype, device)`` with one flat token dimension (it passes max_num_batched_tokens as
        batch_size); the toy keeps a batch dimension, so the token count is this extra keyword."""
        T = self.config.canvas_length if num_tokens is None else num_tokens
        shape = (batch_size, T, self.config.hidden_size)
        return IntermediateTensors({"hidden_states": torch.zeros(shape, dtype=dtype, device=device),
                                    "residual": torch.zeros(shape, dtype=dtype, device=device)})

    def forward(self, input_ids=None, positions=None, kv_cache: KVCache | None = None, causal: bool = True,
                intermediate_tensors: IntermediateTensors | None = None, inputs_embeds=None,
                attn_mask: torch.Tensor | None = None):
        """Run this stage's layers over T new tokens.

        input_ids [B, T] or inputs_embeds [B, T, H] on the first stage; intermediate_tensors elsewhere.
        positions [B, T] or [T] (default: kv_cache.length + arange(T)). kv_cache: this stage's cache; the
        call's K/V is appended (caller truncates to roll back). attn_mask: training only, an explicit
        [B, 1, T, T] bool mask used with no cache (block-diffusion layout); it overrides ``causal``.
        Returns IntermediateTensors (non-last stage) or final-normed hidden states [B, T, H] (last).
        """
        if self.is_first_rank:
            hidden_states = self.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
            residual = None
        else:
            if intermediate_tensors is None:
                raise UsageError(f"stage [{self.start_layer}, {self.end_layer}) is not first: pass intermediate_tensors")
            hidden_states, residual = intermediate_tensors["hidden_states"], intermediate_tensors["residual"]
        B, T, _ = hidden_states.shape
        prefix = 0 if kv_cache is None else kv_cache.length
        if positions is None:
            positions = torch.arange(prefix, prefix + T)
        if positions.dim() == 1:
            positions = positions[None].expand(B, T)
        mask = attention_mask(prefix, T, causal) if attn_mask is None else attn_mask
        for local_idx, i in enumerate(range(self.start_layer, self.end_layer)):
            hidden_states, residual = self.layers[i](hidden_states, residual, positions, mask, kv_cache, local_idx)
        if not self.is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states
