"""Live knobs: a click re-runs the real thing and says when it ran; the static note says a kernel is needed."""

import html
import re

import pytest

from explainer.model.checkpoint import load_pretrained, metadata
from explainer.vocab import STATE_SYNC_FIELDS
from explainer.widgets.knobs import PPKnobs, SamplerKnobs


def _text(widget) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", widget.value))


@pytest.fixture(scope="module")
def model():
    return load_pretrained(), dict(metadata()["generation_config"])


def test_sampler_knobs_rerun_a_real_generation(model):
    m, cfg = model
    k = SamplerKnobs(m, cfg, number=347)
    first = _text(k.status)
    assert re.search(r"ran at \d\d:\d\d:\d\d, took \d+ ms", first)
    assert "'three hundred forty-seven'" in first and "✓ equals" in first
    assert k.box.children == (k.stepper.widget,) and k.stepper.caption.startswith("frame 1 of ")
    k.number.value, k.bound.value = 5, 0.001
    k.button.click()                                   # what a click in the browser does, with a kernel
    assert k.last["steps"] == [47, 2] and "prompt 5, bound 0.001" in _text(k.status)
    assert k.box.children == (k.stepper.widget,) and len(k.stepper.frames) == 47 + 2 + 2
    assert "needs a running kernel" in k.widget.children[1].value


def test_pp_knobs_show_divergence_text_and_accuracy():
    k = PPKnobs(mode="state-sync", held_out=2, sync_fields=STATE_SYNC_FIELDS)
    s = _text(k.status)
    assert re.search(r"ran at \d\d:\d\d:\d\d, took \d+ ms", s) and "outcome ✓ ok" in s
    assert k.last["first_divergence"] is None and "✓ same" in s and k.last["exact_match"] == 1.0
    k.mode.value = "generic-int64"
    k.button.click()
    d = k.last["first_divergence"]
    assert (d["step"], d["rank"], sorted(d["fields"])) == (2, 0, ["draft_tokens", "is_encoder_phase"])
    assert "≠ differs" in _text(k.status) and k.stepper.bookmarks["≠ first divergence"] >= 0
    # the run completed, but the text diverged: the panel says so, never "ok" beside "≠ differs"
    assert k.last["shown_outcome"] == "diverged" and "outcome ✗ diverged" in _text(k.status)
    assert "outcome ✓ ok" not in _text(k.status)
    k.mode.value = "generic"
    k.button.click()
    assert k.last["outcome"] == "warmup-crash" and "✗ AssertionError" in _text(k.status)


def test_pp_knobs_sync_exactly_the_ticked_fields():
    # none ticked by default (choosing them is the sync-fields exercise), and the panel does not name a choice
    blank = PPKnobs(mode="state-sync", held_out=1)
    assert not any(box.value for box in blank.fields.values()) and blank.last["first_divergence"] is not None
    assert not any(f in _text(blank.widget.children[0].children[3]) for f in STATE_SYNC_FIELDS)
    k = PPKnobs(mode="state-sync", held_out=1, sync_fields=STATE_SYNC_FIELDS)
    assert sorted(f for f, box in k.fields.items() if box.value) == sorted(
        ["draft_tokens", "is_encoder_phase", "self_conditioning_embeds"])
    assert k.last["first_divergence"] is None                      # #52015's three: no stale read
    k.fields["self_conditioning_embeds"].value = False              # untick one: rank 0 now reads a stale copy
    k.button.click()
    d = k.last["first_divergence"]
    assert d is not None and d["rank"] == 0 and "self_conditioning_embeds" in d["fields"]
    assert "syncing draft_tokens, is_encoder_phase," in _text(k.status)


def test_pp_knobs_show_the_state_checkboxes_only_where_they_apply():
    """generic / generic-int64 send no state, and PP=1 has no other rank: the checkboxes are off and hidden there,
    never shown ticked for a mode that sends none of them."""
    from explainer.widgets.stepper import KERNEL_CLASS
    k = PPKnobs(mode="state-sync", held_out=1)
    assert all(not box.disabled for box in k.fields.values()) and k.ticks.layout.display is None
    for pp, mode in ((2, "generic-int64"), (2, "generic"), (1, "state-sync")):
        k.pp.value, k.mode.value = pp, mode
        assert all(box.disabled for box in k.fields.values()) and k.ticks.layout.display == "none", (pp, mode)
    k.pp.value, k.mode.value = 2, "state-sync"
    assert all(not box.disabled for box in k.fields.values()) and k.ticks.layout.display is None
    # the controls that start a run are marked for the static site, which greys them out with the reason
    assert KERNEL_CLASS in k.widget.children[0]._dom_classes
    assert "Disabled on this page" in k.widget.children[1].value and "needs a running kernel" in k.widget.children[1].value
