"""Drive a transformers ``DiffusionGemmaForBlockDiffusion`` (5.23.0) with explainer's own sampler loop.

``generate(hf_model, input_ids, **kw)`` equals ``hf_model.generate(input_ids, **kw).sequences`` token for
token under the same ``torch.manual_seed`` (``tests/test_hf_conformance.py``). transformers stays optional: it is
imported only when a model is driven.

The adapter mirrors how HF ``generate`` calls the model: the encoder (``model.model.encoder``) appends
the prompt, then each committed canvas, to one ``DynamicCache`` at positions continuing the sequence;
the decoder (``model.forward`` with ``decoder_input_ids``) reads that cache at positions
cur_len .. cur_len + L - 1 and never writes it.
"""

from __future__ import annotations

import torch

from explainer import sampler
from explainer.errors import UsageError

__all__ = ["HFDiffusionLM", "generate", "resolve_generation_kwargs"]

_DEFAULTS = {   # DiffusionGemmaGenerationConfig._get_default_generation_params()
    "max_new_tokens": 256, "max_denoising_steps": 48, "t_min": 0.4, "t_max": 0.8,
    "stability_threshold": 1, "confidence_threshold": 0.005,
}
_FIELDS = ("max_new_tokens", "max_length", "max_denoising_steps", "sampler_config", "t_min", "t_max",
           "stability_threshold", "confidence_threshold", "eos_token_id", "pad_token_id")
_IGNORED = ("return_dict_in_generate",)


def _transformers():
    try:
        import transformers
    except ImportError as exc:   # pragma: no cover - depends on the environment
        raise ImportError("explainer.hf needs transformers==5.23.0: pip install 'explainer[hf]'") from exc
    return transformers


class HFDiffusionLM:
    """``sampler.DiffusionLM`` over a HF model; one object per generation (it owns the cache)."""

    def __init__(self, hf_model, attention_mask: torch.Tensor | None = None):
        transformers = _transformers()
        self.model = hf_model
        self.vocab_size = hf_model.config.text_config.vocab_size
        self.dtype = hf_model.model.decoder.embed_tokens.weight.dtype   # self-conditioning dtype
        self.cache = transformers.DynamicCache(config=hf_model.config.get_text_config(decoder=True))
        self.cur_len = 0                      # tokens encoded so far = first canvas position
        self.attention_mask = None if attention_mask is None else attention_mask.bool()
        self._decoder_masks = None

    def encode(self, input_ids: torch.LongTensor) -> None:
        batch, length = input_ids.shape
        if self.cur_len == 0:
            if self.attention_mask is None:
                self.attention_mask = torch.ones((batch, length), dtype=torch.bool, device=input_ids.device)
        else:                                 # a committed canvas: no padding inside it
            self.attention_mask = torch.nn.functional.pad(self.attention_mask, (0, length), value=True)
        positions = torch.arange(self.cur_len, self.cur_len + length, dtype=torch.int32,
                                 device=input_ids.device).unsqueeze(0)
        encoder = self.model.model.encoder
        masks = encoder.create_masks_for_generate(
            config=self.model.config,
            inputs_embeds=torch.empty((batch, length, 0), dtype=self.model.dtype, device=input_ids.device),
            attention_mask=self.attention_mask, past_key_values=self.cache, position_ids=positions)
        encoder(input_ids=input_ids.clone(memory_format=torch.contiguous_format), attention_mask=masks,
                past_key_values=self.cache, position_ids=positions)
        self.cur_len += length
        self._decoder_masks = None            # rebuilt on the canvas's first decode

    def decode(self, canvas: torch.LongTensor, self_conditioning_logits: torch.Tensor | None) -> torch.Tensor:
        length = canvas.shape[1]
        if self._decoder_masks is None:
            decoder_mask = torch.nn.functional.pad(self.attention_mask, (0, length), value=True)
            self._decoder_masks = self.model.model.decoder.create_diffusion_decoder_attention_mask(
                config=self.model.config, inputs_embeds=canvas.unsqueeze(-1), past_key_values=self.cache,
                decoder_attention_mask=decoder_mask)
        positions = torch.arange(self.cur_len, self.cur_len + length, dtype=torch.int32,
                                 device=canvas.device).unsqueeze(0)
        out = self.model.forward(decoder_input_ids=canvas, self_conditioning_logits=self_conditioning_logits,
                                 decoder_attention_mask=self._decoder_masks, past_key_values=self.cache,
                                 decoder_position_ids=positions)
        return out.logits


def resolve_generation_kwargs(hf_model, prompt_len: int, kwargs: dict) -> dict:
    """HF's precedence: kwargs > ``generation_config`` kwarg > model generation config > global defaults."""
    kwargs = dict(kwargs)
    base = kwargs.pop("generation_config", None)
    model_cfg = getattr(hf_model, "generation_config", None)
    entropy_bound = kwargs.pop("entropy_bound", None)
    for key in _IGNORED:
        kwargs.pop(key, None)
    unknown = sorted(set(kwargs) - set(_FIELDS))
    if unknown:
        raise UsageError(f"unsupported generate kwargs {unknown}; accepted: {', '.join(_FIELDS)}, "
                         f"entropy_bound, generation_config, attention_mask, generator, recorder")
    cfg = {}
    for name in _FIELDS:
        if name in kwargs:
            cfg[name] = kwargs[name]
            continue
        value = None
        for source in (base, model_cfg):
            value = getattr(source, name, None) if source is not None else None
            if value is not None:
                break
        cfg[name] = _DEFAULTS.get(name) if value is None else value
    sc = cfg.pop("sampler_config")
    if entropy_bound is None:
        if isinstance(sc, dict):
            entropy_bound = sc.get("entropy_bound")
        elif sc is not None:
            entropy_bound = getattr(sc, "entropy_bound", None)
            if entropy_bound is None:
                raise UsageError(f"sampler_config={sc!r}: only EntropyBoundSamplerConfig is supported")
    cfg["entropy_bound"] = 0.1 if entropy_bound is None else entropy_bound
    # HF _prepare_generated_length: max_length wins only while max_new_tokens is the default 256
    if cfg["max_length"] and cfg["max_new_tokens"] == 256:
        cfg["max_new_tokens"] = cfg["max_length"] - prompt_len
    return cfg


def generate(hf_model, input_ids: torch.Tensor, *, attention_mask: torch.Tensor | None = None,
             generator: torch.Generator | None = None, recorder: sampler.StepRecorder | None = None,
             **kwargs) -> torch.LongTensor:
    """``hf_model.generate(input_ids, **kwargs).sequences``, computed by ``explainer.sampler.generate``."""
    _transformers()
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise UsageError(f"input_ids must be a tensor [batch, prompt_len], got {type(input_ids).__name__}")
    if attention_mask is not None and (attention_mask.dim() != 2 or attention_mask.shape != input_ids.shape):
        raise UsageError(f"attention_mask shape {tuple(attention_mask.shape)}: must be 2-D and equal "
                         f"input_ids shape {tuple(input_ids.shape)}")
    cfg = resolve_generation_kwargs(hf_model, input_ids.shape[1], kwargs)
    lm = HFDiffusionLM(hf_model, attention_mask=attention_mask)
    with torch.no_grad():
        return sampler.generate(lm, input_ids, canvas_length=hf_model.config.canvas_length,
                                generator=generator, recorder=recorder, **cfg)
