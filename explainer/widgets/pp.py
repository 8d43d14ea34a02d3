"""The rank stepper: frames from ``render.pp_views.rank_views_html`` over the key events of a PP run, in a ``Stepper``.

Frame ``k`` (slider position ``k``) has the root ``#xp-pp-frame-{k}`` carrying ``data-event``, ``data-step``,
``data-rank``, ``data-phase`` and ``data-diverged`` (comma list of the fields read here that differ from the
last rank's, empty when none); highlighted cells are ``td.xp-diverged[data-field=...]``.
"""

from __future__ import annotations

from explainer.render.pp_frames import frame_caption, key_events
from explainer.render.pp_style import CSS
from explainer.render.pp_trace import diverged_fields
from explainer.render.pp_views import rank_views_html
from explainer.trace import Trace
from explainer.widgets.stepper import Stepper

__all__ = ["frame_events", "frame_for", "rank_frames", "rank_stepper", "frame_bookmarks"]


def frame_events(trace: Trace, max_frames: int = 100) -> list[tuple[int, str]]:
    """(event index, note) per frame; cached on the trace (the benchmark times one frame, not the selection)."""
    cache = getattr(trace, "_xp_frames", None)
    if cache is None or cache[:2] != (len(trace.events), max_frames):
        cache = (len(trace.events), max_frames, key_events(trace, max_frames))
        trace._xp_frames = cache
    return cache[2]


def frame_for(trace: Trace, k: int, *, reference: Trace | None = None, max_frames: int = 100) -> str:
    """HTML of frame ``k`` (no CSS: the stepper's header carries it)."""
    events = frame_events(trace, max_frames)
    if not 0 <= k < len(events):
        raise ValueError(f"frame {k} is outside 0..{len(events) - 1}")
    index, note = events[k]
    return rank_views_html(trace, index, reference=reference, frame=k, css=False, note=note)


def rank_frames(trace: Trace, *, reference: Trace | None = None, max_frames: int = 100) -> list[str]:
    return [frame_for(trace, k, reference=reference, max_frames=max_frames)
            for k in range(len(frame_events(trace, max_frames)))]


def frame_bookmarks(trace: Trace, max_frames: int = 100) -> dict[str, int]:
    """{label: frame} for the jump-to buttons: the first divergence, the first emitted text, the error, the end."""
    events = frame_events(trace, max_frames)
    marks: dict[str, int] = {}
    for k, (i, _) in enumerate(events):
        e = trace.events[i]
        if e.data.get("error") and "✗ error" not in marks:
            marks["✗ error"] = k
        if diverged_fields(trace, i) and "≠ first divergence" not in marks:
            marks["≠ first divergence"] = k
        if any(e.data.get("emitted", {}).values()) and "first commit" not in marks:
            marks["first commit"] = k
    if len(events) > 1:
        marks.setdefault("last frame", len(events) - 1)
    return dict(sorted(marks.items(), key=lambda kv: kv[1]))


def rank_stepper(trace: Trace, *, reference: Trace | None = None, max_frames: int = 100,
                 interval_ms: int = 900, header_id: str = "xp-pp-stepper") -> Stepper:
    """Play + slider over the key events of ``trace``: every rank's view, divergent fields highlighted."""
    events = frame_events(trace, max_frames)
    first = next((k for k, (i, _) in enumerate(events) if diverged_fields(trace, i)), None)
    header = (f'{CSS}<div class="xp-pp" id="{header_id}" data-frames="{len(events)}" '
              f'data-first-divergence-frame="{"" if first is None else first}">'
              f"{len(events)} frames over the {len(trace.events)} events of {trace.meta.get('scenario', 'the run')}"
              + (f"; the first divergence is frame {first + 1} (button ≠ first divergence)" if first is not None
                 else "; no divergence") + "</div>")
    captions = [frame_caption(trace, i, note) for i, note in events]
    return Stepper(rank_frames(trace, reference=reference, max_frames=max_frames), description="frame",
                   interval_ms=interval_ms, header=header, captions=captions,
                   bookmarks=frame_bookmarks(trace, max_frames))
