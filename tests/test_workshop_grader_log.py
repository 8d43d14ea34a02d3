"""A notebook's check that hangs says so within its limit and leaves its grader's log where the instructor guide
says (``~/.local/state/explainer/grader.log``, under ``$XDG_STATE_HOME``).

The rehearsal's first check hung about 270 s in JupyterLab and left nothing: the grader process's stderr went to
/dev/null. Here the kernel's grader process is stopped (SIGSTOP: a grader stuck for any reason) between two
checks; the second check must answer within its limit, name what the grader was doing, and point at a log that
holds the grader's own lines.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from explainer.workshop import grader_process, learner

pytestmark = pytest.mark.slow
STUB = "import torch\n\n\ndef entropy_bound_accept(entropy, bound):\n    return torch.zeros_like(entropy, dtype=torch.bool)\n"
CAP = 5.0


def test_a_grader_that_stops_answering_says_so_in_time_and_leaves_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("EXPLAINER_WORKSHOP_TIMEOUT", str(CAP))
    monkeypatch.setenv("EXPLAINER_WORKSHOP_BUDGET", "3")
    (tmp_path / "stub.py").write_text(STUB)
    code = learner.from_file(tmp_path / "stub.py", "entropy_bound_accept", "accept")
    grader = grader_process.GraderProcess()
    try:
        assert grader.check("accept", code).status == "fail"          # a real check first: the grader is warm
        pid = grader.proc.pid
        log = Path(tmp_path / "state" / "explainer" / "grader.log")
        deadline = time.monotonic() + 300                              # its idle work (the other references) done
        while time.monotonic() < deadline and not _idle(log, pid):
            time.sleep(0.5)
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        report = grader.check("accept", code)
        took = time.monotonic() - t0
    finally:
        grader.close()
    assert report.status == "error" and report.error_kind == "internal"
    assert took < CAP + grader_process.MARGIN + 10, took
    assert "checking accept" in report.reason and str(log) in report.reason, report.reason
    text = log.read_text()
    assert f"grader {pid}: checking accept" in text and f"grader {pid}: ready" in text
    assert "stopped answering during 'checking accept'" in text
    assert not [p for p in Path("/proc").iterdir() if p.name == str(pid)]   # the stopped grader was ended


def _idle(log: Path, pid: int) -> bool:
    mine = [ln for ln in log.read_text().splitlines() if f"grader {pid}: " in ln] if log.exists() else []
    return bool(mine) and mine[-1].endswith(": ready") and any("tensor-dict-gate reference" in ln for ln in mine)


def test_the_log_is_private_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = Path(grader_process.log_path())
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_bytes(b"x" * (grader_process.LOG_LIMIT + 1))
    fd = grader_process.open_log()
    try:
        os.write(fd, b"new\n")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"new\n" and (path.parent / "grader.log.1").stat().st_size > grader_process.LOG_LIMIT
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    os.unlink(path)
    os.symlink(tmp_path / "elsewhere", path)                                # never written through a link
    fd = grader_process.open_log()
    os.close(fd)
    assert not (tmp_path / "elsewhere").exists()
