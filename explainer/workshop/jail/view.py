"""What the jail sees: the interpreter, the installed dependencies and this package's own folder, read-only;
nothing else of the machine.

``command(argv)`` wraps ``argv`` in bubblewrap (Linux namespaces, no daemon): new mount, pid, network, IPC,
UTS (and, for an ordinary user, user) namespaces, and a fresh root holding only read-only binds of

* ``/usr`` (with ``/bin``, ``/lib`` ... as links) and ``/etc/ld.so.cache``: the system's programs and libraries;
* the interpreter's installation (``sys.base_prefix``; its ``site-packages`` hidden under an empty folder when
  the grader runs from a venv that does not use them) and the venv (``sys.prefix``);
* this package's folder (``PACKAGE``) and nothing around it: not the working folder, not the repository holding
  the package (``.git``, ``tests/``, ``notebooks/``, the solutions), not the home folder, not the host's ``/tmp``;

each at its own path, the folders above them empty. Then the pid namespace's own ``/proc``, a minimal ``/dev``,
an empty mount point ``/tmp/learner``, no network (each learner's process gets a network namespace of its own
with no interface up, not even loopback) and a cleared environment; at the end
``/``, ``/tmp`` and ``/dev`` are made read-only, so one learner's process can leave nothing for the next. The
command line of the jail names no file of the machine beyond these (the bind list is visible to a process in
the jail's first pid namespace; each learner's process has a pid namespace of its own).

``special_files()`` lists the FIFOs, sockets and device files inside those binds (``/usr`` aside: only root can
make one there), once per grading session, and ``special_in_package()`` the package folder's again at each check:
a FIFO or socket left in a visible folder would carry data out, so each learner's process covers them with
``/dev/null`` (``zygote.py``); it also refuses to open Unix sockets at all (``namespaces.forbid_unix_sockets``).

Where bubblewrap is missing or namespaces are refused (macOS, Windows, a container without user namespaces)
``available()`` says why (it runs ``enter.py``'s probe: the whole way into a learner's corner, once), and checks
run under the limits alone, announced as not isolated (``notice()``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from explainer.workshop.jail.limits import is_root

PACKAGE = Path(__file__).resolve().parents[2]     # the installed explainer package (explainer/)
SCRATCH = "/tmp/learner"                           # each learner's process mounts its own tmpfs here


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def hidden() -> list[str]:
    """Folders inside the binds that the jail shows empty: the interpreter's own site-packages when the grader
    runs from a venv that does not use them."""
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"]
    on_path = any(os.path.realpath(p) == os.path.realpath(base) for p in sys.path if p)
    return [] if on_path or sys.prefix == sys.base_prefix or not os.path.isdir(base) else [base]


def binds() -> list[str]:
    """The folders bound read-only, each at its own path (both the path and its real path, for a symlinked venv)."""
    want = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)), str(PACKAGE)]
    out: list[str] = []
    for p in want:
        for q in {os.path.abspath(p), os.path.realpath(p)}:
            if _inside(q, "/usr") or any(_inside(q, o) for o in out):
                continue
            out = [o for o in out if not _inside(o, q)] + [q]
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


def command(argv: list[str], warm: bool = False) -> list[str]:
    """``argv`` inside the jail (bwrap must be ``available()``). An ordinary user's jail maps the caller's uid to
    itself in a user namespace of its own; ``warm``: there with CAP_SYS_ADMIN (as root the jail keeps root's), for
    the warm process, which makes each learner's namespaces and drops every capability there."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "jail"]
    if not is_root():
        args += ["--unshare-user"] + (["--cap-add", "CAP_SYS_ADMIN"] if warm else [])
    args += ["--tmpfs", "/", "--ro-bind", "/usr", "/usr", *_root_links()]
    if os.path.exists("/etc/ld.so.cache"):
        args += ["--perms", "0755", "--dir", "/etc", "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    args += ["--perms", "0755", "--dir", "/tmp", "--perms", "0755", "--dir", SCRATCH]
    made: set[str] = set()
    for p in binds():
        for parent in reversed(Path(p).parents[:-1]):
            if str(parent) not in made:                   # parents 0755 (bwrap's own follow the umask)
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", p, p]
    for h in hidden():
        args += ["--tmpfs", h]
    args += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/",
             "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", SCRATCH, "--setenv", "TMPDIR",
             SCRATCH, "--setenv", "LANG", "C.UTF-8", "--setenv", "OMP_NUM_THREADS", "1",
             "--setenv", "PYTHONPATH", str(PACKAGE.parent)]                   # the same package as the grader's
    return args + ["--", *argv]


def special_files_scan() -> subprocess.Popen | None:
    """Start listing the FIFOs, sockets and devices inside the binds (``/usr`` aside) in the background."""
    roots = [b for b in binds() if os.path.isdir(b)]
    if not roots or shutil.which("find") is None:
        return None
    prune = [a for h in hidden() for a in ("-path", h, "-prune", "-o")]
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []           # behind the imports it runs beside
    return subprocess.Popen([*nice, "find", *roots, *prune, "(", "-type", "p", "-o", "-type", "s", "-o", "-type", "b", "-o",
                             "-type", "c", ")", "-print0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def special_files(scan: subprocess.Popen | None, timeout: float = 60.0) -> list[str]:
    """The scan's result (paths as the jail shows them: the binds keep their paths)."""
    if scan is None:
        return []
    try:
        out, _ = scan.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        scan.kill()
        out, _ = scan.communicate()
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def special_in_package() -> list[str]:
    """The package folder's special files now (a quick walk, done at each check: the folder is small)."""
    found, stack = [], [str(PACKAGE)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif not (e.is_file(follow_symlinks=False) or e.is_symlink()):
                    found.append(e.path)
    return found


def python_argv(module: str) -> list[str]:
    """A jailed Python: no script folder or cwd on sys.path (-P), no user site (-s), no bytecode written (-B)."""
    flags = ["-s", "-B"] + (["-P"] if sys.version_info >= (3, 11) else [])
    return [sys.executable, *flags, "-m", module]


def possible() -> tuple[bool, str]:
    """What can be told without running anything: (False, why) when no jail can be made here."""
    if os.environ.get("EXPLAINER_WORKSHOP_JAIL", "").lower() in ("off", "0", "no"):
        return False, "EXPLAINER_WORKSHOP_JAIL=off"
    if not sys.platform.startswith("linux"):
        return False, f"no Linux namespaces on {sys.platform}"
    if shutil.which("bwrap") is None:
        return False, "bubblewrap (bwrap) is not installed: sudo apt-get install bubblewrap"
    return True, ""


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(True, "") when a jail can be made here, else (False, why). ``EXPLAINER_WORKSHOP_JAIL=off`` turns it off."""
    ok, why = possible()
    if not ok:
        return ok, why
    try:
        proc = subprocess.run(command(python_argv("explainer.workshop.jail.enter"), warm=True), capture_output=True,
                              text=True, timeout=30, env=clean_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not start: {exc}"
    if proc.returncode != 0:                          # bwrap's own error, or the probe's (the way in refused)
        return False, f"cannot make the jail's namespaces here: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    return True, ""


def clean_env() -> dict:
    """bubblewrap's own environment: nothing of the caller's (its first process shows it in /proc)."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def notice(state: tuple[bool, str] | None = None) -> str:
    """The one line shown when checks are not isolated ('' when they are); ``state``: a session's own."""
    ok, why = state or available()
    return "" if ok else (f"note: the learner's code runs under rlimits only, not isolated ({why}); "
                          f"a submission could affect this machine or other checks")
