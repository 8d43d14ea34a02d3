"""The canvas sampler (``primitives``: the per-step primitives, the block-autoregressive loop and its recorder)
and the diffusers schedulers (``diffusers_schedulers``, optional, not re-exported). ``explainer.sampler.<name>``
is the public face.
"""

from explainer.sampler.primitives import (DRAWS, CanvasRecord, DiffusionLM, StableAndConfident, StepRecord,
                                          StepRecorder, StepResult, accept_and_renoise, check_finite_logits,
                                          denoise_step, entropy_bound_accept, generate, gumbel_max_draw,
                                          linear_temperature, multinomial_draw, token_entropy)

__all__ = [
    "DiffusionLM", "StepResult", "StepRecord", "CanvasRecord", "StepRecorder", "StableAndConfident",
    "linear_temperature", "token_entropy", "entropy_bound_accept", "accept_and_renoise", "denoise_step",
    "check_finite_logits", "generate", "multinomial_draw", "gumbel_max_draw", "DRAWS",
]
