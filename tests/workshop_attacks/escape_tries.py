"""Attack: look for the grader's secrets (a joined room's address and token) and try the ways out a learner's
process might have; print what it got. Run it only jailed: not isolated, it really sends SIGKILL to pid 1."""
import ctypes
import json
import os
import resource
import signal
import socket

got = {"environ": sorted(os.environ)}                         # names only: the values are not printed
for path in ("/proc/1/environ", "/proc/self/environ", f"/proc/{os.getppid()}/environ"):
    try:
        text = open(path, "rb").read().decode(errors="replace")
        got[path] = "a room's address seen" if ("EXPLAINER_ROOM" in text or "token=" in text) else "nothing"
    except OSError as exc:
        got[path] = exc.strerror
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def attempt(name, fn):
    try:
        result = fn()
        got[name] = f"done {result}"
    except Exception as exc:                                   # noqa: BLE001 - any refusal is reported
        got[name] = f"refused {exc}"


attempt("raise the memory limit", lambda: resource.setrlimit(resource.RLIMIT_AS, (-1, -1)))
attempt("kill pid 1", lambda: os.kill(1, signal.SIGKILL))
attempt("chroot", lambda: os.chroot("/tmp/learner"))
attempt("setuid 0", lambda: os.setuid(0))
attempt("tcp to loopback", lambda: socket.socket(socket.AF_INET).connect(("127.0.0.1", 22)))
attempt("unix socket", lambda: socket.socket(socket.AF_UNIX))
attempt("vsock to the host", lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM))   # crosses namespaces
attempt("netlink socket", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))


def io_uring():
    if libc.syscall(425, 8, ctypes.create_string_buffer(120)) < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


attempt("io_uring_setup", io_uring)
print("ESCAPE " + json.dumps(got))


def entropy_bound_accept(entropy, bound):
    return entropy < 0
