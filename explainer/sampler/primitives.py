"""Canvas sampler: the block-autoregressive diffusion loop of HF ``generation_diffusion_gemma.py``.

One step (HF ``_denoising_step`` + ``EntropyBoundSampler``), for a canvas ``x`` [B, L]:

    raw [B, L, V] --/T(cur_step)--> processed --softmax, multinomial--> candidate [B, L]
                                             --argmax--> draft [B, L]   (what a canvas commits)
                                             --entropy--> h [B, L] --entropy bound--> accepted [B, L]
    new x = where(accepted, candidate, fresh uniform noise)

RNG order (DESIGN contract 2): one ``randint(0, V, (B, L))`` per canvas, then per step one
``multinomial`` over ``B*L`` rows followed by one ``randint(0, V, (B, L))``; nothing else.

``draw="gumbel"`` swaps the candidate draw for vLLM ``DiffusionSampler``'s (``_compiled_sample_step``):
one ``rand_like`` over the whole ``[B, L, V]`` processed logits, ``argmax(processed - log(-log u))``,
then the same ``randint`` for renoise. Both draws sample softmax(processed) exactly (the Gumbel-max
trick), but they turn the random stream into tokens differently, so under the same seed they give
different tokens: vLLM is not token-identical to transformers even with identical logits and seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

from explainer.errors import UsageError

__all__ = [
    "DiffusionLM", "StepResult", "StepRecord", "CanvasRecord", "StepRecorder", "StableAndConfident",
    "linear_temperature", "token_entropy", "entropy_bound_accept", "accept_and_renoise", "denoise_step",
    "check_finite_logits", "generate", "multinomial_draw", "gumbel_max_draw", "DRAWS",
]

DRAWS = ("multinomial", "gumbel")


class DiffusionLM(Protocol):
    """ARCHITECTURE Seam 1. One object per generation; it owns its KV cache.

    Optional attribute ``dtype``: the self-conditioning logits are cast to it (HF casts to the
    embedding dtype); absent means they stay fp32.
    """

    vocab_size: int

    def encode(self, input_ids: torch.LongTensor) -> None:
        """Causal pass over new tokens [B, T]; their KV is appended (prompt, then each committed canvas)."""

    def decode(self, canvas: torch.LongTensor, self_conditioning_logits: torch.Tensor | None) -> torch.Tensor:
        """Bidirectional pass over canvas [B, L] reading the cached prefix; fp32 soft-capped logits [B, L, V]."""


# ---------------------------------------------------------------- primitives (DESIGN contract 2)

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
        if isinstance(stability_threshold, bool) or not isinstance(stability_threshold, int) or stability_threshold < 0:
            raise UsageError(f"stability_threshold={stability_threshold!r}: must be an integer >= 0")
        if not _is_number(confidence_threshold) or not confidence_threshold > 0:
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
    """vLLM ``_compiled_sample_step`` phase 2: u = rand_like([B, L, V]).clamp(min=1e-20),
    candidate = argmax(processed + (-log(-log u))). Same law as ``multinomial_draw``, other tokens."""
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
    if draw not in DRAWS:
        raise UsageError(f"draw={draw!r} is not accepted; accepted: {', '.join(DRAWS)}")
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


# ---------------------------------------------------------------- recording

@dataclass
class StepRecord:
    canvas_index: int
    cur_step: int                    # N..1
    temperature: float
    input_canvas: torch.Tensor       # [B, L] canvas the decoder saw
    candidate: torch.Tensor
    accepted: torch.Tensor
    entropy: torch.Tensor
    argmax: torch.Tensor             # after freezing finished rows
    canvas: torch.Tensor             # next input canvas, after freezing finished rows
    stable: torch.Tensor | None      # [B] bool (None: adaptive stopping off)
    confident: torch.Tensor | None
    finished: torch.Tensor           # [B] bool, finished denoising after this step


@dataclass
class CanvasRecord:
    canvas_index: int
    steps: int                       # decoder forwards run for this canvas
    argmax: torch.Tensor             # [B, L] committed draft before EOS padding
    committed: torch.Tensor          # [B, L] tokens appended to the sequence (after padding)
    finished: torch.Tensor           # [B] rows finished (EOS / max length) after this canvas


@dataclass
class StepRecorder:
    """Collects every step and every committed canvas of one ``generate`` call."""

    steps: list[StepRecord] = field(default_factory=list)
    canvases: list[CanvasRecord] = field(default_factory=list)

    def on_step(self, record: StepRecord) -> None:
        self.steps.append(record)

    def on_canvas(self, record: CanvasRecord) -> None:
        self.canvases.append(record)


# ---------------------------------------------------------------- the loop

def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{name}={value!r}: must be an integer >= 1")


def _token_ids(name: str, value, vocab: int) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    ids = [value] if isinstance(value, int) else list(value)
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab:
            raise UsageError(f"{name}={value!r}: token ids must be integers in [0, {vocab})")
    return ids


def _validate(lm, input_ids, canvas_length, max_new_tokens, max_denoising_steps, entropy_bound, t_min, t_max,
              max_length):
    vocab = getattr(lm, "vocab_size", None)
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= 0:
        raise UsageError(f"lm.vocab_size={vocab!r}: must be an integer >= 1")
    _positive_int("canvas_length", canvas_length)
    _positive_int("max_new_tokens", max_new_tokens)
    _positive_int("max_denoising_steps", max_denoising_steps)
    if max_length is not None:
        _positive_int("max_length", max_length)
    if not _is_number(entropy_bound) or entropy_bound < 0:
        raise UsageError(f"entropy_bound={entropy_bound!r}: must be a finite number >= 0")
    if (t_min is None) != (t_max is None):
        raise UsageError(f"t_min={t_min!r}, t_max={t_max!r}: set both (0 <= t_min < t_max) or neither (T = 1)")
    if t_min is not None:
        if not (_is_number(t_min) and _is_number(t_max)) or t_min < 0 or t_max < 0:
            raise UsageError(f"t_min={t_min!r}, t_max={t_max!r}: temperatures must be finite numbers >= 0")
        if t_max <= t_min:
            raise UsageError(f"t_max={t_max!r} must be > t_min={t_min!r} (accepted: 0 <= t_min < t_max)")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype.is_floating_point \
            or input_ids.dtype == torch.bool:
        raise UsageError(f"input_ids must be an integer tensor [batch, prompt_len], got "
                         f"{type(input_ids).__name__} {getattr(input_ids, 'shape', '')}")
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise UsageError(f"input_ids shape {tuple(input_ids.shape)}: the prompt must hold >= 1 row and >= 1 token")
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= vocab:
        raise UsageError(f"input_ids hold token id {lo if lo < 0 else hi}: accepted range is [0, {vocab})")
    return vocab


@torch.no_grad()
def generate(lm: DiffusionLM, input_ids: torch.Tensor, *, canvas_length: int, max_new_tokens: int,
             max_denoising_steps: int = 48, entropy_bound: float = 0.1, t_min: float | None = 0.4,
             t_max: float | None = 0.8, stability_threshold: int | None = 1,
             confidence_threshold: float | None = 0.005, eos_token_id: int | Sequence[int] | None = None,
             pad_token_id: int | None = None, generator: torch.Generator | None = None,
             recorder: StepRecorder | None = None, max_length: int | None = None) -> torch.Tensor:
    """HF ``DiffusionGemmaGenerationMixin.generate`` (5.23.0), token for token. Returns sequences
    [B, prompt + n_canvases * L] with n_canvases = ceil(max_new_tokens / L) (no truncation).

    ``stability_threshold`` or ``confidence_threshold`` None disables adaptive stopping; ``max_length``
    adds HF's ``MaxLengthCriteria`` (total length). Finished rows are padded only if ``pad_token_id``
    is set. The last committed canvas is not encoded.
    """
    vocab = _validate(lm, input_ids, canvas_length, max_new_tokens, max_denoising_steps, entropy_bound,
                      t_min, t_max, max_length)
    eos_ids = _token_ids("eos_token_id", eos_token_id, vocab)
    if pad_token_id is not None:
        _token_ids("pad_token_id", pad_token_id, vocab)
    stopper = None
    if stability_threshold is not None and confidence_threshold is not None:
        stopper = StableAndConfident(stability_threshold, confidence_threshold)
    input_ids = input_ids.long()
    batch, device, L = input_ids.shape[0], input_ids.device, canvas_length
    eos = torch.tensor(eos_ids, device=device) if eos_ids is not None else None
    sc_dtype = getattr(lm, "dtype", None)
    sequences, uncommitted = input_ids, input_ids
    finished_rows = torch.zeros(batch, dtype=torch.bool, device=device)

    for canvas_index in range(math.ceil(max_new_tokens / L)):
        lm.encode(uncommitted)                                   # prompt, then the last committed canvas
        canvas = torch.randint(0, vocab, (batch, L), device=device, generator=generator)
        argmax, sc_logits = canvas, None
        frozen = torch.zeros(batch, dtype=torch.bool, device=device)   # finished denoising
        if stopper is not None:
            stopper.reset()
        steps = 0
        for cur_step in range(max_denoising_steps, 0, -1):
            raw = lm.decode(canvas, sc_logits)
            steps += 1
            if tuple(raw.shape) != (batch, L, vocab):
                raise UsageError(f"decoder returned logits of shape {tuple(raw.shape)} at canvas {canvas_index}, "
                                 f"step {cur_step}; expected {(batch, L, vocab)}")
            check_finite_logits(raw, canvas_index=canvas_index, cur_step=cur_step)
            step = denoise_step(raw, canvas, cur_step=cur_step, num_steps=max_denoising_steps,
                                entropy_bound=entropy_bound, t_min=t_min, t_max=t_max, generator=generator)
            new_argmax, new_canvas, processed = step.argmax, step.canvas, step.processed_logits
            if stopper is not None:
                if bool(frozen.any()):                           # finished rows stay frozen
                    new_argmax = torch.where(frozen[:, None], argmax, new_argmax)
                    new_canvas = torch.where(frozen[:, None], canvas, new_canvas)
                    processed = torch.where(frozen[:, None, None], sc_logits, processed)
                # frozen rows' entropy is irrelevant: their flag is already True
                frozen = frozen | stopper(new_argmax, processed, entropy=step.entropy)
            sc_logits = processed if sc_dtype is None else processed.to(sc_dtype)
            if recorder is not None:
                recorder.on_step(StepRecord(
                    canvas_index, cur_step, step.temperature, canvas, step.candidate, step.accepted, step.entropy,
                    new_argmax, new_canvas, None if stopper is None else stopper.last_stable,
                    None if stopper is None else stopper.last_confident, frozen))
            canvas, argmax = new_canvas, new_argmax
            if bool(frozen.all()):
                break

        # commit the last argmax draft, then the AR criteria on the whole canvas (HF _finalize_canvas)
        sequences = torch.cat([sequences, argmax], dim=-1)
        finished_now = torch.zeros(batch, dtype=torch.bool, device=device)
        if max_length is not None and sequences.shape[1] >= max_length:
            finished_now[:] = True
        if eos is not None:
            finished_now |= torch.isin(sequences[:, -L:], eos).any(dim=-1)
        previously = finished_rows
        finished_rows = previously | finished_now
        if pad_token_id is not None and bool(finished_rows.any()):
            sequences[previously, -L:] = pad_token_id            # rows finished in an earlier canvas
            if eos is not None and bool(finished_now.any()):     # pad after the first EOS, keep the EOS
                new_tokens = sequences[:, -L:]
                is_eos = torch.isin(new_tokens, eos)
                seen = is_eos.cumsum(dim=-1)
                new_tokens[(seen > 0) & ~((seen == 1) & is_eos)] = pad_token_id
        if recorder is not None:
            recorder.on_canvas(CanvasRecord(canvas_index, steps, argmax, sequences[:, -L:].clone(), finished_rows))
        if bool(finished_rows.all()):
            break
        uncommitted = sequences[:, -L:].clone()
    return sequences
