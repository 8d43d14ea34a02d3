"""Notebook 5's one host diagram, stepped: one frame per stored two-host run, captioned with its outcome."""

import pytest

from explainer.scenario import hosts_record
from explainer.widgets.hosts import hosts_stepper


def test_one_diagram_stepped_through_the_stored_runs():
    runs = {"before #40150": hosts_record.load_stored("comm-inter-node-pre-fix"),
            "after #40150": hosts_record.load_stored("comm-inter-node-fixed")}
    s = hosts_stepper(runs)
    assert len(s.frames) == 2 and all(f.count("<svg") == 1 for f in s.frames)
    assert s.captions[0].startswith("before #40150: ✗ AttributeError")
    assert s.captions[1].startswith("after #40150: ✓ delivered intact")
    assert s.bookmarks == {"before #40150": 0, "after #40150": 1}
    assert 'width="100%"' in s.frames[0]                       # shrinks with the column instead of running past it
    # what a jump must bring into view: both ranks' boxes and the outcome
    assert all(f.count(" data-changed>") == 3 for f in s.frames)
    s.jump_to("after #40150")
    assert s.index == 1 and "frame 2 of 2" in s.shown[1]


def test_no_records_is_an_error():
    with pytest.raises(ValueError, match="at least one record"):
        hosts_stepper({})
