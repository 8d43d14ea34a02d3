"""The pipeline timeline of a run, read from its trace: ranks x engine time (ticks), bubbles, transfers.

Time is the driver's logical clock (``Trace.set_tick``): one tick = one stage forward of one step (the
last rank's sampling and broadcast are folded into its forward's tick). A real run's wall-clock times
would add noise, not information, at this scale; the tick order is exactly the schedule's.

* a **forward** cell: rank r ran its layers for step s at tick t (with the requests in that step);
* a **bubble**: a (rank, tick) inside the run's window where the rank ran no forward;
* **transfers**: ``IntermediateTensors`` rank r -> r+1 (tick of the send -> tick of the receive), the
  back-channel broadcast from the last rank (tick it left -> tick it landed on each rank), and, on the
  async schedule, the tick at which each rank *consumed* it (``pp_size`` steps later).

``bubble_fraction`` = bubbles / (pp_size x window length), window = first to last forward tick of the
user steps (warmup excluded).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from explainer.trace.events import Trace


@dataclass
class Cell:
    rank: int
    tick: int
    step: int
    req_ids: list[str]
    detail: str = ""


@dataclass
class Arrow:
    kind: str                 # "intermediate" | "back-channel" | "consume"
    step: int
    src_rank: int
    dst_rank: int
    src_tick: int
    dst_tick: int
    names: list[str] = field(default_factory=list)
    bytes: int = 0


@dataclass
class PipelineTimeline:
    pp_size: int
    schedule: str
    start: int                # first tick of the window
    end: int                  # one past the last tick
    forwards: list[Cell]
    arrows: list[Arrow]

    @property
    def length(self) -> int:
        return max(self.end - self.start, 0)

    @property
    def busy(self) -> int:
        return len({(c.rank, c.tick) for c in self.forwards})

    @property
    def bubbles(self) -> list[tuple[int, int]]:
        busy = {(c.rank, c.tick) for c in self.forwards}
        return [(r, t) for r in range(self.pp_size) for t in range(self.start, self.end) if (r, t) not in busy]

    @property
    def bubble_fraction(self) -> float:
        total = self.pp_size * self.length
        return 0.0 if total == 0 else len(self.bubbles) / total

    def to_json(self) -> dict:
        return {"pp_size": self.pp_size, "schedule": self.schedule, "start": self.start, "end": self.end,
                "busy": self.busy, "bubbles": len(self.bubbles), "bubble_fraction": self.bubble_fraction,
                "forwards": [c.__dict__ for c in self.forwards], "arrows": [a.__dict__ for a in self.arrows]}


def pipeline_timeline(trace: Trace) -> PipelineTimeline:
    """Build the timeline of ``trace``'s user steps (events stamped with a tick; warmup excluded)."""
    pp = int(trace.meta.get("pp_size", 1))
    schedule = str(trace.meta.get("pp_schedule", "sync"))
    events = [e for e in trace.events if not e.warmup and e.rank is not None and "tick" in e.data]
    prepares = {(e.rank, e.data["tick"]): list(e.reads) for e in events if e.phase == "prepare"}
    forwards = [Cell(e.rank, e.data["tick"], e.step, prepares.get((e.rank, e.data["tick"]), []), e.detail)
                for e in events if e.phase == "forward"]
    arrows: list[Arrow] = []
    recv_tick = {(e.rank, e.step): e.data["tick"] for e in events if e.phase == "recv"}
    for e in events:
        if e.phase == "send" and e.transfers:
            dst = e.transfers[0].receiver
            if (dst, e.step) in recv_tick:
                arrows.append(Arrow("intermediate", e.step, e.rank, dst, e.data["tick"], recv_tick[(dst, e.step)],
                                    [t.name for t in e.transfers], sum(t.bytes for t in e.transfers)))
        elif e.phase == "broadcast" and e.transfers:
            for dst in sorted({t.receiver for t in e.transfers}):
                mine = [t for t in e.transfers if t.receiver == dst]
                arrows.append(Arrow("back-channel", e.step, e.rank, dst, e.data["tick"], e.data["tick"],
                                    [t.name for t in mine], sum(t.bytes for t in mine)))
        elif e.phase == "consume":
            landed = e.data["consumed_step"]
            src = next((a for a in arrows if a.kind == "back-channel" and a.step == landed and a.dst_rank == e.rank),
                       None)
            arrows.append(Arrow("consume", landed, e.rank, e.rank,
                                src.dst_tick if src else e.data["tick"], e.data["tick"], list(e.data["applied"])))
    ticks = [c.tick for c in forwards]
    start, end = (min(ticks), max(ticks) + 1) if ticks else (0, 0)
    return PipelineTimeline(pp, schedule, start, end, sorted(forwards, key=lambda c: (c.tick, c.rank)), arrows)


def implied_bubble_fraction(trace: Trace) -> float:
    """What the schedule implies, from the steps alone (no ticks): sync runs each step alone, so every
    rank is busy 1 tick in pp: 1 - 1/pp. Async issues step s at tick s (one per tick) and each non-empty
    step occupies every stage once, so with B non-empty steps numbered s_first..s_last the window is
    s_last - s_first + pp ticks: 1 - B / (s_last - s_first + pp)."""
    pp = int(trace.meta.get("pp_size", 1))
    steps = sorted({e.step for e in trace.events if not e.warmup and e.phase == "forward"})
    if not steps:
        return 0.0
    if trace.meta.get("pp_schedule", "sync") == "sync":
        return 1 - 1 / pp
    return 1 - len(steps) / (steps[-1] - steps[0] + pp)
