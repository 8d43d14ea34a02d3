"""The canvas sampler: per-step primitives, the block-autoregressive loop and its recorder.
``explainer.sampler.<name>`` is the public face; the modules are

* ``primitives``: temperature, entropy, entropy-bound acceptance, renoise, stopping, one denoising step;
* ``loop``: ``generate`` (HF ``DiffusionGemmaGenerationMixin.generate``, token for token);
* ``recorder``: what a ``generate`` call did, step by step.
"""

from explainer.sampler.loop import DiffusionLM, generate
from explainer.sampler.primitives import (StableAndConfident, StepResult, accept_and_renoise, check_finite_logits,
                                          denoise_step, entropy_bound_accept, gumbel_max_draw, linear_temperature,
                                          multinomial_draw, token_entropy)
from explainer.sampler.recorder import CanvasRecord, StepRecord, StepRecorder

__all__ = [
    "DiffusionLM", "StepResult", "StepRecord", "CanvasRecord", "StepRecorder", "StableAndConfident",
    "linear_temperature", "token_entropy", "entropy_bound_accept", "accept_and_renoise", "denoise_step",
    "check_finite_logits", "generate", "multinomial_draw", "gumbel_max_draw",
]
