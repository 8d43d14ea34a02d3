"""A command run as the test's own, so its leftover checks see only what this run made.

``run_own(argv, folder)`` starts the command under a small watcher process that is a child subreaper: every process
the command starts, even a daemon that double-forks or calls setsid, stays in the watcher's tree instead of
going to init. The command gets a TMPDIR of its own (``folder/tmp``) and, as root, a fresh ``/dev/shm`` (the
watcher runs in a mount namespace of its own). When the command has ended, the watcher waits a few seconds for
its tree to end, then writes down what is left (processes with their command lines, ``/dev/shm`` entries), kills
those processes by pid and exits with the command's code. Another run on the machine (another engineer's
tests, a CI run) is outside all three, so it cannot fail the check; a leak of this command's cannot hide.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PRIVATE_SHM = os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("mount") is not None

WATCHER = r"""
import ctypes, json, os, signal, subprocess, sys, time
report, private_shm, settle, argv = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3]), sys.argv[4:]
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:          # PR_SET_CHILD_SUBREAPER
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
if private_shm:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g,mode=1777", "tmpfs", "/dev/shm"], check=True)
code = subprocess.call(argv)

def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return

def tree():
    # every live process below this one (our orphans were reparented to us)
    children = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found

deadline = time.monotonic() + settle
while True:
    reap()
    left = tree()
    if not left or time.monotonic() > deadline:
        break
    time.sleep(0.1)
procs = []
for pid in left:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            procs.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
time.sleep(0.2)
reap()
with open(report, "w") as f:
    json.dump({"processes": procs, "shm": sorted(os.listdir("/dev/shm")) if private_shm else None}, f)
sys.exit(code)
"""


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    processes: list[str]                 # command lines still running after the command and the settling time
    shm: list[str] | None                # the private /dev/shm's entries at the end (None: not root, not private)
    tmp: list[str]                       # what is left in the command's own TMPDIR (this user's private grading
                                         # folder, explainer-UID, is kept: what is left inside it counts)

    def left(self) -> dict:
        """Everything this run left behind (empty lists when nothing)."""
        return {"processes": self.processes, "shm": self.shm or [], "tmp": self.tmp}


def run_own(argv: list[str], folder: Path, env: dict | None = None, settle: float = 10.0, **kw) -> Run:
    """Run ``argv`` as this test's own (see the module's docstring); ``kw`` goes to ``subprocess.run``."""
    tmp, report = folder / "tmp", folder / "watcher.json"
    tmp.mkdir(exist_ok=True)
    env = {**(os.environ if env is None else env), "TMPDIR": str(tmp)}
    prefix = ["unshare", "--mount", "--propagation", "private"] if PRIVATE_SHM else []
    proc = subprocess.run([*prefix, sys.executable, "-c", WATCHER, str(report), "1" if PRIVATE_SHM else "0",
                           str(settle), *argv], env=env, **kw)
    if not report.exists():
        raise RuntimeError(f"the watcher ended without its report (exit {proc.returncode}): {proc.stderr!r:.2000}")
    seen = json.loads(report.read_text())
    report.unlink()
    private = f"explainer-{os.geteuid()}"
    left = [n for n in os.listdir(tmp) if n != private]
    if (tmp / private).is_dir():
        left += [f"{private}/{n}" for n in os.listdir(tmp / private)]
    return Run(proc, seen["processes"], seen["shm"], sorted(left))
