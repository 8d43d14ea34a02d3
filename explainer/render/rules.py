"""The sampler's two rules with their arithmetic, as HTML (pure; read from a ``StepRecord``).

* ``accept_rule_html``: the entropy-bound acceptance of ``explainer.sampler.entropy_bound_accept``
  (HF ``EntropyBoundSampler.accept_canvas``): sort the positions by entropy, ascending; a position is
  accepted when the entropies of the positions sorted before it sum to at most ``entropy_bound``
  (``cumsum − own ≤ bound``, "sum minus the largest" of the prefix ending at it). So a 0.61 can be
  accepted and a 0.67 renoised under a bound of 0.1: the 0.61 came first in the sort.
* ``stop_rule_html``: ``StableAndConfident`` — stable (the argmax draft equals the previous draft(s)) and
  confident (mean entropy < ``confidence_threshold``), with the draft comparison and the mean written out.

Badges, never colour alone: ✓ accepted / ↻ renoised; ✓ yes / ✗ no.
"""

from __future__ import annotations

import math

from html import escape
from typing import Callable, Mapping, Sequence

import torch

from explainer.vocab import ACCEPT_RULE

__all__ = ["ACCEPT", "RENOISE", "YES", "NO", "accept_rule_html", "stop_rule_html", "accept_sums", "entropy_text"]

ACCEPT, RENOISE, YES, NO = "✓", "↻", "✓", "✗"


def _yes(flag: bool, yes: str = "yes", no: str = "no") -> str:
    return f'<span class="xp-yes">{YES} {yes}</span>' if flag else f'<span class="xp-no">{NO} {no}</span>'


def accept_sums(entropy: torch.Tensor) -> list[tuple[int, float, float]]:
    """(position, entropy, sum of the entropies sorted before it) in the sampler's sort order (``torch.sort``,
    ties as the sampler breaks them)."""
    sorted_h, order = torch.sort(entropy, dim=-1, descending=False)
    before = torch.cumsum(sorted_h, dim=-1) - sorted_h
    return [(int(p), float(h), float(b)) for p, h, b in zip(order.tolist(), sorted_h.tolist(), before.tolist())]


def entropy_text(h: float, decimals: int, compact: bool = False) -> str:
    """An entropy with ``decimals`` decimals, or, when that would print only zeros, two significant digits
    (``2.1e-05``; ``compact``: one, ``2e-5``, for a label under a bar): a sure model's entropies are all tiny but
    not equal, and their sort order must be readable."""
    if not 0 < abs(h) < 0.5 * 10 ** -decimals:
        return f"{h:.{decimals}f}"
    if compact:
        mantissa, exponent = f"{h:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{h:.1e}"


def _digits(bound: float) -> int:
    """Decimals that resolve the bound: 0.1 -> 3, 0.001 -> 5 (so 0.0004 <= 0.001 never reads 0.00 > 0.001)."""
    return max(2, math.ceil(-math.log10(bound)) + 2) if bound > 0 else 2


def accept_rule_html(entropy: torch.Tensor, accepted: torch.Tensor, bound: float, fid: str) -> str:
    """One row of the frame: positions in sort order with ``Σ before ≤ bound?`` and the verdict badge.
    ``entropy`` and ``accepted`` are one batch row [L]; the verdict shown is the sampler's own."""
    rows = accept_sums(entropy)
    d = _digits(bound)
    cells = []
    for pos, h, before in rows:
        ok = bool(accepted[pos])
        mark = f'<b class="xp-acc">{ACCEPT}</b>' if ok else f'<b class="xp-ren">{RENOISE}</b>'
        cells.append(f'<td data-pos="{pos}" data-accepted="{int(ok)}">pos {pos}<br>h {entropy_text(h, d)}<br>'
                     f'Σ {entropy_text(before, d)} {"≤" if before <= bound else "&gt;"} {bound:g}<br>{mark}</td>')
    n_acc = int(accepted.sum())
    first_out = next(((p, h, b) for p, h, b in rows if not bool(accepted[p])), None)
    why = ""
    if first_out is not None:
        p, h, b = first_out
        why = (f" The first position left out is pos {p} (h {h:.{d}f}): the entropies sorted before it already sum "
               f"to {b:.{d}f} &gt; {bound:g}, so it and every higher one are renoised.")
    return (f'<div class="xp-rule" id="{fid}-accept"><b>accept rule</b> (entropy bound {bound:g}): {ACCEPT_RULE} '
            f"Σ = that sum. {n_acc} of {len(rows)} accepted.{why}"
            f'<table class="xp-sorted"><tr>{"".join(cells)}</tr></table></div>')


def stop_rule_html(*, draft: Sequence[int], previous: Sequence[Sequence[int]], entropy: torch.Tensor,
                   stable: bool, confident: bool, cfg: Mapping, glyph: Callable[[int], str], fid: str) -> str:
    """The stop check with its arithmetic: the draft against the previous draft(s), and the mean entropy."""
    s = int(cfg["stability_threshold"])
    show = lambda ids: "".join(glyph(t) for t in ids)                        # noqa: E731
    if s == 0:
        stab = "stability_threshold 0: always stable"
    elif len(previous) < s:
        stab = (f"no earlier draft to compare with yet (this is step {len(previous) + 1} of the canvas; the check "
                f"needs {s} previous draft{'s' if s != 1 else ''})")
    else:
        same = [sum(a == b for a, b in zip(draft, p)) for p in previous[-s:]]
        stab = ("draft <code>" + escape(show(draft)) + "</code> vs previous "
                + ", ".join(f"<code>{escape(show(p))}</code> ({k} of {len(draft)} positions equal)"
                            for p, k in zip(previous[-s:], same)))
    total, n = float(entropy.sum()), entropy.numel()
    mean, thr = total / n, float(cfg["confidence_threshold"])
    conf = f"mean entropy = {total:.4f} / {n} = {mean:.4f} {'&lt;' if mean < thr else '≥'} {thr:g}"
    return (f'<div class="xp-rule" id="{fid}-rule"><b>stop rule</b>: stop when stable <i>and</i> confident<br>'
            f"stable {_yes(stable)}: {stab}<br>confident {_yes(confident)}: {conf}</div>")
