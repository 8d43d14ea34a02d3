"""``ScenarioResult``: what every scenario reports, and the shape of ``python -m explainer scenario NAME --json``.

At least ``scenario``, ``pp_size``, ``backend``, ``outcome`` (one of ``OUTCOMES``), ``error`` (``{type, message}``
or null), ``processes_started``, ``output_text``, ``first_divergence`` (``{step, rank, fields}`` or null) and
``bytes_per_step`` (per tensor name); ``details`` holds each story's extras.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("ok", "startup-rejected", "warmup-crash", "runtime-error", "diverged")


@dataclass
class ScenarioResult:
    scenario: str
    pp_size: int
    backend: str
    outcome: str
    error: dict | None = None                 # {"type": ..., "message": ...}
    processes_started: int = 0
    output_text: str | None = None
    first_divergence: dict | None = None      # {"step", "rank", "fields", ...}
    bytes_per_step: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)   # scenario-specific extras
    summary: str = ""                         # readable per-rank summary (non-JSON output)
    trace: Any = dataclasses.field(default=None, repr=False, compare=False)  # explainer.trace.Trace

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")

    def to_json(self) -> dict:
        data = dataclasses.asdict(dataclasses.replace(self, trace=None))
        data.pop("trace")
        data.pop("summary")
        return data
