"""The rank stepper, headless: moving the slider shows the frame whose highlights the trace predicts."""

import re

import pytest

from explainer import scenario
from explainer.render.pp_trace import diverged_fields
from explainer.widgets.pp import frame_events, frame_for, rank_stepper


@pytest.fixture(scope="module")
def run():
    return scenario.run("pp2-pre-fix-int64").trace, scenario.run("pp1").trace


def _shown(stepper) -> tuple[str, list[str]]:
    html = stepper.current
    root = re.match(r'<div class="xp-pp" id="(xp-pp-frame-\d+)"[^>]*data-diverged="([^"]*)"', html)
    return root.group(1), sorted(re.findall(r'class="xp-diverged" data-field="([a-z_]+)"', html))


def test_slider_shows_the_frames_the_trace_predicts(run):
    trace, ref = run
    s = rank_stepper(trace, reference=ref)
    events = frame_events(trace)
    assert len(s.frames) == len(events) <= 100 and s.slider.max == len(events) - 1
    assert _shown(s) == ("xp-pp-frame-0", [])
    first = trace.first_divergence()
    k = next(k for k, (i, _) in enumerate(events) if i == first["event"])
    assert f'data-first-divergence-frame="{k}"' in s.widget.children[0].value
    s.slider.value = k
    assert s.stack.selected_index == k
    assert _shown(s) == (f"xp-pp-frame-{k}", sorted(first["fields"]))
    assert f'data-diverged="{",".join(first["fields"])}"' in s.current
    for pos in range(len(events)):          # every position: the shown highlights are the trace's divergences
        s.slider.value = pos
        assert _shown(s)[1] == sorted(diverged_fields(trace, events[pos][0]))
    s.slider.value = k - 1
    assert _shown(s)[1] == []


def test_highlights_change_between_steps(run):
    trace, ref = run
    s = rank_stepper(trace, reference=ref)
    seen = set()
    for pos in range(s.slider.max + 1):
        s.slider.value = pos
        seen.add(tuple(_shown(s)[1]))
    assert {(), ("draft_tokens", "is_encoder_phase"), ("draft_tokens", "is_encoder_phase",
                                                      "self_conditioning_embeds"), ("draft_tokens",)} <= seen


def test_frame_for_matches_the_stepper_and_rejects_bad_positions(run):
    trace, ref = run
    s = rank_stepper(trace, reference=ref)
    assert frame_for(trace, 3, reference=ref) == s.frames[3]
    with pytest.raises(ValueError, match="outside"):
        frame_for(trace, len(s.frames))


def test_frames_stay_small(run):
    trace, ref = run
    s = rank_stepper(trace, reference=ref)
    assert max(len(f.encode()) for f in s.frames) < 8000
    assert "<style>" in s.widget.children[0].value and all("<style>" not in f for f in s.frames)


def test_jump_to_first_divergence_and_captions(run):
    trace, ref = run
    s = rank_stepper(trace, reference=ref)
    first = trace.first_divergence()
    k = next(k for k, (i, _) in enumerate(frame_events(trace)) if i == first["event"])
    assert s.bookmarks["≠ first divergence"] == k
    assert "first commit" in s.bookmarks and s.bookmarks["first commit"] > k
    html = s.jump_to("≠ first divergence")
    assert s.slider.value == k and f'id="xp-pp-frame-{k}"' in html
    assert s.caption.startswith(f"frame {k + 1} of {len(s.frames)} · engine step {first['step']} · rank 0 prepare: ≠")
    assert s.stack.layout.height is None              # the box takes the tallest frame's height, whatever it is
