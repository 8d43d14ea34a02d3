"""The jail the learner's code runs in: bubblewrap (Linux namespaces, no daemon), rlimits, an unprivileged uid.

``command(argv)`` wraps ``argv`` (the jailed Python, ``jailed.py``) in ``bwrap``:

* new mount, pid, network, IPC and UTS namespaces; a fresh tmpfs root holding only read-only binds of
  ``/usr`` (with ``/bin``, ``/lib`` ...), the interpreter, the venv and this package, plus a private
  ``/tmp`` of 64 MB, a minimal ``/dev`` and the pid namespace's own ``/proc``; no network (only a fresh
  loopback); a cleared environment;
* the pid namespace's init is bwrap's: when it ends (the check ends, ``--die-with-parent`` when the check
  process dies, even by SIGKILL) the kernel kills every process left in the namespace, so ``setsid`` and
  double forks cannot outlive the check;
* an unprivileged uid: as an ordinary user, a user namespace maps the inside uid 65534 to the caller;
  as root there is no user namespace (the kernel exempts uid 0 from RLIMIT_NPROC even inside one) and
  ``jailed.py`` drops at once to a uid of its own per check (kuid != 0, no capabilities);
* ``limits(uid)`` in ``preexec``: address space, processes, file size, open files, CPU time, no core.

Why bubblewrap: it is Flatpak's sandbox, one small Debian package (installed by ``scripts/setup.sh`` like
graphviz), needs no daemon or root, and builds exactly the namespaces above from the command line.
Where it is missing or namespaces are refused (macOS, Windows, a container without user namespaces)
``available()`` says why, and checks run under the rlimits alone, announced as not isolated.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

try:                                                  # POSIX only; on Windows there are no limits to set
    import resource
except ImportError:                                   # pragma: no cover
    resource = None

PACKAGE = Path(__file__).resolve().parents[1]     # the installed explainer package
JAIL_UID_BASE = 200_000          # as root: the jail's uid is JAIL_UID_BASE + (check pid % 100000)
NOBODY = 65534
TMP_BYTES = 64 << 20             # the jail's private /tmp (a tmpfs: RAM)


@dataclass(frozen=True)
class Limits:
    memory: int = 3 << 30        # RLIMIT_AS: torch maps ~1.3 GB of address space when imported
    processes: int = 64          # RLIMIT_NPROC (per uid: the jail's own uid as root)
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


def jail_uid(pid: int) -> int:
    """The uid the jail runs as: its own per check as root (so RLIMIT_NPROC counts only the jail)."""
    return JAIL_UID_BASE + pid % 100_000 if is_root() else os.getuid()


def _own_processes(uid: int) -> int:
    n = 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                n += 1
        except OSError:
            continue
    return n


def limits(uid: int, lim: Limits = LIMITS):
    """The preexec function: rlimits that the jail inherits (NPROC counts the uid's processes)."""
    nproc = lim.processes + (0 if uid >= JAIL_UID_BASE else _own_processes(uid))

    def preexec() -> None:
        if resource is None:
            return
        for which, value in ((resource.RLIMIT_AS, lim.memory), (resource.RLIMIT_NPROC, nproc),
                             (resource.RLIMIT_FSIZE, lim.file_size), (resource.RLIMIT_NOFILE, lim.open_files),
                             (resource.RLIMIT_CPU, lim.cpu_seconds), (resource.RLIMIT_CORE, 0)):
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass
    return preexec


def _binds() -> list[str]:
    """Folders the jailed Python needs, read-only: the interpreter's prefix, the venv, this package,
    and the import path's other folders (e.g. PYTHONPATH); each at its own path (bwrap makes the parents)."""
    want = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
            str(PACKAGE)]
    want += [p for p in sys.path if p and os.path.isdir(p)]
    out: list[str] = []
    for p in want:
        for q in {os.path.abspath(p), os.path.realpath(p)}:
            if q.startswith("/usr/") or q == "/usr" or any(q == o or q.startswith(o + "/") for o in out):
                continue
            out = [o for o in out if not o.startswith(q + "/")] + [q]
    return sorted(out)


def _root_links() -> list[str]:
    args = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def command(argv: list[str]) -> list[str]:
    """``argv`` inside the jail (bwrap must be ``available()``)."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "jail"]
    if not is_root():
        args += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    args += ["--tmpfs", "/", "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
             "--ro-bind", "/usr", "/usr", *_root_links()]
    if os.path.exists("/etc/ld.so.cache"):
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    made: set[str] = set()
    for p in _binds():
        for parent in reversed(Path(p).parents[:-1]):
            if str(parent) not in made:                   # parents 0755 (bwrap's own follow the umask)
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", p, p]
    args += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp", "--clearenv",
             "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
             "--setenv", "LANG", "C.UTF-8", "--setenv", "OMP_NUM_THREADS", "1"]
    path = [str(PACKAGE.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    args += ["--setenv", "PYTHONPATH", os.pathsep.join(path)]          # the same package as the grader's
    return args + ["--", *argv]


def python_argv(uid: int | None) -> list[str]:
    """The jailed harness: no script folder or cwd on sys.path (-P), no user site (-s), no bytecode written."""
    flags = ["-s", "-B"] + (["-P"] if sys.version_info >= (3, 11) else [])
    return [sys.executable, *flags, "-m", "explainer.workshop.jailed"] + ([f"--uid={uid}"] if uid else [])


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(True, "") when a jail can be made here, else (False, why). ``EXPLAINER_WORKSHOP_JAIL=off`` turns it off."""
    if os.environ.get("EXPLAINER_WORKSHOP_JAIL", "").lower() in ("off", "0", "no"):
        return False, "EXPLAINER_WORKSHOP_JAIL=off"
    if not sys.platform.startswith("linux"):
        return False, f"no Linux namespaces on {sys.platform}"
    if shutil.which("bwrap") is None:
        return False, "bubblewrap (bwrap) is not installed: sudo apt-get install bubblewrap"
    try:
        proc = subprocess.run(command(["/bin/true"]), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not start: {exc}"
    if proc.returncode != 0:
        return False, f"bwrap cannot make namespaces here: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    return True, ""


def notice() -> str:
    """The one line shown when checks are not isolated ('' when they are)."""
    ok, why = available()
    return "" if ok else (f"note: the learner's code runs under rlimits only, not isolated ({why}); "
                          f"a submission could affect this machine or other checks")
