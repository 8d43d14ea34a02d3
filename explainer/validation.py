"""Input checks shared by every layer: each raises ``UsageError`` naming the bad value and the accepted range.

``check_*`` take a Python value (library calls: ``EngineConfig``, ``sampler.generate``, ``LLMEngine.add_request``);
``parse_*`` take the text of a command-line flag (the ``commands`` and the training
script), so ``python -m explainer ...`` exits 2 with one line instead of a traceback.
"""

from __future__ import annotations

import math
from typing import Iterable

from explainer.errors import UsageError

MAX_SEED = 2**63 - 1   # torch.Generator.manual_seed takes < 2**64; the accuracy command adds the request index

__all__ = ["MAX_SEED", "is_number", "check_int", "check_one_of", "check_token_ids", "parse_int", "parse_number"]


def is_number(x) -> bool:
    """A finite ``int`` or ``float`` (``bool`` is not a number here)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` is an ``int`` (not a ``bool``) in ``low..high`` (``high`` None: no upper bound)."""
    accepted = f"integers >= {low}" if high is None else f"integers {low}..{high}"
    if isinstance(value, bool) or not isinstance(value, int):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise UsageError(f"{name}={value!r} must be an integer {bound} (got a {type(value).__name__})")
    if value < low or (high is not None and value > high):
        raise UsageError(f"{name}={value} is out of range; accepted: {accepted}")
    return value


def check_one_of(name: str, value, accepted: tuple) -> None:
    """``value`` is one of the names in ``accepted`` (a vocabulary of ``explainer.vocab``)."""
    if value not in accepted:
        raise UsageError(f"{name}={value!r} is not accepted; accepted: {', '.join(accepted)}")


def check_token_ids(name: str, ids: Iterable, vocab_size: int) -> list[int]:
    """Every id is an ``int`` in ``0..vocab_size - 1``; returns them as a list."""
    ids = list(ids)
    bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size]
    if bad:
        shown = sorted(set(bad)) if all(isinstance(t, int) for t in bad) else bad
        raise UsageError(f"{name} {shown} are outside the vocabulary; accepted: 0..{vocab_size - 1}")
    return ids


def parse_int(flag: str, text: str, low: int, high: int | None = None) -> int:
    """The integer a command-line flag names; a bad value names the flag and the accepted range."""
    try:
        out = int(text)
    except (TypeError, ValueError):                       # incl. "1e23" and > 4300 digits
        out = None
    if out is None or out < low or (high is not None and out > high):
        shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:40]) + f"... ({len(str(text))} characters)"
        accepted = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        raise UsageError(f"{flag} {shown} is not accepted; accepted: {accepted}")
    return out


def parse_number(flag: str, text: str, kind, low, high):
    """A bounded ``int`` or ``float`` flag (the training script's ``--steps``, ``--seed``, ``--lr`` ...)."""
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not (math.isfinite(value) and low <= value <= high):
        raise UsageError(f"{flag} {text!r:.60} is not accepted; accepted: {kind.__name__} from {low} to {high}")
    return value
