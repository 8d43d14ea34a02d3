"""Benchmarks measured side by side in one run and printed as ratios (each row names its goal; README lists them).

One module per area (``sampler``, ``comm``, ``startup``, ``widgets``, ``workshop``, ``room``), each exposing
``run(quick: bool = False) -> list[Row]``. ``python -m explainer bench`` runs every present module.
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


AREAS = ("sampler", "comm", "startup", "widgets", "workshop", "room")
