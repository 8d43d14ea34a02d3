"""Pipeline timeline from the trace: bubble fraction vs what the schedule implies; it renders for both."""

import pytest

from explainer.model import task
from explainer.engine.llm_engine import LLMEngine
from explainer.render.timeline import timeline_svg, timelines_html
from explainer.trace.timeline import implied_bubble_fraction, pipeline_timeline
from explainer.trace import Trace

PRE = "diffusion-gemma-tiny@pre-45828"
CL = task.CANVAS_LENGTH


def run(schedule, prompts, pp=2):
    trace = Trace()
    engine = LLMEngine.from_engine_args(trace, model=PRE, pipeline_parallel_size=pp, pp_mode="state-sync",
                                        pp_schedule=schedule, max_num_batched_tokens=CL)
    outs = engine.generate([task.encode(p) for p in prompts], max_tokens=3 * CL, seeds=list(range(len(prompts))))
    return trace, [o.output_token_ids for o in outs]


@pytest.fixture(scope="module")
def runs():
    return {(s, n): run(s, ["451", "909"][:n]) for s in ("sync", "async") for n in (1, 2)}


@pytest.mark.parametrize("schedule", ["sync", "async"])
@pytest.mark.parametrize("n", [1, 2])
def test_bubble_fraction_from_the_run_matches_the_schedule(runs, schedule, n):
    trace, _ = runs[(schedule, n)]
    tl = pipeline_timeline(trace)
    assert tl.busy == 2 * len({c.step for c in tl.forwards})            # every step once on every stage
    assert tl.bubble_fraction == pytest.approx(implied_bubble_fraction(trace), abs=1e-12)


def test_sync_idles_every_rank_half_the_time_and_async_fills_the_pipeline(runs):
    assert pipeline_timeline(runs[("sync", 2)][0]).bubble_fraction == 0.5
    assert pipeline_timeline(runs[("async", 1)][0]).bubble_fraction == 0.5   # one request: nothing to overlap
    a2, s2 = pipeline_timeline(runs[("async", 2)][0]), pipeline_timeline(runs[("sync", 2)][0])
    assert a2.bubble_fraction < 0.2 and a2.length < s2.length
    assert runs[("async", 2)][1] == runs[("sync", 2)][1]                 # same tokens either way


def test_transfers_on_the_timeline(runs):
    sync, asy = pipeline_timeline(runs[("sync", 2)][0]), pipeline_timeline(runs[("async", 2)][0])
    for tl in (sync, asy):
        inter = [a for a in tl.arrows if a.kind == "intermediate"]
        assert inter and all(a.dst_tick == a.src_tick + 1 and a.dst_rank == a.src_rank + 1 for a in inter)
        assert any(a.kind == "back-channel" for a in tl.arrows)
    assert not [a for a in sync.arrows if a.kind == "consume"]
    consume = [a for a in asy.arrows if a.kind == "consume"]
    assert consume and all(a.dst_tick > a.src_tick for a in consume)      # consumed after it landed


def test_renders_both_schedules(runs):
    tls = {s: pipeline_timeline(runs[(s, 2)][0]) for s in ("sync", "async")}
    html = timelines_html(tls)
    for s, tl in tls.items():
        assert f"{s}: {tl.length} ticks, {tl.busy} forwards, bubbles {len(tl.bubbles)}/" in html
    svg = timeline_svg(tls["async"])
    assert svg.startswith("<svg") and svg.count("fill=\"url(#xp-hatch)\"") == len(tls["async"].bubbles)
    assert "consumes step" in svg and "consumes step" not in timeline_svg(tls["sync"])


def test_warmup_is_not_on_the_timeline(runs):
    trace, _ = runs[("sync", 1)]
    warm_ticks = {e.data["tick"] for e in trace.events if e.warmup and "tick" in e.data}
    tl = pipeline_timeline(trace)
    assert warm_ticks and all(t < tl.start for t in warm_ticks)


def test_the_timeline_names_each_request_by_colour_and_mark(runs):
    # colour is never the only code: a key names each request, and every other request carries a white bar
    from explainer.render.timeline import request_key_html
    tl = pipeline_timeline(runs[("async", 2)][0])
    key = request_key_html({"async": tl})
    reqs = sorted({c.req_ids[0] for c in tl.forwards if c.req_ids})
    assert len(reqs) == 2 and all(r in key for r in reqs)
    assert "(plain)" in key and "(white bar on top)" in key
    assert key in timelines_html({"async": tl})
