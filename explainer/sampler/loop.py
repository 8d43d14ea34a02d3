"""The block-autoregressive loop of HF ``generation_diffusion_gemma.py`` (``DiffusionGemmaGenerationMixin``).

Per canvas: encode what was committed last (the prompt first), draw a uniform random canvas, denoise it
step by step (``primitives.denoise_step``) until the stopping rule holds or ``max_denoising_steps`` ran,
then commit its last argmax draft and apply the end-of-text and length criteria (``finalize_canvas``).
The model is any ``DiffusionLM``: ``model.cached_lm.CachedLM`` (the shipped checkpoint) or ``hf.HFDiffusionLM``
(a transformers model).
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence

import torch

from explainer.errors import UsageError
from explainer.sampler.primitives import StableAndConfident, check_finite_logits, denoise_step
from explainer.sampler.recorder import CanvasRecord, StepRecord, StepRecorder
from explainer.validation import check_int, check_token_ids, is_number

__all__ = ["DiffusionLM", "generate"]


class DiffusionLM(Protocol):
    """The sampler's view of a model (ARCHITECTURE.md, seam 1). One object per generation; it owns its KV cache.

    Optional attribute ``dtype``: the self-conditioning logits are cast to it (HF casts to the
    embedding dtype); absent means they stay fp32.
    """

    vocab_size: int

    def encode(self, input_ids: torch.LongTensor) -> None:
        """Causal pass over new tokens [B, T]; their KV is appended (prompt, then each committed canvas)."""

    def decode(self, canvas: torch.LongTensor, self_conditioning_logits: torch.Tensor | None) -> torch.Tensor:
        """Bidirectional pass over canvas [B, L] reading the cached prefix; fp32 soft-capped logits [B, L, V]."""


def _token_ids(name: str, value, vocab: int) -> list[int] | None:
    """``eos_token_id`` / ``pad_token_id``: None, one id, or several (a list or tensor)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    return check_token_ids(name, [value] if isinstance(value, int) else value, vocab)


def _validate(lm, input_ids, canvas_length, max_new_tokens, max_denoising_steps, entropy_bound, t_min, t_max,
              max_length) -> int:
    """Every argument of ``generate`` before any forward; returns the vocabulary size."""
    vocab = check_int("lm.vocab_size", getattr(lm, "vocab_size", None), 1)
    for name, value in (("canvas_length", canvas_length), ("max_new_tokens", max_new_tokens),
                        ("max_denoising_steps", max_denoising_steps)):
        check_int(name, value, 1)
    if max_length is not None:
        check_int("max_length", max_length, 1)
    if not is_number(entropy_bound) or entropy_bound < 0:
        raise UsageError(f"entropy_bound={entropy_bound!r}: must be a finite number >= 0")
    if (t_min is None) != (t_max is None):
        raise UsageError(f"t_min={t_min!r}, t_max={t_max!r}: set both (0 <= t_min < t_max) or neither (T = 1)")
    if t_min is not None:
        if not (is_number(t_min) and is_number(t_max)) or t_min < 0 or t_max < 0:
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
        check_token_ids("input_ids", [lo if lo < 0 else hi], vocab)
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
    step_args = dict(num_steps=max_denoising_steps, entropy_bound=entropy_bound, t_min=t_min, t_max=t_max,
                     generator=generator)
    sequences, uncommitted = input_ids, input_ids
    finished_rows = torch.zeros(batch, dtype=torch.bool, device=device)
    for canvas_index in range(math.ceil(max_new_tokens / L)):
        lm.encode(uncommitted)                                   # prompt, then the last committed canvas
        canvas = torch.randint(0, vocab, (batch, L), device=device, generator=generator)
        argmax, steps = _denoise_canvas(lm, canvas, canvas_index, stopper, recorder, vocab, step_args)
        sequences, finished_rows = _finalize_canvas(sequences, argmax, finished_rows, eos, pad_token_id,
                                                    max_length, L)
        if recorder is not None:
            recorder.on_canvas(CanvasRecord(canvas_index, steps, argmax, sequences[:, -L:].clone(), finished_rows))
        if bool(finished_rows.all()):
            break
        uncommitted = sequences[:, -L:].clone()
    return sequences


def _denoise_canvas(lm: DiffusionLM, canvas: torch.Tensor, canvas_index: int, stopper: StableAndConfident | None,
                    recorder: StepRecorder | None, vocab: int, step_args: dict) -> tuple[torch.Tensor, int]:
    """Denoise one canvas (HF's loop over ``_denoising_step``): cur_step counts ``num_steps``..1, a row
    that meets the stopping rule is frozen, the loop ends when every row is. Returns (the last argmax
    draft [B, L], the decoder forwards run)."""
    batch, L = canvas.shape
    sc_dtype = getattr(lm, "dtype", None)
    argmax, sc_logits = canvas, None
    frozen = torch.zeros(batch, dtype=torch.bool, device=canvas.device)   # finished denoising
    if stopper is not None:
        stopper.reset()
    steps = 0
    for cur_step in range(step_args["num_steps"], 0, -1):
        raw = lm.decode(canvas, sc_logits)
        steps += 1
        if tuple(raw.shape) != (batch, L, vocab):
            raise UsageError(f"decoder returned logits of shape {tuple(raw.shape)} at canvas {canvas_index}, "
                             f"step {cur_step}; expected {(batch, L, vocab)}")
        check_finite_logits(raw, canvas_index=canvas_index, cur_step=cur_step)
        step = denoise_step(raw, canvas, cur_step=cur_step, **step_args)
        new_argmax, new_canvas, processed = step.argmax, step.canvas, step.processed_logits
        if stopper is not None:
            if bool(frozen.any()):                               # finished rows stay frozen
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
    return argmax, steps


def _finalize_canvas(sequences, argmax, finished_rows, eos, pad_token_id, max_length, L):
    """Commit the last argmax draft, then the autoregressive criteria on the whole canvas (HF
    ``_finalize_canvas``): length, end of text; rows finished earlier are padded, and so is everything
    after a row's first EOS. Returns (sequences, finished rows)."""
    batch, device = sequences.shape[0], sequences.device
    sequences = torch.cat([sequences, argmax], dim=-1)
    finished_now = torch.zeros(batch, dtype=torch.bool, device=device)
    if max_length is not None and sequences.shape[1] >= max_length:
        finished_now[:] = True
    if eos is not None:
        finished_now |= torch.isin(sequences[:, -L:], eos).any(dim=-1)
    previously = finished_rows
    finished_rows = previously | finished_now
    if pad_token_id is not None and bool(finished_rows.any()):
        sequences[previously, -L:] = pad_token_id                # rows finished in an earlier canvas
        if eos is not None and bool(finished_now.any()):         # pad after the first EOS, keep the EOS
            new_tokens = sequences[:, -L:]
            is_eos = torch.isin(new_tokens, eos)
            seen = is_eos.cumsum(dim=-1)
            new_tokens[(seen > 0) & ~((seen == 1) & is_eos)] = pad_token_id
    return sequences, finished_rows
