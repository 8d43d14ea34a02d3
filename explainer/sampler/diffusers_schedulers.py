"""Optional canvas schedulers as diffusers (0.42.1) ships them: discrete DDIM and BlockRefinement (uniform mode).

Neither is in any transformers release (PR #46595 closed unmerged); diffusers ships them next to
``EntropyBoundScheduler``. Both take *raw* logits [B, L, V], a step index i = 0 .. N-1 counting up,
and the current canvas; the candidate x0 is drawn at a flat ``temperature`` (0 = greedy argmax).
RNG order per step (same as diffusers): DDIM ``multinomial`` (x0, only if T > 0), ``multinomial``
(route), ``randint``; BlockRefinement ``multinomial`` (x0, only if T > 0), ``randint``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from explainer.errors import UsageError
from explainer.validation import check_int

__all__ = ["SchedulerStep", "sample_candidates", "DiscreteDDIM", "BlockRefinement"]


@dataclass
class SchedulerStep:
    prev_sample: torch.Tensor        # [B, L] next canvas
    sampled_tokens: torch.Tensor     # [B, L] candidate x0
    sampled_probs: torch.Tensor      # [B, L] probability of the candidate
    accepted: torch.Tensor           # [B, L] bool: DDIM route != noise; BlockRefinement newly committed
    routes: torch.Tensor | None = None        # DDIM: 0 clean (x0), 1 stay (x_t), 2 noise
    edited: torch.Tensor | None = None        # BlockRefinement: committed tokens replaced by editing


def _check(num_steps: int, step_index: int, temperature: float) -> None:
    check_int("num_steps", num_steps, 1)
    check_int("step_index", step_index, 0, num_steps - 1)
    if temperature < 0:
        raise UsageError(f"temperature={temperature!r}: must be >= 0")


def sample_candidates(logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None,
                      prob_from_sampling_distribution: bool = False):
    """x0 per position: argmax if T == 0, else one multinomial draw from softmax(logits / T).

    The candidate's probability comes from softmax(logits) (DDIM), or from the distribution it was
    drawn from (BlockRefinement: ``prob_from_sampling_distribution=True``).
    """
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    if temperature == 0.0:
        probs = torch.softmax(flat.float(), dim=-1)
        token = flat.argmax(dim=-1, keepdim=True)
    else:
        if prob_from_sampling_distribution:       # BlockRefinement scales in the logits' dtype, then upcasts
            scaled = (flat / temperature if temperature != 1.0 else flat).float()
        else:                                     # DDIM upcasts, then scales
            scaled = flat.float() / temperature
        draw = torch.softmax(scaled, dim=-1)
        token = torch.multinomial(draw, num_samples=1, generator=generator)
        probs = draw if prob_from_sampling_distribution else torch.softmax(flat.float(), dim=-1)
    return token.view(logits.shape[:-1]), torch.gather(probs, -1, token).view(logits.shape[:-1])


class DiscreteDDIM:
    """Exact D3PM posterior q(x_s | x_t, x0) of the uniform kernel on alpha(t) = 1 - t (diffusers
    ``DiscreteDDIMScheduler.step``, predictor only). alpha_t = i/N, alpha_s = (i+1)/N, a = alpha_t/alpha_s:

        clean: b(1-a)/V + a*b*[x_t == x0]    stay: a(1-b)/V    noise: (1-a)(1-b)/V     (b = alpha_s)

    The last step (b = 1) commits x0 deterministically.
    """

    def __init__(self, num_steps: int = 32):
        _check(num_steps, 0, 0.0)
        self.num_steps = num_steps

    def route_probs(self, sample: torch.Tensor, x0: torch.Tensor, step_index: int, vocab_size: int) -> torch.Tensor:
        alpha_t, alpha_s = step_index / self.num_steps, (step_index + 1) / self.num_steps
        a = alpha_t / alpha_s
        same = (sample == x0).float()
        clean = alpha_s * (1 - a) / vocab_size + a * alpha_s * same
        stay = a * (1 - alpha_s) / vocab_size * torch.ones_like(same)
        noise = (1 - a) * (1 - alpha_s) / vocab_size * torch.ones_like(same)
        routes = torch.stack([clean, stay, noise], dim=-1)
        return routes / routes.sum(dim=-1, keepdim=True)

    def step(self, logits: torch.Tensor, step_index: int, sample: torch.Tensor, *, temperature: float = 0.0,
             generator: torch.Generator | None = None) -> SchedulerStep:
        _check(self.num_steps, step_index, temperature)
        vocab = logits.shape[-1]
        x0, p0 = sample_candidates(logits, temperature, generator)
        probs = self.route_probs(sample, x0, step_index, vocab)
        routes = torch.multinomial(probs.view(-1, 3), num_samples=1, generator=generator).view_as(sample)
        noise = torch.randint(0, vocab, sample.shape, device=sample.device, generator=generator)
        prev = torch.where(routes == 0, x0, sample)
        prev = torch.where(routes == 2, noise, prev)
        return SchedulerStep(prev, x0, p0, routes != 2, routes=routes)


class BlockRefinement:
    """Commit-by-confidence with a cumulative quota (diffusers ``BlockRefinementScheduler``, uniform mode).

    At step i (k = i + 1) at least ceil(k*L/N) positions are committed: the most confident uncommitted
    ones (double argsort), plus every uncommitted one with confidence > ``threshold``. Committed positions
    keep their token (unless ``editing_threshold`` is set and a different candidate is more confident
    than it); every uncommitted position is renoised. The committed mask resets at step 0.
    """

    def __init__(self, num_steps: int = 32, threshold: float = 0.95, editing_threshold: float | None = None):
        _check(num_steps, 0, 0.0)
        self.num_steps, self.threshold, self.editing_threshold = num_steps, threshold, editing_threshold
        self.committed: torch.Tensor | None = None

    def quota(self, step_index: int, length: int) -> int:
        return ((step_index + 1) * length + self.num_steps - 1) // self.num_steps

    def step(self, logits: torch.Tensor, step_index: int, sample: torch.Tensor, *, temperature: float = 0.0,
             generator: torch.Generator | None = None) -> SchedulerStep:
        _check(self.num_steps, step_index, temperature)
        x0, p0 = sample_candidates(logits, temperature, generator, prob_from_sampling_distribution=True)
        if step_index == 0 or self.committed is None or self.committed.shape != sample.shape:
            self.committed = torch.zeros_like(sample, dtype=torch.bool)
        committed = self.committed
        confidence = p0.to(torch.float32)
        needed = (self.quota(step_index, sample.shape[1]) - committed.sum(dim=-1)).clamp(min=0)
        ranks = confidence.masked_fill(committed, float("-inf")).argsort(dim=-1, descending=True).argsort(dim=-1)
        commit = ~committed & ((ranks < needed[:, None]) | (confidence > self.threshold))
        edited = torch.zeros_like(commit)
        if self.editing_threshold is not None:
            edited = committed & (x0 != sample) & (confidence > float(self.editing_threshold))
        prev = torch.where(commit | edited, x0, sample)
        self.committed = committed | commit
        noise = torch.randint(0, logits.shape[-1], sample.shape, device=sample.device, generator=generator)
        return SchedulerStep(torch.where(self.committed, prev, noise), x0, p0, commit, edited=edited)
