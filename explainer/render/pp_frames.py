"""Which events of a PP run get a stepper frame, and the one-line caption of each (pure; read from a ``Trace``)."""

from __future__ import annotations

import re

from explainer.model import task
from explainer.render.pp_trace import diverged_fields, received, user_events
from explainer.trace import Trace

__all__ = ["frame_caption", "key_events"]


# ---- captions ------------------------------------------------------------------------------------------
def frame_caption(trace: Trace, event_index: int, note: str = "") -> str:
    """What happens at this event, in one line (the stepper shows it as "frame k of N · …")."""
    e = trace.events[event_index]
    who = "engine" if e.rank is None else f"rank {e.rank}"
    head = f"{'warmup ' if e.warmup else ''}engine step {e.step} · {who} {e.phase}"
    red = diverged_fields(trace, event_index)
    got = received(trace, event_index)
    emitted = [t for ids in e.data.get("emitted", {}).values() for t in ids]
    if e.data.get("error"):
        what = f"✗ {e.data['error']['type']}"
    elif red:
        what = f"≠ reads {', '.join(red)}, which differ from rank {trace.owner_rank}'s"
    elif e.transfers:
        what = (f"sends {', '.join(dict.fromkeys(t.name for t in e.transfers))} → rank "
                f"{', '.join(str(r) for r in dict.fromkeys(t.receiver for t in e.transfers))}")
    elif got:
        what = f"receives {', '.join(dict.fromkeys(t.name for t in got))} from rank {got[0].sender}"
    elif emitted:
        what = f"emits '{task.decode(emitted)}'"
    else:
        what = e.detail if len(e.detail) <= 70 else e.detail[:67] + "…"
    return f"{head}: {what}" + (f" · {note}" if note else "")


# ---- frame selection ----------------------------------------------------------------------------------
def _signature(trace: Trace, step_events: list) -> tuple:
    sig = []
    for e in step_events:
        emitted = bool(e.data.get("emitted")) or bool(e.data.get("error"))
        sig.append((e.rank, e.phase, re.sub(r"[\d.]+", "#", e.detail), tuple(diverged_fields(trace, e.index)), emitted))
    return tuple(sig)


def key_events(trace: Trace, max_frames: int = 100) -> list[tuple[int, str]]:
    """(event index, note) for the events worth a frame: transfers, reads (prepare), samples, the
    back-channel receive (what a non-last rank gets) and errors,
    user steps only (warmup only if the run never got past it). Runs of > 3 look-alike engine steps keep
    their first two and last step; the frame after a fold says which steps were folded."""
    events = user_events(trace)
    keep = [e for e in events if e.transfers or e.reads or e.phase in ("sample", "receive") or e.data.get("error")]
    steps: dict[tuple, list] = {}
    for e in keep:
        steps.setdefault((e.warmup, e.step), []).append(e)
    keys = list(steps)
    sigs = [_signature(trace, steps[k]) for k in keys]
    chosen: list[tuple[int, str]] = []
    i = 0
    while i < len(keys):
        j = i
        while j + 1 < len(keys) and sigs[j + 1] == sigs[i]:
            j += 1
        run = keys[i: j + 1]
        if len(run) > 3:
            folded = f"engine steps {run[2][1]}..{run[-2][1]} folded: same pattern as step {run[1][1]}"
            picks = [(run[0], ""), (run[1], ""), (run[-1], folded)]
        else:
            picks = [(k, "") for k in run]
        for k, note in picks:
            chosen += [(e.index, note if n == 0 else "") for n, e in enumerate(steps[k])]
        i = j + 1
    if len(chosen) > max_frames:                  # still too many: keep the first and last, thin the middle
        n = len(chosen)
        chosen = [chosen[round(k * (n - 1) / (max_frames - 1))] for k in range(max_frames)]
    return chosen
