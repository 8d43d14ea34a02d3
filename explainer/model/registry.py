"""Model registry: name -> class, with ``supports_pp`` computed on the class (vLLM ``models/registry.py``).

Both historic behaviours of DiffusionGemma are registered, selected by name, never by editing code:

=================================  ==============================================================
``diffusion-gemma-tiny``           after vLLM PR #45828 (default): no ``SupportsPP``; ``forward``
                                   still accepts ``intermediate_tensors``. PP > 1 is rejected.
``diffusion-gemma-tiny@pre-45828`` before #45828: declares ``SupportsPP`` and sets
                                   ``make_empty_intermediate_tensors``. PP > 1 passes the startup
                                   check and then crashes in warmup or, with int64 ids, runs on stale
                                   state on rank 0.
=================================  ==============================================================

``_ModelInfo.from_model_cls`` inspects the class only; no model is ever instantiated to decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from torch import nn

from explainer.errors import UsageError
from explainer.model.checkpoint import load_pretrained
from explainer.model.interfaces import SupportsPP, supports_pp

DEFAULT_MODEL = "diffusion-gemma-tiny"
PRE_FIX_MODEL = f"{DEFAULT_MODEL}@pre-45828"     # the same model before vLLM PR #45828 (declares SupportsPP)


class DiffusionGemmaForConditionalGeneration(nn.Module):
    """vLLM's class after #45828 (``00c25c8``): one PP stage of the tiny backbone, no ``SupportsPP``.

    ``forward`` still takes ``intermediate_tensors``: only the attribute half of ``supports_pp`` fails.
    """

    def __init__(self, start_layer: int = 0, end_layer: int | None = None):
        super().__init__()
        self.model = load_pretrained(start_layer, end_layer)
        self.config = self.model.config

    def embed_input_ids(self, input_ids):
        return self.model.embed_input_ids(input_ids)

    def apply_self_conditioning(self, inputs_embeds, self_conditioning_embeds):
        return self.model.apply_self_conditioning(inputs_embeds, self_conditioning_embeds)

    def forward(self, input_ids=None, positions=None, intermediate_tensors=None, inputs_embeds=None, *,
                kv_cache=None, causal: bool = True):
        return self.model(input_ids=input_ids, positions=positions, kv_cache=kv_cache, causal=causal,
                          intermediate_tensors=intermediate_tensors, inputs_embeds=inputs_embeds)

    def compute_logits(self, hidden_states):
        return self.model.compute_logits(hidden_states)

    def soft_embedding(self, processed_logits):
        return self.model.soft_embedding(processed_logits)

    def new_kv_cache(self):
        return self.model.new_kv_cache()


class PreFixDiffusionGemmaForConditionalGeneration(DiffusionGemmaForConditionalGeneration, SupportsPP):
    """vLLM's class before #45828 (``cdc8ad9``): lists ``SupportsPP`` and exposes the buffer factory."""

    def __init__(self, start_layer: int = 0, end_layer: int | None = None):
        super().__init__(start_layer, end_layer)
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors


@dataclass(frozen=True)
class _ModelInfo:
    architecture: str
    supports_pp: bool

    @staticmethod
    def from_model_cls(model_cls: type) -> "_ModelInfo":
        return _ModelInfo(architecture=model_cls.__name__, supports_pp=supports_pp(model_cls))


class _ModelRegistry:
    """Architecture name -> model class, and what the class supports (vLLM ``ModelRegistry``)."""

    def __init__(self, models: dict[str, type]):
        self.models = dict(models)

    def get_supported_archs(self) -> list[str]:
        return list(self.models)

    def resolve_model_cls(self, name: str) -> type:
        if name not in self.models:
            raise UsageError(f"unknown model {name!r}; known models: {', '.join(self.get_supported_archs())}")
        return self.models[name]

    def inspect_model_cls(self, name: str) -> _ModelInfo:
        return _inspect(self.resolve_model_cls(name))

    def is_pp_supported_model(self, name: str) -> bool:
        """``supports_pp`` of the class registered as ``name``: what the startup check asks."""
        return self.inspect_model_cls(name).supports_pp


@lru_cache(maxsize=None)
def _inspect(model_cls: type) -> _ModelInfo:
    return _ModelInfo.from_model_cls(model_cls)


ModelRegistry = _ModelRegistry({
    DEFAULT_MODEL: DiffusionGemmaForConditionalGeneration,
    PRE_FIX_MODEL: PreFixDiffusionGemmaForConditionalGeneration,
})
