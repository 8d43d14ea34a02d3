"""The two-host picture of notebook 5 as one stepped diagram: a frame per stored run, the same layout each time,
so what changes between "before #40150", "after #40150" and the PP engine is what the eye sees change.

Frames are rendered up front from the stored records (``explainer.render.hosts.hosts_dot``) into a ``Stepper``,
so the picture steps on a static page too; the stepper's box has the height of the tallest frame, so the page does not
jump.
"""

from __future__ import annotations

import re
from typing import Mapping

import graphviz

from explainer.render.dot_picture import fit_svg
from explainer.render.hosts import hosts_dot, outcome_text
from explainer.widgets.stepper import Stepper

__all__ = ["hosts_stepper"]

CHANGED = ("h0_rank", "h1_rank", "outcome")    # what differs from run to run: each rank's path, the outcome


def _frame(record: Mapping) -> str:
    """One record -> its picture as a responsive SVG, the boxes that change between runs marked ``data-changed``."""
    svg = fit_svg(graphviz.Source(hosts_dot(record)).pipe(format="svg").decode())
    return re.sub(r'(<g id="[^"]+" class="node")(>\s*<title>(?:%s)</title>)' % "|".join(CHANGED), r"\1 data-changed\2", svg)


def hosts_stepper(records: Mapping[str, Mapping]) -> Stepper:
    """One frame per named record: the hosts, their ident, /dev/shm and each rank's path and outcome."""
    if not records:
        raise ValueError("hosts_stepper needs at least one record (got 0)")
    frames, captions = [], []
    for name, record in records.items():
        frames.append(f'<div class="xp-hosts-frame" style="max-width:100%">{_frame(record)}</div>')
        captions.append(f"{name}: {outcome_text(record)[1]}")
    return Stepper(frames, description="run", captions=captions, bookmarks={n: k for k, n in enumerate(records)},
                   interval_ms=1500)
