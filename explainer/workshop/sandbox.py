"""Run one trusted check process in its own process group, bounded in time, and leave nothing behind.

The check process is forked from a warm forkserver (torch and the engine already imported, so a check
in a notebook or a folder of checks pays the imports once) and runs ``child.main`` in a new session: it
and everything it starts (the gate's rank processes, whatever the learner's code spawns) share one
process group, which ends with the check: on success, failure, a hang (the watchdog) or an interrupt.
Every pid seen in the group is remembered so that shared-memory segments a killed rank created (named
with its pid) are unlinked too. The forkserver is multiprocessing's (shared with ``distributed.launch``);
it imports modules and runs no learner code. Neither does the check process: the learner's code runs in
the jail it starts (``session.py``, ``jail.py``), which ends with it.

The check process dies with its parent (``PR_SET_PDEATHSIG``), so a SIGKILLed grading command takes it
(and the jail, and the rank processes) along. Its work folder is named after the grading command's pid
(``explainer-workshop-PID-*``) and records the check process; the next run removes the folders of
grading commands that are gone and ends any process of theirs still running (``sweep``).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from explainer.distributed.procs import die_with_parent, pid_alive
from explainer.workshop import child
from explainer.workshop.learner import LearnerCode
from explainer.workshop.report import Report


SHM_DIR = "/dev/shm"   # = distributed.shm.SHM_DIR (not imported here: it imports torch)
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


PRELOAD = ["torch", "torch.distributed", "explainer.distributed.parallel_state", "explainer.engine.llm_engine",
           "explainer.workshop.child"]


START_METHOD = "forkserver"      # the command line sets "fork": its process is single-threaded, torch imported


def _start(work: Path):
    ctx = multiprocessing.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)      # no effect if the server already runs (then torch is loaded)
    env = {k: v for k, v in os.environ.items()       # the room's URL holds its token: not for learner code
           if k.startswith("EXPLAINER_") and k not in ("EXPLAINER_ROOM", "EXPLAINER_SEAT")}
    proc = ctx.Process(target=_entry, args=(str(work), env), name="explainer-workshop-check")
    proc.start()
    return proc


def _entry(workdir: str, env: dict) -> None:
    """In the check process: own session, dies with its parent, output to a file, the caller's EXPLAINER_*
    settings, then the check."""
    code = 1
    try:
        os.setsid()
        die_with_parent()
        fd = os.open(os.path.join(workdir, "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        for key in [k for k in os.environ if k.startswith("EXPLAINER_") and k not in env]:
            del os.environ[key]                   # a forkserver keeps the environment it started with
        os.environ.update(env)
        os.chdir(workdir)
        code = child.main(workdir)
    except BaseException:                         # noqa: BLE001 - reported through output.txt
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _sweep_prefix(prefix: str) -> None:
    if os.path.isdir(SHM_DIR):
        for name in os.listdir(SHM_DIR):
            if name.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(SHM_DIR, name))


PREFIX = "explainer-workshop-"


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def sweep(root: str | None = None) -> list[str]:
    """Remove what killed grading commands left: their work folders, and their check's process group if it
    still runs (matched by pid and start time). Returns the folders removed."""
    root = root or tempfile.gettempdir()
    removed = []
    for name in os.listdir(root):
        owner = name[len(PREFIX):].split("-", 1)[0]
        path = os.path.join(root, name)
        if not name.startswith(PREFIX) or not owner.isdigit() or pid_alive(int(owner)) or os.path.islink(path):
            continue
        try:
            rec = json.loads(Path(path, "check.json").read_text())
            if _start_time(rec["pid"]) == rec["start"]:
                _end_group(rec["pid"], set())
        except (OSError, ValueError, KeyError, TypeError):
            pass
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def run(exercise: str, code: LearnerCode) -> Report:
    sweep()
    work = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    try:
        return _run(work, exercise, code)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, exercise: str, code: LearnerCode) -> Report:
    (work / "request.json").write_text(json.dumps({"exercise": exercise, "code": code.to_json()}))
    progress, result = work / "progress.jsonl", work / "result.json"
    t0, cap, seen = time.monotonic(), hard_cap(), set()
    killed = None
    proc = None
    try:
        proc = _start(work)
        seen.add(proc.pid)
        (work / "check.json").write_text(json.dumps({"pid": proc.pid, "start": _start_time(proc.pid)}))
        next_scan = 0.0
        while proc.exitcode is None:
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
            proc.join(0.05)
    finally:
        if proc is not None:
            _end_group(proc.pid, seen)            # the check's process group: whatever is left of it
            if proc.exitcode is None:             # not yet its own group leader: end it by pid
                proc.kill()
            proc.join()
            if os.path.isdir(SHM_DIR) and any(f"-{pid}-" in n for n in os.listdir(SHM_DIR) for pid in seen):
                from explainer.distributed.device_communicators import shm
                for pid in seen:
                    shm.sweep_segments_of(pid)
            _sweep_prefix(f"workshop{proc.pid}n")          # the gate check's SHM group names
    output = _tail(work / "output.txt")
    report = _report(exercise, code, killed, result, progress, proc, time.monotonic() - t0, output)
    report.process_ids = sorted(seen)               # every process of the check's group (for tests)
    report.check_pid = proc.pid
    return report


def _tail(path: Path, limit: int = 2000) -> str:
    """The end of the check process's own output (trusted code: tracebacks of an internal error)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _report(exercise, code, killed, result, progress, proc, seconds, output) -> Report:
    """The child's own report, or what the watchdog saw (a hang, a crash)."""
    if killed:
        return Report(exercise, "fail", reason=killed, source=code.origin, function=code.function,
                      seconds=seconds, output=output)
    if result.exists():
        report = Report.from_json(json.loads(result.read_text()))
        report.seconds = seconds
        return report
    last = _last_phase(progress)
    where = last["phase"] if last else "starting"
    how = (f"signal {signal.Signals(-proc.exitcode).name}" if proc.exitcode < 0
           else f"exit code {proc.exitcode}")
    if last and last["learner"]:
        return Report(exercise, "fail", reason=f"the check's process died ({how}) during {where}",
                      source=code.origin, function=code.function, seconds=seconds, output=output)
    tail = output.strip().splitlines()[-1:] or [""]
    return Report.error(exercise, "internal", f"the check's process died ({how}) during {where}: {tail[0]}",
                        source=code.origin, function=code.function, seconds=seconds, output=output)
