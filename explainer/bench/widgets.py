"""One widget step: slider move -> new HTML, on the rank stepper of notebook 2 (DESIGN: p95 < 30 ms).

Timed per step: ``widgets_pp.frame_for`` (rendering one frame from the trace: views, highlights, header,
diagram, output text vs PP=1) plus ``slider.value = k`` with its Python observer. The trace is the real
``pp2-pre-fix-int64`` run; the frame order is shuffled (seeded) so no step reuses the previous one.
Ratio = goal / p95 (headroom; >= 1 meets the goal).
"""

from __future__ import annotations

import random
import statistics
import time

from explainer.bench import Row

GOAL_MS = 30.0


def run(quick: bool = False) -> list[Row]:
    from explainer import scenario
    from explainer.widgets_pp import frame_events, frame_for, rank_stepper

    ref = scenario.run("pp1").trace
    trace = scenario.run("pp2-pre-fix-int64").trace
    stepper = rank_stepper(trace, reference=ref)
    n = len(frame_events(trace))
    order = list(range(n)) * (2 if quick else 10)
    random.Random(0).shuffle(order)
    times = []
    for k in order:
        start = time.perf_counter()
        frame_for(trace, k, reference=ref)
        stepper.slider.value = k
        times.append((time.perf_counter() - start) * 1e3)
    p95 = statistics.quantiles(times, n=20)[-1]
    return [Row("widgets", f"rank stepper step p95 (frame_for + slider observer, {n} frames)", p95, None, "ms",
                GOAL_MS / p95, f"< {GOAL_MS:g} ms", p95 < GOAL_MS)]
