"""Inside the jail: the warm process. It pays the heavy imports once (torch, the exercises) and then makes, for
each check, a fresh learner's process in namespaces of its own.

Started by ``warm.py`` as ``python -s -B -P -m explainer.workshop.jail.zygote FD`` inside ``view.command``'s
bubblewrap (or, where there is no jail, as a plain process), with a control socket on fd FD. One message at a
time: ``{"op": "spawn", "uid", "nproc", "covers", "isolated"}`` with four file descriptors (the learner's
requests pipe, its replies pipe, its output pipe, the keeper socket) forks a keeper and answers ``{"pid"}``.

The keeper (one per check) enters new mount, pid, network, IPC and UTS namespaces, forks their init (pid 1: it
makes the learner's mounts, forks the learner's process and reaps its orphans) and waits. When the check writes
on the keeper socket or closes it (the check wants the learner gone, or has ended) it kills the init, and with it,
by the kernel's rule for a pid namespace, every process the learner started; when the learner's process ends by
itself it sends back how (``{"status": wait status}``).

Before any learner code: a private mount namespace; its own ``/proc`` (its own processes only); fresh tmpfs at
``/tmp/learner`` (its working folder, HOME and TMPDIR) and ``/dev/shm``; ``/dev/null`` over every FIFO or socket
of the visible folders (``mounts``, in the init); then in the learner's process, as root a uid of its own, a user
namespace of its own where it is uid ``INSIDE_UID`` (its own kernel keyrings), no capability in any set, no Unix
sockets (seccomp), and the limits (``drop``); then ``learner_process.serve``. Nothing of the warm process is reachable from there:
it lives in another pid namespace, and its file descriptors are closed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

from explainer.workshop.jail import learner_process, limits, namespaces
from explainer.workshop.jail.view import SCRATCH

NEW_NAMESPACES = (namespaces.CLONE_NEWNS | namespaces.CLONE_NEWPID | namespaces.CLONE_NEWNET
                  | namespaces.CLONE_NEWIPC | namespaces.CLONE_NEWUTS)
INSIDE_UID = 1000                # the learner's uid as its own user namespace shows it
PROC_COVERS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")     # bwrap's, over the jail's /proc


def main(argv: list[str]) -> None:
    control = socket.socket(fileno=int(argv[0]))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)         # the kernel reaps the keepers
    control.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
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
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def keeper(req: dict, fds: list[int]) -> None:
    """One check's keeper: the learner's process's parent, its killer, the reporter of how it ended."""
    requests, replies, output, keep = fds
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _close_all_but(set(fds))
    try:
        if req["isolated"]:
            namespaces.unshare(NEW_NAMESPACES)
        pid = os.fork()
    except OSError as exc:                                # the kernel refused: said where the check reads
        os.write(output, f"the jail could not start the learner's process: {exc}\n".encode())
        os._exit(70)
    if pid == 0:
        os.close(keep)
        (init if req["isolated"] else learner)(req, requests, replies, output)
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


def init(req: dict, requests: int, replies: int, output: int) -> None:
    """Pid 1 of the learner's pid namespace (isolated): its mounts, then the learner's process, whose orphans it
    reaps; it ends with the learner's process and passes on how (a signal as 128 + its number)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    try:
        if req["isolated"]:
            mounts(req)
        pid = os.fork()
    except BaseException as exc:                          # noqa: BLE001 - said on the output, then exit
        os.write(output, f"the jail could not start the learner's process: {exc}\n".encode())
        os._exit(70)
    if pid == 0:
        learner(req, requests, replies, output)
    for fd in (requests, replies, output):
        os.close(fd)
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            os._exit(70)
        if done == pid:
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def learner(req: dict, requests: int, replies: int, output: int) -> None:
    """The learner's process: its uid, user namespace, capabilities (none), system calls, limits; then the
    learner's code (it never returns)."""
    try:
        if req["isolated"]:
            drop(req)
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


def mounts(req: dict) -> None:
    """The learner's own /proc, scratch folder and /dev/shm, and /dev/null over every special file."""
    ns = namespaces
    ns.mount(None, "/", None, ns.MS_REC | ns.MS_PRIVATE)
    for cover in PROC_COVERS:
        try:
            ns.umount(cover)
        except OSError:
            pass
    ns.mount("proc", "/proc", "proc", ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC)
    uid, gid = _ids(req)
    ns.mount("tmpfs", SCRATCH, "tmpfs", ns.MS_NOSUID | ns.MS_NODEV,
             f"size={limits.SCRATCH_BYTES},mode=0700,uid={uid},gid={gid}")
    ns.mount("tmpfs", "/dev/shm", "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, f"size={limits.SCRATCH_BYTES},mode=1777")
    for path in req["covers"]:
        ns.mount("/dev/null", path, None, ns.MS_BIND)


def _ids(req: dict) -> tuple[int, int]:
    """The learner's uid and gid outside its user namespace: its own as root, else the caller's."""
    return (req["uid"], req["uid"]) if os.geteuid() == 0 else (os.getuid(), os.getgid())


def drop(req: dict) -> None:
    """As root a uid of its own; a user namespace where it is ``INSIDE_UID``; no capability; no Unix sockets."""
    ns = namespaces
    uid, gid = _ids(req)
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    ns.unshare(ns.CLONE_NEWUSER)
    ns.map_user(INSIDE_UID, uid, gid)
    ns.drop_capabilities()
    if ns.effective_capabilities() or os.geteuid() != INSIDE_UID:
        raise RuntimeError("the learner's process kept a capability or its uid")
    ns.forbid_unix_sockets()


if __name__ == "__main__":
    main(sys.argv[1:])
