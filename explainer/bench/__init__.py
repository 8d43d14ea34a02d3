"""Benchmarks measured side by side in one run and printed as ratios (each row names its goal; README lists them).

One module per area (``sampler``, ``comm``, ``startup``, ``widgets``, ``workshop``, ``room``, ``hub``), each exposing
``run(quick: bool = False) -> list[Row]`` (``hub`` also takes ``learners``: ``--learners N``). ``python -m explainer
bench`` runs every present module but the ``OPT_IN`` ones: ``hub`` runs only when named (``--only hub``: as root
after ``make hub``; it starts a hub and N learners' servers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Row:
    area: str
    name: str            # what was measured
    ours: float          # our figure, in `unit`
    baseline: float | None   # the reference figure measured in the same run (None: absolute goal)
    unit: str
    ratio: float | None  # the figure the goal is stated in (e.g. speedup)
    goal: str            # e.g. ">= 3x", "< 30 ms"
    met: bool

    def to_json(self) -> dict:
        return asdict(self)


AREAS = ("sampler", "comm", "startup", "widgets", "workshop", "room", "hub")
OPT_IN = ("hub",)
