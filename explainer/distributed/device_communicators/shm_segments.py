"""The life of shared-memory segment names: who must unlink what, and when (``shm`` uses these).

A rank creates one segment in ``/dev/shm`` per group (``<group>_<rank>-<creator pid>-<8 hex>``). A
name left behind survives the process (tmpfs), so every path unlinks it: the owner right after every
rank has mapped it, ``close()``, ``atexit``, multiprocessing finalizers (forked children skip atexit),
SIGTERM, and a sweep at every set-up of names whose creator pid is gone (a SIGKILLed group). Names a
peer sends are checked before anything is opened, and a segment is only sized once ``/dev/shm`` has
room for it (a tmpfs that fills up kills a rank with SIGBUS, not an error).
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import weakref
from multiprocessing import util as _mp_util

from explainer.distributed.procs import pid_alive
from explainer.distributed.device_communicators.shm_header import ShmPayloadError

SHM_DIR = "/dev/shm"


# --- the process-wide registry of names this process still has to unlink ---------------------
OWNED_NAMES: set[str] = set()
LIVE_GROUPS: weakref.WeakSet = weakref.WeakSet()   # every open ShmGroup of this process
_hooks = {"exit": False, "sigterm": None}


def unlink_name(name: str) -> None:
    try:
        os.unlink(os.path.join(SHM_DIR, name))
    except FileNotFoundError:
        pass
    OWNED_NAMES.discard(name)


_SEGMENT_TAIL = re.compile(r"-cpushm_(\d+)-(\d+)-[0-9a-f]{8}$")   # <group>_<rank>-<creator pid>-<hex8>


class ShmCapacityError(RuntimeError):
    """/dev/shm has less free space than a segment needs (a tmpfs that fills up kills a rank with SIGBUS)."""


def check_segment_name(name: str, group_name: str, rank: int) -> str:
    """A segment name received from a peer: exactly ``<group_name>_<rank>-<pid>-<8 hex>``, one path
    component inside SHM_DIR. Checked BEFORE anything is opened, so a peer cannot point a rank at
    another file (``../etc/hostname``, ``/etc/hostname``)."""
    ok = (isinstance(name, str) and "/" not in name and "\0" not in name and ".." not in name
          and 0 < len(name) <= 255 and re.fullmatch(re.escape(f"{group_name}_{rank}-") + r"\d+-[0-9a-f]{8}", name))
    if not ok:
        raise ShmPayloadError(f"segment name {name!r} received for group rank {rank} is not accepted; "
                              f"expected {group_name}_{rank}-<pid>-<8 hex digits> inside {SHM_DIR}")
    return name


def check_capacity(nbytes: int, directory: str = SHM_DIR) -> None:
    """Refuse to size a segment the tmpfs cannot hold (``os.statvfs``), naming the bytes needed."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free < nbytes:
        raise ShmCapacityError(f"{directory} has {free} bytes free; a shared-memory segment of this group needs "
                               f"{nbytes} bytes (raise the tmpfs size, e.g. docker --shm-size, or lower "
                               f"EXPLAINER_SHM_CHUNK_BYTES)")


def sweep_segments_of(pid: int) -> list[str]:
    """Unlink every segment a (dead) process created; returns the names. Covers a rank SIGKILLed during set-up,
    before its peers knew its segment's name (after set-up, peers unlink a dead rank's segment themselves)."""
    suffix = re.compile(rf"-cpushm_\d+-{pid}-[0-9a-f]{{8}}$")
    swept = [n for n in os.listdir(SHM_DIR) if suffix.search(n)] if os.path.isdir(SHM_DIR) else []
    for name in swept:
        unlink_name(name)
    return swept


def sweep_stale_segments() -> list[str]:
    """Unlink every segment of ours (by name pattern, owned by this user) whose creator pid is gone:
    what a SIGKILLed process group left behind. Run on every set-up; returns the names."""
    if not os.path.isdir(SHM_DIR):
        return []
    swept, uid = [], os.getuid()
    for name in os.listdir(SHM_DIR):
        m = _SEGMENT_TAIL.search(name)
        if not m or pid_alive(int(m.group(2))):
            continue
        try:
            if os.lstat(os.path.join(SHM_DIR, name)).st_uid != uid:
                continue
        except FileNotFoundError:
            continue
        unlink_name(name)
        swept.append(name)
    return swept


def close_all() -> None:
    """Close every live channel of this process and unlink every name it created."""
    for g in list(LIVE_GROUPS):
        g.close()
    for name in list(OWNED_NAMES):
        unlink_name(name)


def _on_sigterm(signum, frame):
    for name in list(OWNED_NAMES):                       # then die as the signal intended
        unlink_name(name)
    prev = _hooks["sigterm"]
    signal.signal(signum, prev)
    if callable(prev):
        prev(signum, frame)
    else:
        os.kill(os.getpid(), signum)


def install_exit_hooks() -> None:
    if not _hooks["exit"]:
        _hooks["exit"] = True
        atexit.register(close_all)
        _mp_util.Finalize(None, close_all, exitpriority=100)  # forked children skip atexit
    if _hooks["sigterm"] is None:
        try:
            prev = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_sigterm)
            _hooks["sigterm"] = prev if prev is not None else signal.SIG_DFL
        except ValueError:        # not the main thread: atexit and finalizers still apply
            pass
