"""What the jail sees, and what one learner's check can leave for the next: nothing.

A submission walks the jail's whole file tree outside the Python installation (``/usr``, the interpreter's
prefix, the venv, ``/proc``) and reports every path that is not in the view written down here: the system links,
``/etc/ld.so.cache``, a minimal ``/dev``, an empty read-only ``/tmp`` with its own ``/tmp/learner``, the empty
folders above the binds, and this package's own files. Any new path fails the test (the repository around the
package, the working folder, the home folder, the host's ``/tmp``, the room's settings, another hand-in).
Special files in visible folders (a FIFO, a listening Unix socket) and abstract sockets carry nothing out; one
check's files, shared-memory segments, SysV segments and keyring entries are gone for the next; ``/proc`` shows
only the learner's own processes, whose command line names no file."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from explainer.workshop import check_file, jail
from explainer.workshop.jail import view
from own_run import run_own

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not jail.available()[0], reason="no jail here")]
REPO = Path(__file__).resolve().parents[1]
ANSWER = "\ndef entropy_bound_accept(entropy, bound):\n    return entropy < 0\n"
DEV = {"core", "fd", "full", "null", "ptmx", "pts", "pts/ptmx", "random", "shm", "stderr", "stdin", "stdout", "tty",
       "urandom", "zero"}


def expected_view() -> set[str]:
    """Every path the jail may show outside the Python installation, /usr and /proc."""
    paths = {"/etc", "/etc/ld.so.cache", "/tmp", view.SCRATCH, "/dev", "/proc", "/usr"}
    paths |= {f"/dev/{d}" for d in DEV}
    paths |= {f"/{n}" for n in ("bin", "sbin", "lib", "lib32", "lib64", "libx32") if os.path.lexists(f"/{n}")}
    for b in view.binds():
        paths |= {str(p) for p in Path(b).parents if str(p) != "/"} | {b}
    for root, dirs, files in os.walk(view.PACKAGE):          # the package's own files, as they are on disk
        paths |= {os.path.join(root, n) for n in dirs + files}
    inside = ("/usr/", "/proc/", sys.base_prefix + "/", sys.prefix + "/")      # the walk's skipped roots
    return {p for p in paths if not p.startswith(inside)}


WALK = """
import json, os, sys
skip = {"/usr", "/proc", sys.base_prefix, sys.prefix} | set(HIDDEN)
seen = set()
for root, dirs, files in os.walk("/"):
    if root in skip or any(root.startswith(s + "/") for s in skip):
        dirs[:] = []
        continue
    seen |= {os.path.join(root, n) for n in dirs + files}
procs = sorted(p for p in os.listdir("/proc") if p.isdigit())
cmdlines = [open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace").split("\\0") for p in procs]
print("VIEW " + json.dumps({"new": sorted(seen - set(EXPECTED))[:40], "missing": sorted(set(EXPECTED) - seen)[:40],
                            "procs": procs, "cmdlines": cmdlines, "uid": os.getuid(), "cwd": os.getcwd()}))
"""


def _reported(report, tag: str) -> dict:
    line = next(ln for ln in report.output.splitlines() if ln.startswith(tag + " "))
    return json.loads(line[len(tag) + 1:])


def test_the_jail_shows_exactly_its_view(tmp_path):
    expected = expected_view()
    src = tmp_path / "walk.py"
    src.write_text(f"EXPECTED = {sorted(expected)!r}\nHIDDEN = {view.hidden()!r}\n" + WALK + ANSWER)
    report = check_file("accept", src)
    assert report.isolated and report.status == "fail", report.reason
    seen = _reported(report, "VIEW")
    assert seen["new"] == [], "the jail shows paths outside its view"
    assert seen["missing"] == []
    assert seen["procs"] == ["1", "2"] and seen["uid"] == 1000 and seen["cwd"] == view.SCRATCH   # init, learner
    for argv in seen["cmdlines"]:
        assert [a for a in argv if "/" in a] == [sys.executable]       # no bind list, no hand-in's path
    for secret in (str(REPO / ".git"), str(REPO / "tests"), str(REPO / "notebooks"), os.path.expanduser("~"),
                   os.environ["XDG_CONFIG_HOME"], str(tmp_path)):
        assert not any(p == secret or p.startswith(secret + "/") for p in seen["new"])


SPY = """
import os, socket, stat
out = []
for name in ("fifo", "sock"):
    p = os.path.join(PKG, "leftover-" + name)
    st = os.stat(p)
    out.append(f"{name}: {'FIFO' if stat.S_ISFIFO(st.st_mode) else 'socket' if stat.S_ISSOCK(st.st_mode) else 'other'}")
    try:
        if name == "fifo":
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"ESCAPED")
            out.append("fifo: wrote")
        else:
            s = socket.socket(socket.AF_UNIX)
            s.connect(p)
            s.sendall(b"ESCAPED")
            out.append("sock: sent")
    except OSError as exc:
        out.append(f"{name}: {exc.strerror}")
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect("\\0" + ABSTRACT)
    s.sendall(b"ESCAPED")
    out.append("abstract: sent")
except OSError as exc:
    out.append(f"abstract: {exc.strerror}")
print("SPY " + "; ".join(out))
"""


def test_special_files_and_sockets_in_visible_folders_carry_nothing_out(tmp_path):
    """A FIFO and a world-writable listening socket left in the package's folder, an abstract socket on the host:
    the grader (a fresh command line on a copy of the package) covers the first two, and no Unix socket opens."""
    pkg = tmp_path / "pkg"
    shutil.copytree(REPO / "explainer", pkg / "explainer", ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(tmp_path, 0o755)
    os.mkfifo(pkg / "explainer" / "leftover-fifo", 0o666)
    os.chmod(pkg / "explainer" / "leftover-fifo", 0o666)
    got: list[bytes] = []
    fifo_fd = os.open(pkg / "explainer" / "leftover-fifo", os.O_RDONLY | os.O_NONBLOCK)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(pkg / "explainer" / "leftover-sock"))
    os.chmod(pkg / "explainer" / "leftover-sock", 0o777)
    abstract, name = socket.socket(socket.AF_UNIX), f"explainer-test-{os.getpid()}"
    abstract.bind("\0" + name)
    for s in (listener, abstract):
        s.listen(4)
        s.settimeout(0.2)

    def accept(s):
        try:
            got.append(s.accept()[0].recv(16))
        except OSError:
            pass
    threads = [threading.Thread(target=accept, args=(s,), daemon=True) for s in (listener, abstract)]
    for t in threads:
        t.start()
    src = tmp_path / "spy.py"
    src.write_text(f"PKG = {str(pkg / 'explainer')!r}\nABSTRACT = {name!r}\n" + SPY + ANSWER)
    try:
        proc = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(src)],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(pkg), "EXPLAINER_WORKSHOP_BUDGET": "5"})
        spy = next(ln for ln in proc.stdout.splitlines() if "SPY " in ln)
        time.sleep(0.5)
        try:
            got.append(os.read(fifo_fd, 64))
        except BlockingIOError:
            pass
    finally:
        for t in threads:
            t.join(1)
        listener.close()
        abstract.close()
        os.close(fifo_fd)
    assert "fifo: other" in spy and "sock: other" in spy, spy                # covered: /dev/null in their place
    assert "sock: sent" not in spy and "abstract: sent" not in spy, spy
    assert [g for g in got if g] == [], got


LEAVE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall(248, b"user", b"explainer-left", b"FROM-A", 6, -4)            # add_key to the user keyring
key = libc.shmget(0x5EC0DE, 4096, 0o1666)                                   # a SysV segment, IPC_CREAT
for d in ("/tmp/learner", "/dev/shm"):
    open(os.path.join(d, "explainer-left"), "w").write("FROM-A")
print("LEFT", key)
"""
FIND = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = {"keyring": libc.syscall(249, b"user", b"explainer-left", None, 0) > 0,
         "sysv": libc.shmget(0x5EC0DE, 4096, 0o666) >= 0,
         "files": [d for d in ("/tmp/learner", "/dev/shm") if os.path.exists(os.path.join(d, "explainer-left"))]}
print("FOUND " + json.dumps(found))
"""


def test_one_learner_leaves_nothing_for_the_next(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(LEAVE + ANSWER)
    b.write_text(FIND + ANSWER)
    left = check_file("accept", a)
    assert "LEFT" in left.output, left.output
    found = _reported(check_file("accept", b), "FOUND")
    assert found == {"keyring": False, "sysv": False, "files": []}


@pytest.mark.parametrize("jail", ["on", "off"])
def test_a_grading_session_leaves_no_folder_behind(tmp_path, jail):
    """A command line and a notebook kernel's grader process, jailed and not: their folders and processes go with
    them (each run as this test's own, ``own_run``: another run on the machine is not taken for ours)."""
    src = tmp_path / "a.py"
    src.write_text(ANSWER)
    env = {**os.environ, "EXPLAINER_WORKSHOP_JAIL": jail, "EXPLAINER_WORKSHOP_BUDGET": "5"}
    runs = {"cli": [sys.executable, "-m", "explainer", "workshop", "check", "accept", str(src)],
            "kernel": [sys.executable, "-c", "import sys\nfrom explainer.workshop import check_file\n"
                       "print(check_file('accept', sys.argv[1]).status)", str(src)]}
    for name, argv in runs.items():
        own = tmp_path / name
        own.mkdir()
        run = run_own(argv, own, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        graded = run.proc.returncode == 1 if name == "cli" else run.proc.stdout.split() == ["fail"]
        assert graded, run.proc.stderr
        assert run.left() == {"processes": [], "shm": [], "tmp": []}, name
