"""The character-level task: spell a number 100..999 in English words.

    prompt "451"  ->  answer "four hundred fifty-one" + EOS, padded to whole canvases of 8

Every answer spans 2–4 canvases (11..27 characters + EOS), so generation is block-autoregressive
for real: each later canvas depends on the committed canvases before it (a stale prefix changes the
text). There is exactly one right answer per prompt, so exact match is a clean metric.
"""

from __future__ import annotations

import random

import torch

from explainer.errors import UsageError

PAD, EOS = "<pad>", "<eos>"
PAD_ID, EOS_ID = 0, 1
CHARS = " -0123456789abcdefghijklmnopqrstuvwxyz"
VOCAB = [PAD, EOS] + list(CHARS)                      # 40 tokens
VOCAB_SIZE = len(VOCAB)
_ID = {c: i for i, c in enumerate(VOCAB)}
CANVAS_LENGTH = 8
MAX_CANVASES = 4
NUMBERS = range(100, 1000)
HELD_OUT_SEED = 20240613
HELD_OUT_SIZE = 100

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
        "sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def spell(n: int) -> str:
    """100 <= n <= 999 -> 'four hundred fifty-one' (no 'and')."""
    if n not in NUMBERS:
        raise UsageError(f"number {n} is outside the task range; accepted: {NUMBERS.start}..{NUMBERS.stop - 1}")
    words = f"{_ONES[n // 100]} hundred"
    rest = n % 100
    if rest == 0:
        return words
    if rest < 20:
        return f"{words} {_ONES[rest]}"
    tens, ones = divmod(rest, 10)
    return f"{words} {_TENS[tens]}" + (f"-{_ONES[ones]}" if ones else "")


def encode(text: str) -> list[int]:
    """Characters -> token ids; a UsageError names every character outside the vocabulary."""
    bad = sorted({c for c in text if c not in CHARS})
    if bad:
        what = f"character {bad[0]!r} is" if len(bad) == 1 else f"characters {' '.join(map(repr, bad))} are"
        raise UsageError(f"{what} not in the vocabulary; "
                         f"accepted characters: {CHARS!r}")
    return [_ID[c] for c in text]


def decode(ids) -> str:
    """Token ids -> text, stopping at the first EOS; pads are dropped."""
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if i == EOS_ID:
            break
        if i != PAD_ID and 0 <= i < VOCAB_SIZE:
            out.append(VOCAB[i])
    return "".join(out)


def answer_ids(n: int) -> list[int]:
    """Answer + EOS, padded to a whole number of canvases."""
    ids = encode(spell(n)) + [EOS_ID]
    n_canvases = -(-len(ids) // CANVAS_LENGTH)
    return ids + [PAD_ID] * (n_canvases * CANVAS_LENGTH - len(ids))


def held_out_numbers() -> list[int]:
    """The fixed held-out split (never trained on)."""
    return sorted(random.Random(HELD_OUT_SEED).sample(list(NUMBERS), HELD_OUT_SIZE))


def train_numbers() -> list[int]:
    held = set(held_out_numbers())
    return [n for n in NUMBERS if n not in held]


def make_batch(numbers: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts [B, 3] and answers [B, MAX_CANVASES * L] (pad beyond the answer's last canvas)."""
    prompts = torch.tensor([encode(str(n)) for n in numbers])
    answers = torch.full((len(numbers), MAX_CANVASES * CANVAS_LENGTH), PAD_ID)
    for row, n in enumerate(numbers):
        a = answer_ids(n)
        answers[row, : len(a)] = torch.tensor(a)
    return prompts, answers


def exact_match(predictions: list[str], numbers: list[int]) -> float:
    return sum(p == spell(n) for p, n in zip(predictions, numbers)) / max(len(numbers), 1)
