"""CPU communicator widgets, headless: controls + Run re-run the real selection on 2 processes."""

import os
import re

import pytest

from explainer.widgets import comm as WC
from explainer.errors import UsageError

from test_render_comm import INTER_NODE, PRE_ERRORS, SAME_NODE, run


def _shown_outcome(lab) -> str:
    return re.search(r'data-outcome="([^"]*)"', lab.status.value).group(1)


def _segments(idents) -> list[str]:
    """Segments in /dev/shm named after one of these runs' groups (other tests may run alongside)."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return [n for n in names if any(n.startswith(f"{i}-") for i in idents)]


@pytest.mark.slow
def test_lab_buttons_rerun_the_real_selection():
    lab = WC.CommLab(timeout=20)
    idents = {i["ident"] for i in lab.last}
    assert _shown_outcome(lab) == "delivered" and [i["backend"] for i in lab.last] == ["shm", "shm"]
    # the first display is short: one line per rank (the notebook drew this run's pictures already)
    assert "<svg" not in lab.html.value and lab.html.value.count('<div data-rank="') == 2
    assert "backend <code>shm</code>" in lab.html.value and "Each Run draws" in lab.html.value
    lab.button.click()
    assert "<svg" in lab.html.value and 'data-rank="1" data-row="backend"><code>shm</code>' in lab.html.value
    lab.layout.value, lab.gate.value = "2 nodes", "pre-40150"
    lab.button.click()
    idents |= {i["ident"] for i in lab.last}
    assert _shown_outcome(lab) == "AttributeError on rank(s) 0, 1"
    assert "has no attribute &#x27;recv_tensor_dict&#x27;" in lab.html.value
    assert all(i["exitcode"] is not None for i in lab.last)             # the rank processes ended
    lab.gate.value = "post-40150"
    lab.button.click()
    assert _shown_outcome(lab) == "delivered" and lab.last[1]["path"].startswith("generic")
    assert "CPU SHM communicator disabled for group pp:0" in lab.html.value
    assert len(idents) == 3 and _segments(idents) == []                  # nothing left in /dev/shm
    lab.button.click()                       # same settings, same result: the status still shows a new run
    assert 'data-runs="5"' in lab.status.value and re.search(r"run 5: ran at \d\d:\d\d:\d\d, took \d+ ms",
                                                               lab.status.value)


def test_run_lab_rejects_bad_settings_before_starting_processes():
    with pytest.raises(UsageError, match="arch 'riscv64': accepted x86_64"):
        WC.run_lab(arch="riscv64")
    with pytest.raises(UsageError, match="nodes 3"):
        WC.run_lab(nodes=3)
    with pytest.raises(UsageError, match="group_prefix 'ep'"):
        WC.run_lab(group_prefix="ep")


def test_outcome_names_the_failing_ranks():
    assert WC.outcome(run(INTER_NODE, "pre-40150", nodes=2, errors=PRE_ERRORS)) == "AttributeError on rank(s) 0, 1"
    assert WC.outcome(run(SAME_NODE, "post-40150")) == "delivered"


def test_scenario_frames_follow_the_toggle():
    runs = {"comm-same-node": run(SAME_NODE, "post-40150"),
            "comm-inter-node-pre-fix": run(INTER_NODE, "pre-40150", nodes=2, errors=PRE_ERRORS)}
    sf = WC.ScenarioFrames(runs)
    assert sf.stack.selected_index == 0 and "comm-same-node — outcome: delivered" in sf.current
    sf.buttons.value = "comm-inter-node-pre-fix"
    assert sf.stack.selected_index == 1 and "outcome: AttributeError on rank(s) 0, 1" in sf.current
    assert all(f.count("<svg") == 2 for f in sf.frames)         # the decision tree and the route
    assert all('class="xp-ranks"' not in f for f in sf.frames)  # and each run's ranks are printed apart
    with pytest.raises(UsageError):
        WC.ScenarioFrames({})


def test_frame_survives_a_rank_that_died():
    died = run(SAME_NODE, "post-40150")
    died[0] = {"rank": 0, "node": 0, "error": {"type": "ProcessDied", "message": "rank 0 exited with code -9"},
               "backend": None, "log_lines": [], "transfers": []}
    died[1]["error"], died[1]["received_equal"] = {"type": "TimeoutError", "message": "peer gone"}, None
    html = WC.run_frame("died", died)
    assert html.count("<svg") == 1 and "ProcessDied" in html and "outcome: ProcessDied/TimeoutError" in html
    from test_render_comm import classes
    taken, _, te, _ = classes(WC.R.tensor_dict_dot(died))       # rank 1 reached the gate: its route, then the error
    assert taken == {"call", "gate", "custom", "shm_stream", "other_error"} and "shm_stream -> other_error" in te
