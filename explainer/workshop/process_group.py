"""A check's process group: who is in it, ending it in bounded time, and sweeping what a killed grader left.

The trusted check process runs in a session of its own, so it and everything it starts (the gate's rank
processes) share one process group: ``end(pgid, seen)`` SIGTERMs it, then SIGKILLs what is left, and remembers
every pid it saw, so shared-memory segments a killed rank created (named with its pid) can be unlinked too
(``unlink_segments``).

A grading session's folders (each check's work folder, and a not-isolated learner's folder) live in this user's
private folder (``private_dir.root()``, never the shared ``/tmp``) and are named after the session's pid
(``workshop-PID-*``). Each work folder keeps its check process's ``Record`` in ``check.json``: the pid, the
start time of that session leader (``/proc/PID/stat``), its uid and the machine's boot id. ``sweep()`` removes
the folders of sessions that are gone and ends a check's group only when the record proves it is the one this
user started: a live session leader with the same start time, uid and boot. It touches only folders of this
user's with no permission for others, reads a record only if it is a small regular file (no symlink followed,
no FIFO waited on), and never blocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from explainer.distributed.device_communicators.shm_segments import SHM_DIR, sweep_segments_of
from explainer.distributed.procs import pid_alive
from explainer.workshop import private_dir
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


def _proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, session, ...)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[19].decode() if fields and len(fields) > 19 else None


def _real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _boot() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Record:
    """Which process group a check is: its session leader's pid, start time, uid, and the boot it ran in."""
    pid: int
    start: str
    uid: int
    boot: str

    @classmethod
    def of(cls, pid: int) -> "Record | None":
        start, uid = start_time(pid), _real_uid(pid)
        return None if start is None or uid is None else cls(pid, start, uid, _boot())

    def ours(self) -> bool:
        """The group is still the one recorded, led by a process of this user's: same boot, same start time,
        same uid, and the pid leads its own session and process group."""
        fields = _proc_stat(self.pid)
        return (fields is not None and len(fields) > 19 and fields[0] not in (b"Z", b"X")
                and int(fields[2]) == int(fields[3]) == self.pid and fields[19].decode() == self.start
                and self.uid == os.geteuid() == _real_uid(self.pid) and bool(self.boot) and self.boot == _boot())

    @classmethod
    def load(cls, folder: str) -> "Record | None":
        """The record in ``folder/check.json`` if it is a small regular file of this user's holding one."""
        data = private_dir.read_small(os.path.join(folder, "check.json"), 4096)
        try:
            d = json.loads(data) if data is not None else None
            rec = cls(**d) if isinstance(d, dict) else None
        except (ValueError, TypeError):
            return None
        ok = rec is not None and isinstance(rec.pid, int) and rec.pid > 1 and isinstance(rec.start, str) \
            and isinstance(rec.uid, int) and isinstance(rec.boot, str)
        return rec if ok else None


def record(work: Path, pid: int) -> None:
    """Keep the check process's ``Record`` in its work folder (a new file: never through a link)."""
    rec = Record.of(pid)
    if rec is None:
        return
    with os.fdopen(private_dir.create(str(work / "check.json")), "w") as f:
        json.dump(asdict(rec), f)


def sweep_root() -> str:
    """Where sessions keep their folders: this user's private folder."""
    return private_dir.root()


def sweep(root: str | None = None) -> list[str]:
    """Remove what killed grading sessions left in ``root`` (this user's private folder): their work folders,
    and a check's process group if it still runs and its record proves it is ours. Returns the folders removed."""
    root = root or sweep_root()
    if not private_dir.private(root, make=False):
        return []
    removed = []
    for name in os.listdir(root):
        owner = name[len(PREFIX):].split("-", 1)[0]
        path = os.path.join(root, name)
        if not name.startswith(PREFIX) or not owner.isdigit() or pid_alive(int(owner)):
            continue
        if not private_dir.private(path, make=False):     # not a folder of this user's alone: not ours to touch
            continue
        rec = Record.load(path)
        if rec is not None and rec.ours():
            end(rec.pid, set())
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
