"""Exercise ``accept``: the learner's ``entropy_bound_accept(entropy, bound)`` against the library's rule
(``explainer.sampler.entropy_bound_accept``, token for token equal to transformers' ``EntropyBoundSampler``):

    per row of entropy [B, L]: sort ascending; accept position k when (sum of the sorted entropies before
    k) <= bound, i.e. the longest ascending prefix whose sum minus its largest entry stays <= bound.

Cases, grouped into named checks: distinct values, ties, all-equal rows, bound 0, exactly at the bound,
large bounds, batch > 1, random tensors, and the entropies of a real generation (then the whole
generation with the learner's rule must equal the library's, token for token). Every case compares the
bool mask; the first differing case of each group is kept for the report and the panel's case table.

Ties: when equal entropies straddle the cut, which of them come first is not specified (``torch.sort`` leaves
the order of equal values unspecified, and ``stable=True`` or Python's ``sorted`` choose otherwise), so a mask
passes when it accepts, per row, as many positions of every entropy value as the library's does
(``same_up_to_ties``): any order of equal entropies is right.
The learner's function runs in its jail (``answer``, in the learner's process): each case goes there as lists
of floats, the mask comes back as lists of bools, and the comparison with the reference happens here (``grade``).
"""

from __future__ import annotations

import functools

import torch

from explainer.sampler import primitives
from explainer.engine.errors import RankFailure
from explainer.engine.llm_engine import LLMEngine
from explainer.model import task
from explainer.sampler import entropy_bound_accept as library_rule
from explainer.trace import Trace
from explainer.workshop.catalog import About, Example
from explainer.workshop.learner import LearnerLimit
from explainer.workshop.panel import text_html
from explainer.workshop.progress import learner_phase
from explainer.workshop.report import Check, LearnerError, verdict

ABOUT = About(id="accept", function="entropy_bound_accept",
              signature="entropy_bound_accept(entropy, bound) -> bool tensor [B, L]",
              notebook="notebooks/workshop/exercises.ipynb", minutes=12, follows="01_canvas_sampler",
              section="the entropy-bound accept rule",
              summary="the sampler's accept rule, against the library's (= transformers') on random and edge-case "
                      "entropies",
              checks=("distinct values", "ties", "all-equal rows", "bound 0", "exactly at the bound", "large bounds",
                      "batch > 1", "random", "real entropies (prompt 451)", "whole generation"))
PRELOAD = ("torch",)
ANSWER_WORDS = ("cumsum", "scatter")


def _answer(body: str) -> str:
    return "import torch\n\ndef entropy_bound_accept(entropy, bound):\n" + "".join(
        f"    {line}\n" for line in body.splitlines())


# name -> an answer and the words of the reason a wrong one must give
EXAMPLES = {
    "stub": Example(_answer("return torch.zeros_like(entropy, dtype=torch.bool)"),
                    ("case 'one row, three accepted'", "expected accepted, got rejected")),
    "solution": Example(_answer("h, order = torch.sort(entropy, dim=-1)\nkeep = torch.cumsum(h, dim=-1) - h <= bound\n"
                                "return torch.zeros_like(keep).scatter_(-1, order, keep)")),
    "stable_sort": Example(_answer("h, order = torch.sort(entropy, dim=-1, stable=True)\n"
                                   "keep = torch.cumsum(h, dim=-1) - h <= bound\n"
                                   "return torch.zeros_like(keep).scatter_(-1, order, keep)")),
    "python_sorted": Example(_answer("keep = torch.zeros_like(entropy, dtype=torch.bool)\n"
                                     "for b, row in enumerate(entropy):\n"
                                     "    order = sorted(range(len(row)), key=lambda k: float(row[k]))\n"
                                     "    h = row[order]\n"
                                     "    keep[b, order] = torch.cumsum(h, 0) - h <= bound\n"
                                     "return keep")),
    "per_position": Example(_answer("return entropy <= bound"), ("case '", "expected")),
    "strict": Example(_answer("h, order = torch.sort(entropy, dim=-1)\nkeep = torch.cumsum(h, dim=-1) - h < bound\n"
                              "return torch.zeros_like(keep).scatter_(-1, order, keep)"),
                      ("bound 0", "expected accepted, got rejected")),
    "own_entropy_counted": Example(_answer("h, order = torch.sort(entropy, dim=-1)\n"
                                           "keep = torch.cumsum(h, dim=-1) <= bound\n"
                                           "return torch.zeros_like(keep).scatter_(-1, order, keep)"),
                                   ("distinct values", "expected accepted, got rejected")),
    "sorted_order": Example(_answer("h, order = torch.sort(entropy, dim=-1)\nreturn torch.cumsum(h, dim=-1) - h <= bound"),
                            ("case 'one row, three accepted'",)),
    "batch_flattened": Example(_answer("h, order = torch.sort(entropy.reshape(-1))\n"
                                       "keep = torch.cumsum(h, dim=0) - h <= bound\n"
                                       "return torch.zeros_like(keep).scatter_(0, order, keep).reshape(entropy.shape)"),
                               ("batch > 1", "case '3 rows, different cuts'")),
    "int_mask": Example(_answer("h, order = torch.sort(entropy, dim=-1)\nkeep = torch.cumsum(h, dim=-1) - h <= bound\n"
                                "return torch.zeros_like(keep).scatter_(-1, order, keep).int()"),
                        ("dtype int32; expected bool",)),
}


def _cases() -> list[tuple[str, str, torch.Tensor, float]]:
    """(group, label, entropy [B, L] float32, bound): deterministic (seeded)."""
    g = torch.Generator().manual_seed(1234)
    t = lambda rows: torch.tensor(rows, dtype=torch.float32)          # noqa: E731
    cases = [
        ("distinct values", "one row, three accepted", t([[0.5, 0.05, 0.3, 0.02, 0.9]]), 0.1),
        ("distinct values", "one row, one accepted", t([[0.7, 0.4, 0.9, 0.6]]), 0.1),
        ("distinct values", "one position", t([[2.5]]), 0.1),
        ("ties", "tied low entropies", t([[0.2, 0.05, 0.05, 0.3, 0.05]]), 0.1),
        ("ties", "tie at the cut", t([[0.25, 0.5, 0.25, 0.125, 0.25]]), 0.4),
        ("all-equal rows", "all 0.3", t([[0.3] * 6]), 0.5),
        ("all-equal rows", "all zero", t([[0.0] * 6]), 0.1),
        ("bound 0", "bound 0, distinct", t([[0.4, 0.1, 0.3]]), 0.0),
        ("bound 0", "bound 0, zeros first", t([[0.0, 0.7, 0.0, 0.2]]), 0.0),
        ("exactly at the bound", "prefix sum == bound", t([[0.25, 0.25, 0.5, 1.0]]), 0.5),
        ("exactly at the bound", "prefix sum just above", t([[0.25, 0.25, 0.5, 1.0]]), 0.499),
        ("large bounds", "bound 1e9", t([[3.0, 1.0, 2.0, 0.5]]), 1e9),
        ("large bounds", "bound = total", t([[0.5, 0.25, 0.125, 0.125]]), 1.0),
        ("batch > 1", "3 rows, different cuts", t([[0.5, 0.05, 0.3, 0.02], [0.01, 0.02, 0.03, 0.04],
                                                   [0.9, 0.8, 0.7, 0.6]]), 0.1),
        ("batch > 1", "2 rows of 8", torch.rand(2, 8, generator=g) * 0.2, 0.15),
    ]
    for i in range(40):                                       # random shapes and scales
        B, L = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 33, (1,), generator=g))
        scale = [0.05, 0.5, 3.0][i % 3]
        h = torch.rand(B, L, generator=g) * scale
        if i % 4 == 0:
            h = torch.round(h * 8) / 8                        # dyadic values: ties and exact sums
        bound = float(torch.rand(1, generator=g)) * float(h.sum(-1).max()) * 0.6
        cases.append(("random", f"random #{i + 1}, shape [{B}, {L}]", h, round(bound, 6)))
    return cases


def reference() -> None:
    """The reference's real generation and the entropies it saw (once per grading session)."""
    _reference_run()


def answer(fn, args: dict) -> dict:
    """Inside the jail: the learner's rule on one case (lists of floats in); out, as data only: its mask (lists of
    bools) and its input as it is after the call. Whether the input changed is judged by the check, never here."""
    h = torch.tensor(args["entropy"], dtype=torch.float32)
    given = h.clone()
    got = fn(given, float(args["bound"]))
    out = {"input_after": given.tolist()}
    if isinstance(got, torch.Tensor):
        out["tensor"] = {"dtype": str(got.dtype).removeprefix("torch."), "shape": list(got.shape),
                         "data": got.tolist() if got.numel() <= 65536 else None}
    else:
        out["type"] = type(got).__name__
    return out


@functools.lru_cache(maxsize=1)
def _reference_run(max_cases: int = 6) -> tuple[tuple[str, ...], list]:
    """The library's real PP=1 generation of the shipped model (prompts 451, 907, 118; seed 0): its texts, and the
    first entropy tensors [1, 8] its accept rule saw (with their bounds)."""
    seen = []
    original = primitives.entropy_bound_accept

    def spy(entropy, bound):
        if len(seen) < max_cases:
            seen.append((entropy.clone(), float(bound)))
        return original(entropy, bound)
    primitives.entropy_bound_accept = spy
    try:
        texts = tuple(_generate())
    finally:
        primitives.entropy_bound_accept = original
    return texts, seen


def _reference_texts() -> tuple[str, ...]:
    return _reference_run()[0]


def _real_entropies():
    return _reference_run()[1]


def _generate(prompts=("451", "907", "118"), seed: int = 0) -> list[str]:
    engine = LLMEngine.from_engine_args(Trace(enabled=False), seed=seed)
    outs = engine.generate([task.encode(p) for p in prompts], max_tokens=task.MAX_CANVASES * task.CANVAS_LENGTH,
                           seeds=[seed + i for i in range(len(prompts))])
    return [task.decode(o.output_token_ids) for o in outs]


def _ask(learner, code, h: torch.Tensor, bound: float, what: str) -> dict:
    return learner.call(ABOUT.id, {"entropy": h.tolist(), "bound": bound}, what)


def _mask(value: dict, h: torch.Tensor) -> tuple[str | None, torch.Tensor | None]:
    """The learner's answer (plain data from the jail) as a bool mask, or why it is not one."""
    shape = list(h.shape)
    if not _unchanged(value.get("input_after"), h):          # judged here, from the input as the call left it
        return "changed its input `entropy` in place (sort into a new tensor instead)", None
    t = value.get("tensor")
    if not isinstance(t, dict):
        return f"returned a {str(value.get('type'))[:40]}; expected a bool tensor of shape {shape}", None
    if t.get("dtype") != "bool":
        return (f"returned dtype {str(t.get('dtype'))[:20]}; expected bool "
                f"(the sampler uses it in torch.where)"), None
    if t.get("shape") != shape:
        return f"returned shape {str(t.get('shape'))[:40]}; expected {shape} (one flag per position)", None
    data = t.get("data")
    if not (isinstance(data, list) and len(data) == shape[0] and all(
            isinstance(row, list) and len(row) == shape[1] and all(isinstance(x, bool) for x in row) for row in data)):
        return "answered with data that is not a bool mask of its shape", None
    return None, torch.tensor(data, dtype=torch.bool)


def _unchanged(after, h: torch.Tensor) -> bool:
    """The learner's process sent back its input as it was after the call: equal to what was sent (same shape,
    every value equal as float32, NaN where NaN was)?"""
    try:
        seen = torch.tensor(after, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError):
        return False
    sent = h.to(torch.float32)
    if seen.shape != sent.shape or not torch.equal(seen.isnan(), sent.isnan()):
        return False
    return torch.equal(torch.where(seen.isnan(), 0.0, seen), torch.where(sent.isnan(), 0.0, sent))


def same_up_to_ties(got: torch.Tensor, want: torch.Tensor, h: torch.Tensor) -> bool:
    """``got`` equals ``want`` but perhaps for which of several equal entropies at the cut are accepted: per row,
    as many accepted positions of every entropy value (all below the cut, none above, and the count at it)."""
    if torch.equal(got, want):
        return True
    for row in range(h.shape[0]):
        values, which = torch.unique(h[row], return_inverse=True)
        ones = torch.ones_like(h[row], dtype=torch.long)
        per_value = lambda mask: torch.zeros(len(values), dtype=torch.long).index_add_(0, which, ones * mask)  # noqa: E731
        if not torch.equal(per_value(got[row].long()), per_value(want[row].long())):
            return False
    return True


def _compare(learner, code, label: str, h: torch.Tensor, bound: float) -> tuple[str | None, dict]:
    """None if equal; else the reason and the case for the table (compared here, never in the jail)."""
    want = library_rule(h, bound)
    value = _ask(learner, code, h, bound, f"{code.function}(entropy of shape {list(h.shape)}, bound={bound:g}) "
                                         f"[case {label!r}]")
    case = {"label": label, "entropy": h.tolist(), "bound": bound, "expected": want.tolist(), "got": None}
    why, got = _mask(value, h)
    if why:
        return why, case
    case["got"] = got.tolist()
    if same_up_to_ties(got, want, h):
        return None, case
    row, col = [int(x) for x in (got != want).nonzero()[0]]
    w = bool(want[row, col])
    return (f"row {row}, position {col} (entropy {float(h[row, col]):.4g}, bound {bound:g}): expected "
            f"{'accepted' if w else 'rejected'}, got {'rejected' if w else 'accepted'}"), {**case, "row": row,
                                                                                         "col": col}


def grade(learner, code):
    """The verdict: every case group, then the whole generation with the learner's rule in the sampler."""
    checks, picture, groups = [], {}, {}
    for group, label, h, bound in _cases():
        groups.setdefault(group, []).append((label, h, bound))
    real = [(f"real step {i + 1}", h, b) for i, (h, b) in enumerate(_real_entropies())]
    groups["real entropies (prompt 451)"] = real
    total = 0
    for group, cases in groups.items():
        failure = None
        for label, h, bound in cases:
            total += 1
            with learner_phase(f"calling {code.function} on case {label!r}"):
                why, case = _compare(learner, code, label, h, bound)
            if why:
                failure = (label, why, case)
                break
        if failure:
            label, why, case = failure
            checks.append(Check(group, False, f"case {label!r}: {why}"))
            picture.setdefault("case", case)
            picture["case"].setdefault("reason", why)
        else:
            checks.append(Check(group, True, f"{len(cases)} case{'s' * (len(cases) != 1)} equal"))
    if all(c.passed for c in checks):
        checks.append(_generation_check(learner, code))
    return verdict(ABOUT.id, checks, figures={"cases": total, "calls to your function": learner.calls},
                   picture=picture)


def _generation_check(learner, code) -> Check:
    """The shipped model generates with the learner's rule inside the real sampler: same text as the library.
    The sampler's calls go over the pipe to the jail; the masks come back as data."""
    want = list(_reference_texts())
    original = primitives.entropy_bound_accept

    def rule(h, b):
        why, mask = _mask(_ask(learner, code, h, float(b), f"{code.function} inside the sampler"), h)
        if why:
            raise LearnerError("bad-value", f"{code.function} inside the sampler {why}")
        return mask
    primitives.entropy_bound_accept = rule
    try:
        with learner_phase(f"generating with your {code.function} in the sampler", seconds=30):
            got = _generate()
    except RankFailure as exc:                     # the engine reports a rank's exception; surface the learner's
        if isinstance(exc.cause, (LearnerError, LearnerLimit)):
            raise exc.cause from None
        raise
    finally:
        primitives.entropy_bound_accept = original
    if got == want:
        return Check("whole generation", True, f"3 prompts spelled as with the library's rule: {got[0]!r}, ...")
    i = next(k for k in range(len(want)) if got[k] != want[k])
    return Check("whole generation", False, f"prompt {['451', '907', '118'][i]!r}: {got[i]!r}, expected {want[i]!r}")


def picture(report) -> str:
    """The panel's picture of a failure: the first differing case as a table: per position the entropy, its
    place in ascending order, the sum of the smaller entropies (what the rule compares with the bound), expected
    and got."""
    case = report.picture.get("case")
    if not case:
        return ""
    h = torch.tensor(case["entropy"], dtype=torch.float32)
    row = case.get("row", 0)
    sorted_h, order = torch.sort(h[row])
    before = torch.empty_like(sorted_h).scatter_(0, order, torch.cumsum(sorted_h, 0) - sorted_h)
    place = torch.empty_like(order).scatter_(0, order, torch.arange(len(order)))
    L = h.shape[1]
    show = range(L) if L <= 16 else range(max(0, case.get("col", 0) - 8), min(L, case.get("col", 0) + 8))
    exp, got = case["expected"][row], (case["got"][row] if case.get("got") else None)
    yes = lambda b: "✓ accept" if b else "· reject"               # noqa: E731

    def cells(values, diff=lambda j: False):
        return "".join(f'<td class="{"xp-ws-diff" if diff(j) else ""}">{values(j)}</td>' for j in show)
    def differs(j):
        return got is not None and got[j] != exp[j]
    rows = [f"<tr><th>position</th>{cells(lambda j: j)}</tr>",
            f"<tr><th>entropy</th>{cells(lambda j: f'{float(h[row, j]):.4g}')}</tr>",
            f"<tr><th>place in ascending order</th>{cells(lambda j: int(place[j]))}</tr>",
            f"<tr><th>sum of the entropies sorted before it</th>{cells(lambda j: f'{float(before[j]):.4g}')}</tr>",
            f"<tr><th>expected (sum before ≤ bound)</th>{cells(lambda j: yes(exp[j]), differs)}</tr>"]
    if got is not None:
        rows.append(f"<tr><th>your function</th>{cells(lambda j: yes(got[j]) + (' ≠' if differs(j) else ''), differs)}</tr>")
    title = (f'<div class="xp-ws-note"><b>case {text_html(case["label"])}</b>: entropy of shape {list(h.shape)}, '
             f'bound {case["bound"]:g}; row {row}' + (f" of {h.shape[0]}" if h.shape[0] > 1 else "")
             + (f", positions {show.start}..{show.stop - 1} of {L}" if L > 16 else "") + "</div>")
    return title + f'<div class="xp-ws-scroll"><table class="xp-ws-case" data-row="{row}">{"".join(rows)}</table></div>'
