"""The two-host picture of notebook 5 as one stepped diagram: a frame per stored run, the same layout each time,
so what changes between "before #40150", "after #40150" and the PP engine is what the eye sees change.

Frames are rendered up front from the stored records (``explainer.render.hosts.hosts_dot``) into a ``Stepper``,
so the picture steps on a static page too; the box has the height of the tallest frame, so the page does not jump.
"""

from __future__ import annotations

import re
from typing import Mapping

import graphviz

from explainer.render.dot_picture import fit_svg
from explainer.render.hosts import hosts_dot, outcome_text
from explainer.widgets.stepper import Stepper

__all__ = ["hosts_stepper"]

CAPTION_PX = 48          # the caption line and the controls above the frame


def _frame(record: Mapping) -> tuple[str, float]:
    """One record -> (responsive SVG, its natural height in px)."""
    svg = graphviz.Source(hosts_dot(record)).pipe(format="svg").decode()
    m = re.search(r'<svg width="[\d.]+pt" height="([\d.]+)pt"', svg)
    return fit_svg(svg), (float(m.group(1)) * 4 / 3 if m else 400.0)


def hosts_stepper(records: Mapping[str, Mapping]) -> Stepper:
    """One frame per named record: the hosts, their ident, /dev/shm and each rank's path and outcome."""
    if not records:
        raise ValueError("hosts_stepper needs at least one record (got 0)")
    frames, heights, captions = [], [], []
    for name, record in records.items():
        svg, height = _frame(record)
        frames.append(f'<div class="xp-hosts-frame" style="max-width:100%">{svg}</div>')
        heights.append(height)
        captions.append(f"{name}: {outcome_text(record)[1]}")
    return Stepper(frames, description="run", captions=captions, bookmarks={n: k for k, n in enumerate(records)},
                   height=int(max(heights)) + CAPTION_PX, interval_ms=1500)
