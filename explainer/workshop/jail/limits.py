"""What one learner's process may use: address space, processes, file size, open files, CPU time, no core file.

Set by the learner's process itself on its way into the jail (``zygote.py``), before the learner's code runs.
As root each check also gets a uid of its own (``check_uid``), so the process limit counts only that check.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

try:                                                  # POSIX only; on Windows there are no limits to set
    import resource
except ImportError:                                   # pragma: no cover
    resource = None

JAIL_UID_BASE = 200_000          # as root: a check's uid is JAIL_UID_BASE + a random number below 100000
INSIDE_UID = 65534               # the learner's uid as its own user namespace shows it ("nobody")
SCRATCH_BYTES = 64 << 20         # the learner's own /tmp/learner and /dev/shm (tmpfs: RAM)


@dataclass(frozen=True)
class Limits:
    memory: int = 3 << 30        # RLIMIT_AS: torch maps ~1.3 GB of address space when imported
    processes: int = 64          # RLIMIT_NPROC (per uid: the check's own uid as root)
    file_size: int = 16 << 20    # RLIMIT_FSIZE
    open_files: int = 256        # RLIMIT_NOFILE
    cpu_seconds: int = 300       # RLIMIT_CPU (per process)

    def describe(self) -> dict:
        return {"memory": f"{self.memory >> 20} MB of address space", "processes": f"{self.processes} processes",
                "file size": f"{self.file_size >> 20} MB per file", "open files": str(self.open_files),
                "CPU time": f"{self.cpu_seconds} s per process"}


LIMITS = Limits()


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def check_uid() -> int:
    """The uid a check's learner process runs as: its own as root, else the caller's."""
    return JAIL_UID_BASE + secrets.randbelow(100_000) if is_root() else os.getuid()


def own_processes(uid: int) -> int:
    """Processes of ``uid`` on this machine now (an ordinary user shares RLIMIT_NPROC with them)."""
    n = 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                n += 1
        except OSError:
            continue
    return n


def process_limit(uid: int, lim: Limits = LIMITS) -> int:
    """RLIMIT_NPROC for a check of ``uid``: its own uid counts only the check; a shared uid counts the rest too."""
    return lim.processes + (0 if uid >= JAIL_UID_BASE else own_processes(uid))


def apply(nproc: int, lim: Limits = LIMITS) -> None:
    """Set the limits on this process (they pass to every process it starts)."""
    if resource is None:
        return
    for which, value in ((resource.RLIMIT_AS, lim.memory), (resource.RLIMIT_NPROC, nproc),
                         (resource.RLIMIT_FSIZE, lim.file_size), (resource.RLIMIT_NOFILE, lim.open_files),
                         (resource.RLIMIT_CPU, lim.cpu_seconds), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
