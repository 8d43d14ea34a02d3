"""A check's process group: who is in it, ending it in bounded time, and sweeping what a killed grader left.

The trusted check process runs in a session of its own, so it and everything it starts (the gate's rank
processes) share one process group: ``end(pgid, seen)`` SIGTERMs it, then SIGKILLs what is left, and remembers
every pid it saw, so shared-memory segments a killed rank created (named with its pid) can be unlinked too
(``unlink_segments``). A grading session's folders (each check's work folder, recording its check process in
``check.json``, and a not-isolated learner's folder) are named after its pid (``explainer-workshop-PID-*``):
``sweep()`` removes the folders of sessions that are gone and ends their check's group if it still runs
(matched by pid and start time).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from explainer.distributed.device_communicators.shm_segments import SHM_DIR, sweep_segments_of
from explainer.distributed.procs import pid_alive
from explainer.workshop.jail.warm import WORK_PREFIX as PREFIX

SHM_PREFIX = "workshop"       # a check's SHM group names: this + the check process's pid + "n" (``shm_ident``)


def shm_ident(tag) -> str:
    """A SHM group ident for rank processes a check starts (``EXPLAINER_DIST_IDENT``): named after the check
    process, so the grader unlinks what its killed ranks leave (``check_segments``)."""
    return f"{SHM_PREFIX}{os.getpid()}n{tag}"


def check_segments(check_pid: int) -> str:
    """The prefix of the SHM groups the check ``check_pid`` started (``shm_ident``)."""
    return f"{SHM_PREFIX}{check_pid}n"


def members(pgid: int) -> set[int]:
    """Live processes of process group ``pgid`` (from /proc; where there is none, the leader if alive)."""
    if not os.path.isdir("/proc"):
        return {pgid} if pid_alive(pgid) else set()
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


def end(pgid: int, seen: set[int]) -> None:
    """SIGTERM the group, then SIGKILL what is left; wait until it is gone (bounded); ``seen`` collects pids."""
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            live = members(pgid)
            seen |= live
            if not live:
                return
            time.sleep(0.05)


def unlink_segments(seen: set[int], prefix: str) -> None:
    """Unlink the shared-memory segments the processes ``seen`` created and those whose name starts with
    ``prefix`` (the gate check's SHM group names)."""
    for pid in seen:
        sweep_segments_of(pid)
    if os.path.isdir(SHM_DIR):
        for name in os.listdir(SHM_DIR):
            if name.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(SHM_DIR, name))


def start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def record(work: Path, pid: int) -> None:
    (work / "check.json").write_text(json.dumps({"pid": pid, "start": start_time(pid)}))


def sweep(root: str | None = None) -> list[str]:
    """Remove what killed grading sessions left: their work folders, and their check's process group if it
    still runs. Returns the folders removed."""
    root = root or tempfile.gettempdir()
    removed = []
    for name in os.listdir(root):
        owner = name[len(PREFIX):].split("-", 1)[0]
        path = os.path.join(root, name)
        if not name.startswith(PREFIX) or not owner.isdigit() or pid_alive(int(owner)) or os.path.islink(path):
            continue
        try:
            rec = json.loads(Path(path, "check.json").read_text())
            if start_time(rec["pid"]) == rec["start"]:
                end(rec["pid"], set())
        except (OSError, ValueError, KeyError, TypeError):
            pass
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
