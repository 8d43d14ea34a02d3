"""The learner's code runs only in the jail the check starts; hangs and crashes end in bounded time and
leave no process or shared-memory segment behind (scoped to the pids of the check's own process group)."""

from __future__ import annotations

import os
import time

import pytest

from explainer.workshop import check, check_file

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def short_budget(monkeypatch):
    monkeypatch.setenv("EXPLAINER_WORKSHOP_BUDGET", "2")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _nothing_left(report) -> None:
    assert report.check_pid and report.check_pid in report.process_ids
    assert report.check_pid != os.getpid()                 # the learner's code ran elsewhere
    assert not [p for p in report.process_ids if _alive(p)]
    names = os.listdir("/dev/shm")
    assert not [n for n in names if n.startswith(f"workshop{report.check_pid}n")]
    assert not [n for n in names for p in report.process_ids if f"-{p}-" in n and "cpushm" in n]


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_hanging_accept_ends_with_a_clear_fail(tmp_path):
    path = _file(tmp_path, "hang.py", "def entropy_bound_accept(entropy, bound):\n    while True:\n        pass\n")
    t0 = time.monotonic()
    report = check_file("accept", path)
    assert time.monotonic() - t0 < 60
    assert report.status == "fail" and "did not return within 2 s" in report.reason
    assert "entropy_bound_accept(entropy of shape [1, 5], bound=0.1)" in report.reason
    _nothing_left(report)


def test_sleeping_top_level_is_ended_by_the_time_limit(tmp_path):
    # a C-level wait that ignores SIGALRM: the check's own deadline on the jail's answer ends it
    path = _file(tmp_path, "sleep.py", "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                       "import time\ntime.sleep(1000)\ndef fields_to_sync():\n    return set()\n")
    report = check_file("sync-fields", path)
    assert report.status == "fail" and "did not return within 2 s (the time limit" in report.reason
    assert "running the top level of sleep.py" in report.reason
    _nothing_left(report)


def test_crashing_accept_is_a_fail_naming_where(tmp_path):
    path = _file(tmp_path, "crash.py", "import os\ndef entropy_bound_accept(entropy, bound):\n    os._exit(3)\n")
    report = check_file("accept", path)
    assert report.status == "fail" and "the learner's process exited (code 3)" in report.reason
    assert "entropy_bound_accept(entropy of shape [1, 5], bound=0.1)" in report.reason
    _nothing_left(report)


def test_gate_hanging_is_ended_before_any_rank_starts(tmp_path):
    path = _file(tmp_path, "gate_hang.py", "import time\ndef use_cpu_custom_send_recv(c):\n"
                                           "    time.sleep(1000)\n    return True\n")
    t0 = time.monotonic()
    report = check_file("tensor-dict-gate", path)
    assert time.monotonic() - t0 < 90
    assert report.status == "fail" and "did not return within 2 s" in report.reason
    assert "for a communicator with backend shm, rank 0" in report.reason
    _nothing_left(report)


def test_gate_killing_its_rank_leaves_no_segment(tmp_path):
    path = _file(tmp_path, "gate_kill.py", "import os, signal\ndef use_cpu_custom_send_recv(c):\n"
                                           "    if c.backend == 'shm' and c.rank_in_group == 1:\n"
                                           "        os.kill(os.getpid(), signal.SIGKILL)\n"
                                           "    return bool(c.supports_tensor_dict)\n")
    report = check_file("tensor-dict-gate", path)
    assert report.status == "fail"
    _nothing_left(report)


def test_passing_gate_leaves_nothing(tmp_path):
    path = _file(tmp_path, "ok.py", "def use_cpu_custom_send_recv(c):\n"
                                    "    return bool(getattr(c, 'supports_tensor_dict', False))\n")
    report = check_file("tensor-dict-gate", path)
    assert report.passed, report.reason
    _nothing_left(report)


# ---- function objects (a notebook cell) ----------------------------------------------------------------
import torch as _torch_alias  # noqa: E402  - a module under another name, as a notebook might import it

BOUND_SHIFT = 0.0


def _helper(h):
    return _torch_alias.sort(h, dim=-1)


def entropy_bound_accept(entropy, bound):
    h, order = _helper(entropy)
    keep = _torch_alias.cumsum(h, dim=-1) - h <= bound + BOUND_SHIFT
    return _torch_alias.zeros_like(keep).scatter_(-1, order, keep)


def test_a_function_object_is_shipped_as_source_with_what_it_uses():
    report = check("accept", entropy_bound_accept)
    assert report.passed, report.reason
    assert report.source == "function entropy_bound_accept"
    _nothing_left(report)
    html = report._repr_html_()
    assert 'data-status="pass"' in html and "✓ PASS" in html


_FIELDS = {"draft_tokens": object()}      # not a constant: cannot travel as source


def fields_to_sync():
    return set(_FIELDS)


def test_function_using_an_unshippable_global_is_bad_input():
    report = check("sync-fields", fields_to_sync)
    assert report.status == "error" and report.exit_code == 2 and report.check_pid is None
    assert "uses '_FIELDS' (dict) from elsewhere in the notebook; define it inside the function" in report.reason


def test_failing_panels_draw_the_failure(tmp_path):
    acc = check_file("accept", _file(tmp_path, "lt.py", "import torch\ndef entropy_bound_accept(e, b):\n"
                                                       "    return e < b\n"))
    html = acc._repr_html_()
    assert 'data-status="fail"' in html and "✗ FAIL" in html and "xp-ws-case" in html and "xp-ws-diff" in html
    sync = check_file("sync-fields", _file(tmp_path, "s.py", "def fields_to_sync():\n    return {'draft_tokens'}\n"))
    html = sync._repr_html_()
    assert 'class="xp-pp"' in html and "xp-diverged" in html       # the rank views at the first divergence
