"""Inside the jail: the warm process. It pays the heavy imports once (torch, the exercises) and then makes, for
each check, a fresh learner's process in namespaces of its own.

Started by ``warm.py`` as ``python -s -B -P -m explainer.workshop.jail.zygote FD`` inside ``view.command``'s
bubblewrap (or, where there is no jail, as a plain process), with a control socket on fd FD. One message at a
time: ``{"op": "spawn", "uid", "nproc", "covers", "isolated"}`` with four file descriptors (the learner's
requests pipe, its replies pipe, its output pipe, the keeper socket) forks a keeper and answers ``{"pid"}``.

The keeper (one per check) enters new mount, pid, network, IPC and UTS namespaces and forks their init
(``enter.init``: pid 1, the learner's mounts, the learner's process, its orphans reaped), then waits. When the
check writes on the keeper socket or closes it (the check wants the learner gone, or has ended) it kills the
init, and with it, by the kernel's rule for a pid namespace, every process the learner started; when the
learner's process ends by itself it sends back how (``{"status": wait status}``). The learner's process drops
its uid, capabilities and Unix sockets (``enter.drop``) and sets its limits before ``learner_process.serve`` runs
the learner's code. Nothing of the warm process is reachable from there: it lives in another pid namespace, and
its file descriptors are closed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

from explainer.workshop.jail import enter, learner_process, limits, namespaces
from explainer.workshop.jail.view import SCRATCH


def main(argv: list[str]) -> None:
    control, parent = socket.socket(fileno=int(argv[0])), os.getppid()
    if argv[1] == "isolated":                             # the way in, once, before the imports
        try:
            ok, why = enter.probe() == 0, "the probe's learner did not start"
        except OSError as exc:
            ok, why = False, str(exc)
        control.send(json.dumps({"probe": ok, "why": "" if ok else why}).encode())
        if not ok:
            os._exit(0)
    else:
        control.send(json.dumps({"probe": True}).encode())
    learner_process.warm()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)         # the kernel reaps the keepers
    control.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        if not select.select([control], [], [], 1.0)[0]:
            if os.getppid() != parent:                    # the grader is gone (a datagram socket has no end)
                break
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(control, 1 << 16, 4)
        except OSError:
            break
        if not msg:
            break                                         # the grader is gone: so is the jail
        req = json.loads(msg)
        if req.get("op") != "spawn" or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"error": "expected spawn with four file descriptors"}).encode())
            continue
        pid = os.fork()
        if pid == 0:
            control.close()
            keeper(req, fds)
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"pid": pid}).encode())
    os._exit(0)


def _close_all_but(keep: set[int]) -> None:
    """Close every file descriptor above 2 but ``keep``."""
    low = 3
    for fd in sorted(keep) + [1 << 16]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


def keeper(req: dict, fds: list[int]) -> None:
    """One check's keeper: the learner's process's parent, its killer, the reporter of how it ended."""
    requests, replies, output, keep = fds
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _close_all_but(set(fds))
    try:
        if req["isolated"]:
            namespaces.unshare(enter.NEW_NAMESPACES)
        pid = os.fork()
    except OSError as exc:                                # the kernel refused: said where the check reads
        os.write(output, f"the jail could not start the learner's process: {exc}\n".encode())
        os._exit(70)
    if pid == 0:
        os.close(keep)
        if req["isolated"]:
            enter.init(req, lambda: learner(req, requests, replies, output), (requests, replies, output))
        learner(req, requests, replies, output)
    for fd in (requests, replies, output):
        os.close(fd)
    status = _watch(pid, keep)
    try:
        os.write(keep, json.dumps({"status": status}).encode() + b"\n")
    except OSError:                                       # the check has gone already
        pass
    os._exit(0)


def _watch(pid: int, keep: int) -> int:
    """Wait for the learner's process; kill it when the check writes or hangs up on ``keep``."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        ready, _, _ = select.select([keep], [], [], 0.05)
        if ready:
            for kill in (lambda: os.kill(pid, signal.SIGKILL), lambda: os.killpg(pid, signal.SIGKILL)):
                try:
                    kill()                                # a pid namespace's init: all of it ends
                except OSError:
                    pass
            return os.waitpid(pid, 0)[1]


def learner(req: dict, requests: int, replies: int, output: int) -> None:
    """The learner's process: its uid, user namespace, capabilities (none), system calls, limits; then the
    learner's code (it never returns)."""
    try:
        if req["isolated"]:
            enter.drop(req)
            os.chdir(SCRATCH)
        else:
            os.setsid()                                   # its session: the keeper ends the group
            os.chdir(req["scratch"])
        limits.apply(req["nproc"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        _close_all_but({requests, replies})
    except BaseException as exc:                          # noqa: BLE001 - said on the output, then exit
        os.write(output, f"the jail could not start the learner's process: {exc}\n".encode())
        os._exit(70)
    learner_process.serve(requests, replies)


if __name__ == "__main__":
    main(sys.argv[1:])
