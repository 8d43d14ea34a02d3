"""A PP run as its trace records it, read for the renderers: the user steps, what crossed ranks and how many bytes
per step, what each rank read, the state read but never sent, the fields that diverged at an event, and what
reached the acting rank of an event."""

from __future__ import annotations

from collections import Counter

from explainer.render.pp_style import STATE_FIELDS
from explainer.trace import Trace

__all__ = ["user_events", "crossing", "reads_by_rank", "never_sent", "diverged_fields", "received"]


def user_events(trace: Trace) -> list:
    """The user steps' rank events (a run that crashed in warmup: its warmup events)."""
    events = [e for e in trace.events if e.rank is not None and not e.warmup]
    return events or [e for e in trace.events if e.rank is not None]       # a warmup crash: warmup only


def crossing(trace: Trace) -> dict[str, dict]:
    """Per tensor name that crossed ranks: dtype, the most common shape, sender/receiver, op, bytes per step."""
    events = user_events(trace)
    warm = bool(events) and all(e.warmup for e in events)
    per_step = trace.bytes_per_step(include_warmup=warm)
    seen: dict[str, list] = {}
    for e in events:
        for t in e.transfers:
            seen.setdefault(t.name, []).append(t)
    out = {}
    for name, ts in seen.items():
        shape = Counter(tuple(t.shape) for t in ts).most_common(1)[0][0]
        t = ts[0]
        out[name] = {"dtype": t.dtype, "shape": list(shape), "op": t.op, "sender": t.sender, "receiver": t.receiver,
                     "bytes": per_step.get(name, 0)}
    return out


def reads_by_rank(trace: Trace) -> dict[int, set[str]]:
    """Rank -> every state field its user steps read."""
    out: dict[int, set[str]] = {}
    for e in user_events(trace):
        for fields in e.reads.values():
            out.setdefault(e.rank, set()).update(fields)
    return out


def never_sent(trace: Trace) -> list[str]:
    """State that a non-owner rank reads but that no transfer of the run carried."""
    owner, sent = trace.owner_rank, set(crossing(trace))
    read = set().union(*[f for r, f in reads_by_rank(trace).items() if r != owner] or [set()])
    return [f for f in STATE_FIELDS if f in read and f not in sent]


def _divergent(trace: Trace) -> dict[int, list[dict]]:
    """Event index -> divergences at it (cached on the trace: frames ask for it many times)."""
    cache = getattr(trace, "_xp_divergent", None)
    if cache is None or cache[0] != len(trace.events):
        by_event: dict[int, list[dict]] = {}
        for d in trace.divergences():                 # user steps, as ``first_divergence``
            by_event.setdefault(d["event"], []).append(d)
        cache = (len(trace.events), by_event)
        trace._xp_divergent = cache
    return cache[1]


def diverged_fields(trace: Trace, event_index: int) -> list[str]:
    """Fields read at this event by a non-owner rank whose value differs from the owner's (view order)."""
    found = [f for d in _divergent(trace).get(event_index, []) for f in d["fields"]]
    return list(dict.fromkeys(found))         # the order ``Trace.divergences`` reports them in


def received(trace: Trace, i: int) -> list:
    """Transfers that reached the acting rank of event ``i`` (recorded on the sender's earlier event)."""
    e = trace.events[i]
    if e.phase not in ("recv", "receive"):
        return []
    for prev in reversed(trace.events[:i]):
        if (prev.step, prev.warmup) != (e.step, e.warmup):
            break
        got = [t for t in prev.transfers if t.receiver == e.rank]
        if got:
            return got
    return []
