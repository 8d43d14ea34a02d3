"""``CachedLM``: the whole tiny model and one KV cache, as the sampler's ``DiffusionLM`` (ARCHITECTURE.md, seam 1)."""

from __future__ import annotations

import torch

from explainer.errors import UsageError
from explainer.model.diffusion_gemma import DiffusionGemmaModel


class CachedLM:
    """Seam 1 adapter: whole model + one KVCache, implementing the sampler's ``DiffusionLM``.

    One object per generation. encode: causal pass, K/V kept. decode: bidirectional pass over the
    canvas reading the cached prefix; its K/V is truncated away again (nothing stored).
    """

    def __init__(self, model: DiffusionGemmaModel):
        if not (model.is_first_rank and model.is_last_rank):
            raise UsageError("CachedLM needs the whole model (start_layer=0, end_layer=num_hidden_layers)")
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.kv_cache = model.new_kv_cache()

    @torch.no_grad()
    def encode(self, input_ids: torch.Tensor) -> None:
        self.model(input_ids=input_ids, kv_cache=self.kv_cache, causal=True)          # no SC (as HF)

    @torch.no_grad()
    def decode(self, canvas: torch.Tensor, self_conditioning_logits: torch.Tensor | None) -> torch.Tensor:
        m, prefix = self.model, self.kv_cache.length
        embeds = m.embed_input_ids(canvas)                                              # [B, L, H]
        sc = None if self_conditioning_logits is None else m.soft_embedding(self_conditioning_logits)
        embeds = m.apply_self_conditioning(embeds, sc)
        hidden = m(inputs_embeds=embeds, kv_cache=self.kv_cache, causal=False)        # [B, L, H]
        self.kv_cache.truncate(prefix)
        return m.compute_logits(hidden)                                                 # fp32 [B, L, V]
