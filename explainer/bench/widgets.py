"""Widgets: one stepper step, and the live knobs' real runs (goals: step p95 < 30 ms, a knob's run < 1 s).

* Step: ``widgets.pp.frame_for`` (rendering one frame from the trace: views, highlights, header, diagram,
  output text vs PP=1) plus ``slider.value = k`` with its Python observers (the stack, in its box as tall as the
  tallest frame, and the jump-to buttons follow). The trace is the real ``pp2-pre-fix-int64`` run; the frame order is shuffled
  (seeded) so no step reuses the previous one. Ratio = goal / p95 (headroom; >= 1 meets the goal).
* Knobs, one prompt each, median of a few runs: notebook 1's ``run_sampler`` + its new stepper (a real
  generation of an unsure prompt, frames rendered); notebook 2's real engine run of one prompt at PP=2
  (``scenario.pp.run_demo``, generic-int64 and state-sync). Ratio = 1000 ms / median.
"""

from __future__ import annotations

import random
import statistics
import time

from explainer import scenario
from explainer.bench import Row
from explainer.model import task
from explainer.model.checkpoint import load_pretrained, metadata
from explainer.model.registry import PRE_FIX_MODEL
from explainer.scenario.pp import run_demo
from explainer.scenario.stories import PP1, PP2_PRE_FIX_INT64
from explainer.widgets.knobs import run_sampler
from explainer.widgets.pp import frame_events, frame_for, rank_stepper
from explainer.widgets.sampler import canvas_stepper


GOAL_MS = 30.0
KNOB_GOAL_MS = 1000.0


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def knob_rows(quick: bool = False) -> list[Row]:
    model, cfg = load_pretrained(), dict(metadata()["generation_config"])
    repeats = 2 if quick else 5

    def sampler_knob():
        rec, prompt, _, used = run_sampler(model, 42, 0.1, 0, cfg)
        canvas_stepper(rec, prompt, vocab=task.VOCAB, config=used)

    rows = []
    for name, fn in (("notebook 1 knob: generate prompt 42 + new stepper", sampler_knob),
                     ("notebook 2 knob: PP=2 generic-int64 engine run, prompt 451",
                      lambda: run_demo("knob", "inprocess", model=PRE_FIX_MODEL, pp=2, mode="generic-int64")),
                     ("notebook 2 knob: PP=2 state-sync engine run, prompt 451",
                      lambda: run_demo("knob", "inprocess", model=PRE_FIX_MODEL, pp=2, mode="state-sync"))):
        ms = _median_ms(fn, repeats)
        rows.append(Row("widgets", name, ms, None, "ms", KNOB_GOAL_MS / ms, f"< {KNOB_GOAL_MS:g} ms",
                        ms < KNOB_GOAL_MS))
    return rows


def run(quick: bool = False) -> list[Row]:
    ref = scenario.run(PP1.name).trace
    trace = scenario.run(PP2_PRE_FIX_INT64.name).trace
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
    return [Row("widgets", f"rank stepper step p95 (frame_for + slider observers, {n} frames)", p95,
                None, "ms", GOAL_MS / p95, f"< {GOAL_MS:g} ms", p95 < GOAL_MS)] + knob_rows(quick)
