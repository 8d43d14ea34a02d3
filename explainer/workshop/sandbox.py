"""Run one check in its own process group, bounded in time, and leave nothing behind.

The check process (``child.py``) starts in a new session, so it and everything it starts (the gate's rank
processes, a forkserver, whatever the learner's code spawns) share one process group, which ends with
the check: on success, failure, a hang (the watchdog) or an interrupt. Every pid seen in the group is
remembered so that shared-memory segments a killed rank created (named with its pid) are unlinked too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from explainer.workshop.learner import LearnerCode
from explainer.workshop.report import Report

GRACE = 5.0            # seconds past a learner phase's own budget before the watchdog ends the group


def hard_cap() -> float:
    """The whole check's bound (``EXPLAINER_WORKSHOP_TIMEOUT``, default 120 s: imports on a loaded machine)."""
    try:
        return max(5.0, float(os.environ.get("EXPLAINER_WORKSHOP_TIMEOUT", "120")))
    except ValueError:
        return 120.0


def group_pids(pgid: int) -> set[int]:
    """Live processes of process group ``pgid`` (from /proc)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            pids.add(int(entry))
    return pids


def _last_phase(path: Path) -> dict | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def _end_group(pgid: int, seen: set[int]) -> None:
    """SIGTERM the group, then SIGKILL what is left; wait until it is gone (bounded)."""
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            live = group_pids(pgid)
            seen |= live
            if not live:
                return
            time.sleep(0.05)


def _sweep_prefix(prefix: str) -> None:
    from explainer.distributed import shm
    if os.path.isdir(shm.SHM_DIR):
        for name in os.listdir(shm.SHM_DIR):
            if name.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(shm.SHM_DIR, name))


def run(exercise: str, code: LearnerCode) -> Report:
    from explainer.distributed import shm
    work = Path(tempfile.mkdtemp(prefix="explainer-workshop-"))
    (work / "request.json").write_text(json.dumps({"exercise": exercise, "code": code.to_json()}))
    progress, result = work / "progress.jsonl", work / "result.json"
    t0, cap, seen = time.monotonic(), hard_cap(), set()
    killed = None
    proc = None
    try:
        with open(work / "output.txt", "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "explainer.workshop.child", str(work)], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=work,
                                    start_new_session=True)
            seen.add(proc.pid)
            next_scan = 0.0
            while proc.poll() is None:
                now = time.monotonic()
                if now >= next_scan:
                    seen |= group_pids(proc.pid)
                    next_scan = now + 0.25
                last = _last_phase(progress)
                if last and last["learner"] and time.time() - last["t"] > last["budget"] + GRACE:
                    killed = (f"{last['phase']} did not finish within {last['budget'] + GRACE:g} s "
                              f"(an endless loop or a wait?); the check ended it")
                elif now - t0 > cap:
                    killed = (f"the check did not finish within {cap:g} s (last step: "
                              f"{last['phase'] if last else 'starting'}); the check ended it")
                if killed:
                    break
                time.sleep(0.05)
    finally:
        if proc is not None:
            _end_group(proc.pid, seen)            # the check's process group: whatever is left of it
            proc.wait()
            for pid in seen:
                shm.sweep_segments_of(pid)
            _sweep_prefix(f"workshop{proc.pid}n")          # the gate check's SHM group names
    try:
        output = (work / "output.txt").read_text(errors="replace")[-2000:]
        report = _report(exercise, code, killed, result, progress, proc, time.monotonic() - t0, output)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.process_ids = sorted(seen)               # every process of the check's group (for tests)
    report.check_pid = proc.pid
    return report


def _report(exercise, code, killed, result, progress, proc, seconds, output) -> Report:
    """The child's own report, or what the watchdog saw (a hang, a crash)."""
    if killed:
        return Report(exercise, "fail", reason=killed, source=code.origin, function=code.function,
                      seconds=seconds, output=output)
    if result.exists():
        report = Report.from_json(json.loads(result.read_text()))
        report.seconds, report.output = seconds, output
        return report
    last = _last_phase(progress)
    where = last["phase"] if last else "starting"
    how = (f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
           else f"exit code {proc.returncode}")
    if last and last["learner"]:
        return Report(exercise, "fail", reason=f"the check's process died ({how}) during {where}",
                      source=code.origin, function=code.function, seconds=seconds, output=output)
    tail = output.strip().splitlines()[-1:] or [""]
    return Report.error(exercise, "internal", f"the check's process died ({how}) during {where}: {tail[0]}",
                        source=code.origin, function=code.function, seconds=seconds, output=output)
