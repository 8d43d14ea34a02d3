"""The canvas sampler's per-step primitives (HF ``generation_diffusion_gemma.py``: ``EntropyBoundSampler``,
``LinearTemperatureScheduleLogitsProcessor``, ``StableAndConfidentStoppingCriteria``).

One step (HF ``_denoising_step`` + ``EntropyBoundSampler``), for a canvas ``x`` [B, L]:

    raw [B, L, V] --/T(cur_step)--> processed --softmax, multinomial--> candidate [B, L]
                                             --argmax--> draft [B, L]   (what a canvas commits)
                                             --entropy--> h [B, L] --entropy bound--> accepted [B, L]
    new x = where(accepted, candidate, fresh uniform noise)

RNG order, the same as HF's so the same seed gives the same tokens: one ``randint(0, V, (B, L))`` per
canvas (``loop.generate``), then per step one ``multinomial`` over ``B*L`` rows followed by one
``randint(0, V, (B, L))``; nothing else.

``draw="gumbel"`` swaps the candidate draw for Gumbel-max, the draw of vLLM's ``DiffusionSampler``: one uniform
``u`` per logit, clamped at 1e-20, and ``argmax(processed - log(-log u))``, then the same ``randint`` for renoise.
vLLM draws it in ``sample_row_stats``, per tile of requests
(``0.32.0 model_executor/models/diffusion_gemma.py:1526-1532 seed = int(torch.randint(0, 2**31 - 1, (1,)).item())``).
On CUDA that is a Triton kernel seeded by one ``randint`` per tile
(``0.32.0 model_executor/models/diffusion_gemma_sampler.py:84-86 gumbel = -tl.log(-tl.log(u))``). Elsewhere its PyTorch
reference draws ``rand_like`` over the tile's ``[rows, V]`` logits
(``0.32.0 model_executor/models/diffusion_gemma_sampler.py:158-167 u = torch.rand_like(scaled).clamp(min=1e-20)``);
the toy's draw is that reference over one request's ``[1, L, V]``. Both draws sample softmax(processed) exactly
(the Gumbel-max trick), but they turn the random stream into tokens differently, so under the same seed they give
different tokens: vLLM is not token-identical to transformers even with identical logits and seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from explainer.errors import UsageError
from explainer.validation import check_int, check_one_of, is_number
from explainer.vocab import SAMPLER_DRAWS

__all__ = ["StepResult", "StableAndConfident", "linear_temperature", "token_entropy", "entropy_bound_accept",
           "accept_and_renoise", "denoise_step", "check_finite_logits", "multinomial_draw", "gumbel_max_draw"]


def _temperature_tensor(cur_step: int, num_steps: int, t_min: float, t_max: float) -> torch.Tensor:
    # HF turns cur_step into an int32 tensor before the processor runs, so T is computed in fp32.
    step = torch.tensor(cur_step, dtype=torch.int32)
    return t_min + ((t_max - t_min) * (step / num_steps))


def linear_temperature(cur_step: int, num_steps: int, t_min: float = 0.4, t_max: float = 0.8) -> float:
    """T = t_min + (t_max - t_min) * cur_step / N, cur_step counting N..1 (never reaches t_min).

    Returned as the exact fp32 value HF divides by (``LinearTemperatureScheduleLogitsProcessor``
    with its int32 ``cur_step`` tensor).
    """
    return float(_temperature_tensor(cur_step, num_steps, t_min, t_max))


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-position categorical entropy [..., V] -> [...], op for op as ``Categorical(logits=).entropy()``."""
    normalized = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(normalized, dim=-1)
    normalized.clamp_(min=torch.finfo(normalized.dtype).min)
    return -normalized.mul_(probs).sum(-1)


def entropy_bound_accept(entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """Accept, per row of ``entropy`` [B, L], the longest ascending prefix with sum - max <= bound.

    Ties follow ``torch.sort`` exactly as HF's ``EntropyBoundSampler.accept_canvas``; at least one
    position per row is always accepted (the left side is 0 for one position).
    """
    sorted_h, order = torch.sort(entropy, dim=-1, descending=False)
    keep = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.zeros_like(keep).scatter_(-1, order, keep)


class StableAndConfident:
    """Adaptive stopping (HF ``StableAndConfidentStoppingCriteria``), per row of the batch.

    stable: the argmax canvas equals each of the last ``stability_threshold`` argmax canvases
    (history starts at -1, so >= s+1 calls are needed; s = 0 is always stable).
    confident: mean entropy of the processed logits < ``confidence_threshold``.
    Pass ``entropy`` (from ``denoise_step``) to skip recomputing it. Call ``reset()`` per canvas.
    """

    def __init__(self, stability_threshold: int = 1, confidence_threshold: float = 0.005):
        check_int("stability_threshold", stability_threshold, 0)
        if not is_number(confidence_threshold) or not confidence_threshold > 0:
            raise UsageError(f"confidence_threshold={confidence_threshold!r}: must be a number > 0")
        self.stability_threshold = stability_threshold
        self.confidence_threshold = float(confidence_threshold)
        self.reset()

    def reset(self) -> None:
        self.history: torch.Tensor | None = None   # [s, B, L]
        self.last_stable: torch.Tensor | None = None
        self.last_confident: torch.Tensor | None = None

    def __call__(self, argmax_canvas: torch.Tensor, processed_logits: torch.Tensor | None,
                 entropy: torch.Tensor | None = None) -> torch.Tensor:
        s = self.stability_threshold
        if s == 0:
            stable = torch.ones(argmax_canvas.shape[0], dtype=torch.bool, device=argmax_canvas.device)
        else:
            if self.history is None:
                self.history = torch.full((s, *argmax_canvas.shape), -1, dtype=argmax_canvas.dtype,
                                          device=argmax_canvas.device)
            stable = (self.history == argmax_canvas[None]).all(dim=-1).all(dim=0)
            self.history = torch.roll(self.history, shifts=-1, dims=0)
            self.history[-1] = argmax_canvas
        if entropy is None:
            entropy = token_entropy(processed_logits)
        confident = entropy.mean(dim=-1) < self.confidence_threshold
        self.last_stable, self.last_confident = stable, confident
        return stable & confident


@dataclass
class StepResult:
    """One denoising step. ``canvas`` is the next input canvas (accepted candidates + fresh noise)."""

    temperature: float
    processed_logits: torch.Tensor   # [B, L, V] raw / T (fp32)
    candidate: torch.Tensor          # [B, L] multinomial draw at T
    argmax: torch.Tensor             # [B, L] argmax of processed logits (the draft a canvas commits)
    entropy: torch.Tensor            # [B, L] entropy of processed logits
    accepted: torch.Tensor           # [B, L] bool, entropy-bound acceptance
    canvas: torch.Tensor             # [B, L] renoised canvas for the next step


def multinomial_draw(processed: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """HF: one ``multinomial`` over the B*L rows of softmax(processed) in fp32 -> [B, L]."""
    batch, length, vocab = processed.shape
    probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
    return torch.multinomial(probs.view(-1, vocab), num_samples=1, generator=generator).view(batch, length)


def gumbel_max_draw(processed: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Gumbel-max as vLLM's PyTorch reference ``sample_row_stats_reference`` draws it: u = rand([B, L, V]).clamp(
    min=1e-20), candidate = argmax(processed + (-log(-log u))). Same law as ``multinomial_draw``, other tokens."""
    u = torch.rand(processed.shape, dtype=torch.float32, device=processed.device,
                   generator=generator).clamp(min=1e-20)
    gumbel = -torch.log(-torch.log(u))
    return (processed.float() + gumbel).argmax(dim=-1)


def denoise_step(raw_logits: torch.Tensor, canvas: torch.Tensor, *, cur_step: int, num_steps: int,
                 entropy_bound: float = 0.1, t_min: float | None = 0.4, t_max: float | None = 0.8,
                 generator: torch.Generator | None = None, draw: str = "multinomial") -> StepResult:
    """temperature -> candidate draw -> argmax -> entropy -> accept -> renoise, in HF's RNG order.

    ``cur_step`` counts num_steps..1. ``t_min = t_max = None`` disables the schedule (T = 1).
    RNG: one ``multinomial`` over B*L rows (``draw="gumbel"``: one ``rand`` over [B, L, V]), then one
    ``randint(0, V, (B, L))``, from ``generator`` (or the global RNG). The engine's last-rank sampler
    calls this per request with B = 1.
    """
    check_one_of("draw", draw, SAMPLER_DRAWS)
    if t_min is None or t_max is None:
        temperature, processed = 1.0, raw_logits
    else:
        t = _temperature_tensor(cur_step, num_steps, t_min, t_max)
        temperature, processed = float(t), raw_logits / t
    candidate = (multinomial_draw if draw == "multinomial" else gumbel_max_draw)(processed, generator)
    argmax = torch.argmax(processed, dim=-1)
    entropy, accepted, new_canvas = accept_and_renoise(processed, candidate, entropy_bound, generator)
    return StepResult(temperature, processed, candidate, argmax, entropy, accepted, new_canvas)


def accept_and_renoise(processed_logits: torch.Tensor, candidate: torch.Tensor, entropy_bound: float,
                       generator: torch.Generator | None = None):
    """EntropyBoundSampler.accept_canvas + renoise_canvas -> (entropy, accepted, next canvas).

    Every non-accepted position gets a token of one fresh ``randint(0, V, (B, L))``, so the previous
    canvas content never survives there: next = where(accepted, candidate, noise).
    """
    entropy = token_entropy(processed_logits)
    accepted = entropy_bound_accept(entropy, entropy_bound)
    noise = torch.randint(0, processed_logits.shape[-1], candidate.shape, device=candidate.device,
                          generator=generator)
    return entropy, accepted, torch.where(accepted, candidate, noise)


def check_finite_logits(logits: torch.Tensor, *, canvas_index: int, cur_step: int) -> None:
    if not bool(torch.isfinite(logits).all()):
        bad = int((~torch.isfinite(logits)).sum())
        raise UsageError(f"decoder returned {bad} NaN/inf logits at canvas {canvas_index}, step {cur_step} "
                         f"(cur_step counts down); logits must be finite")
