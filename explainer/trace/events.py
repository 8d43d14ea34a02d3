"""The trace of a run (Seam 4): ordered events, the tensors they moved, and each rank's view of the state.

Every runner registers a *view source* (``Trace.attach(rank, fn)``); each ``record`` snapshots the acting
rank's view, and ``Event.views`` maps every rank to its latest snapshot (unchanged ranks share the
previous dict, so a trace stays cheap). A view is small and JSON-able: per request, the canvas ids,
``draft_tokens``, ``is_encoder_phase``, the norm of ``self_conditioning_embeds``, ``step`` and
``num_computed_tokens``.

Drivers stamp events with their logical clock (``set_tick``; ``data["tick"]``: one stage forward per
tick), from which ``trace.timeline.pipeline_timeline`` draws ranks x time, bubbles and transfers.

``first_divergence()`` finds the first event at which a rank that does not own the diffusion state (any
rank but the last, where the sampler lives) *reads* a field whose value differs from the owner's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

PHASES = ("startup-check", "prepare", "forward", "send", "recv", "sample", "broadcast", "receive", "warmup",
          "consume")
EXECUTE_PHASES = ("consume", "prepare", "recv", "forward", "send")   # a rank's execute_model half of a step
SAMPLE_PHASES = ("sample", "broadcast", "receive")          # its sample_tokens half


@dataclass
class Transfer:
    """One tensor crossing ranks: recorded once, on the sender's event."""
    sender: int
    receiver: int
    name: str
    dtype: str
    shape: list[int]
    bytes: int
    op: str = "send"          # "send" (point to point) or "broadcast"

    @classmethod
    def of_tensor(cls, sender: int, receiver: int, name: str, tensor, op: str = "send") -> "Transfer":
        """The record of ``tensor`` (a torch tensor: dtype, shape, bytes) crossing from ``sender`` to ``receiver``."""
        return cls(sender, receiver, name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape),
                   tensor.numel() * tensor.element_size(), op)


@dataclass
class Event:
    index: int
    step: int                 # engine step; warmup steps are numbered on their own (``warmup`` True)
    rank: int | None          # None: the engine process itself (startup check, scheduling)
    phase: str
    detail: str = ""
    transfers: list[Transfer] = field(default_factory=list)
    views: dict[int, dict] = field(default_factory=dict, repr=False)   # rank -> {req_id: {field: value}}
    reads: dict[str, list[str]] = field(default_factory=dict)          # req_id -> state fields read here
    warmup: bool = False
    data: dict[str, Any] = field(default_factory=dict)                 # phase extras (emitted tokens, error)


class Trace:
    def __init__(self, meta: dict | None = None, enabled: bool = True):
        self.meta: dict[str, Any] = dict(meta or {})
        self.enabled = enabled            # False: record nothing (bulk runs such as the accuracy command)
        self.events: list[Event] = []
        self.step = 0
        self.warmup = False
        self.tick: int | None = None      # the driver's logical clock (one stage forward = one tick)
        self._sources: dict[int, Callable[[], dict]] = {}
        self._views: dict[int, dict] = {}

    # --- recording ---
    def attach(self, rank: int, view_fn: Callable[[], dict]) -> None:
        """Register how to snapshot ``rank``'s state (a runner's ``view``)."""
        if not self.enabled:
            return
        self._sources[rank] = view_fn
        self._views = {**self._views, rank: view_fn()}        # events keep the dict they were given

    def set_step(self, step: int, warmup: bool = False) -> None:
        self.step, self.warmup = step, warmup

    def set_tick(self, tick: int | None) -> None:
        """Stamp the following events with ``data["tick"]`` (the pipeline timeline's time axis)."""
        self.tick = tick

    def record(self, rank: int | None, phase: str, detail: str = "", *, transfers=(), reads=None,
               data=None) -> Event | None:
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r} is not one of {PHASES}")
        if not self.enabled:
            return None
        if rank in self._sources:
            self._views = {**self._views, rank: self._sources[rank]()}
        data = dict(data or {})
        if self.tick is not None:
            data.setdefault("tick", self.tick)
        event = Event(len(self.events), self.step, rank, phase, detail, list(transfers), self._views,
                      dict(reads or {}), self.warmup, data)
        self.events.append(event)
        return event

    # --- queries ---
    def select(self, *, step: int | None = None, rank: int | None = None, phase: str | None = None,
               warmup: bool | None = False) -> list[Event]:
        return [e for e in self.events
                if (step is None or e.step == step) and (rank is None or e.rank == rank)
                and (phase is None or e.phase == phase) and (warmup is None or e.warmup == warmup)]

    @property
    def owner_rank(self) -> int:
        return int(self.meta.get("pp_size", 1)) - 1

    def divergences(self, include_warmup: bool = False):
        """Every read, on a non-owner rank, of a field whose value differs from the owner's, in order.

        The owner's value is what the owner (last) rank itself reads in the same step (if the owner never
        got there, its latest view). Yields ``{step, rank, fields, request, event, phase, warmup, values}``.
        """
        owner = self.owner_rank
        owner_reads = {(e.step, e.warmup): e.views.get(owner, {})
                       for e in self.events if e.rank == owner and e.reads}
        for e in self.events:
            if e.rank is None or e.rank == owner or not e.reads or (e.warmup and not include_warmup):
                continue
            theirs_all = owner_reads.get((e.step, e.warmup), e.views.get(owner, {}))
            mine_all = e.views.get(e.rank, {})
            for req, fields in e.reads.items():
                mine, theirs = mine_all.get(req), theirs_all.get(req)
                if mine is None or theirs is None:
                    continue
                differ = [f for f in fields if mine.get(f) != theirs.get(f)]
                if differ:
                    yield {"step": e.step, "rank": e.rank, "fields": differ, "request": req,
                           "event": e.index, "phase": e.phase, "warmup": e.warmup,
                           "values": {f: {"rank": mine.get(f), "owner": theirs.get(f)} for f in differ}}

    def first_divergence(self, include_warmup: bool = False) -> dict | None:
        """The first event at which a non-owner rank reads a field that differs from the owner's, or None."""
        return next(self.divergences(include_warmup), None)

    def step_outputs(self) -> dict[int, dict[str, list[int]]]:
        """Tokens each (non-warmup) engine step emitted, per request, from the last rank's sample events."""
        out: dict[int, dict[str, list[int]]] = {}
        for e in self.select(phase="sample"):
            out.setdefault(e.step, {}).update(e.data.get("emitted", {}))
        return out

    def first_output_divergence(self, reference: "Trace") -> int | None:
        """The first engine step whose emitted tokens differ from ``reference`` (e.g. the PP=1 run)."""
        mine, ref = self.step_outputs(), reference.step_outputs()
        for step in sorted(set(mine) | set(ref)):
            if mine.get(step, {}) != ref.get(step, {}):
                return step
        return None

    def bytes_per_step(self, include_warmup: bool = False) -> dict[str, int]:
        """Per tensor name, the median over engine steps of the bytes sent in that step (0-byte steps count).
        The async schedule's empty steps (nothing but a FIFO ``consume``) do not count."""
        per_step: dict[int, dict[str, int]] = {}
        ran = {(e.warmup, e.step) for e in self.events if e.rank is not None and e.phase != "consume"}
        for e in self.events:
            if e.rank is None or (e.warmup and not include_warmup) or (e.warmup, e.step) not in ran:
                continue
            row = per_step.setdefault(e.step, {})
            for t in e.transfers:
                row[t.name] = row.get(t.name, 0) + t.bytes
        names = sorted({n for row in per_step.values() for n in row})
        result = {}
        for name in names:
            values = sorted(row.get(name, 0) for row in per_step.values())
            result[name] = values[len(values) // 2]
        return result

    # --- serialisation: each event stores only its own rank's view; views are rebuilt on load ---
    def to_json(self) -> dict:
        events = []
        for e in self.events:
            events.append({
                "index": e.index, "step": e.step, "rank": e.rank, "phase": e.phase, "detail": e.detail,
                "transfers": [asdict(t) for t in e.transfers], "reads": e.reads, "warmup": e.warmup,
                "data": e.data, "view": e.views.get(e.rank) if e.rank is not None else None,
            })
        initial = self.events[0].views if self.events else self._views
        return {"meta": self.meta, "initial_views": {str(r): v for r, v in initial.items()}, "events": events}

    def append_rank_traces(self, parts: list[dict]) -> None:
        """Merge per-rank traces (each rank process's ``to_json()``, rank 0 first) into this one, in the
        in-process backend's lockstep order: per (warmup, step), engine events (rank 0's copy), then the
        ``execute_model`` half in rank order, then the ``sample_tokens`` half from the last rank down."""
        ranks = [Trace.from_json(p) for p in parts]
        keys: dict[tuple, None] = {}
        for t in ranks:
            keys.update({(e.warmup, e.step): None for e in t.events})
        views = dict(self.events[-1].views if self.events else self._views)
        for t in ranks:
            views.update({r: v for r, v in (t.events[0].views if t.events else {}).items() if r not in views})
            for name, value in t.meta.items():
                if isinstance(value, dict):
                    self.meta.setdefault(name, {}).update(value)
        for key in keys:
            of = [[e for e in t.events if (e.warmup, e.step) == key] for t in ranks]
            ordered = [e for e in of[0] if e.rank is None]
            ordered += [e for evs in of for e in evs if e.rank is not None and e.phase in EXECUTE_PHASES]
            ordered += [e for evs in reversed(of) for e in evs if e.rank is not None and e.phase in SAMPLE_PHASES]
            for e in ordered:
                if e.rank is not None:
                    views = {**views, e.rank: e.views.get(e.rank, {})}
                self.events.append(Event(len(self.events), e.step, e.rank, e.phase, e.detail, e.transfers, views,
                                         e.reads, e.warmup, e.data))

    @classmethod
    def from_json(cls, data: dict | str) -> "Trace":
        if isinstance(data, str):
            data = json.loads(data)
        trace = cls(data.get("meta"))
        views = {int(r): v for r, v in data.get("initial_views", {}).items()}
        for d in data["events"]:
            if d.get("view") is not None:
                views = {**views, d["rank"]: d["view"]}
            trace.events.append(Event(
                d["index"], d["step"], d["rank"], d["phase"], d.get("detail", ""),
                [Transfer(**t) for t in d.get("transfers", [])], views, d.get("reads", {}),
                d.get("warmup", False), d.get("data", {})))
        return trace
