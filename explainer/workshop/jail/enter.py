"""The way into a learner's corner of the warm jail, in the order the kernel needs it.

The keeper (``zygote.py``) has made new mount, pid, network, IPC and UTS namespaces; ``init`` is the first process
in them (pid 1): it makes the learner's mounts (``mounts``: its own ``/proc``, showing its own processes only; a
fresh tmpfs at ``/tmp/learner``, its working folder, HOME and TMPDIR, and at ``/dev/shm``; ``/dev/null`` over
every FIFO or socket of the visible folders), forks the learner's process and reaps its orphans, and ends with
it (a signal as 128 + its number). The learner's process then ``drop``s everything: as root a uid of its own;
a user namespace of its own where it is ``INSIDE_UID`` (its own kernel keyrings); no capability in any set; no
Unix sockets (seccomp). Only then does the learner's code run.

``python -m explainer.workshop.jail.enter`` is the probe ``view.available()`` runs inside the jail: the same way in,
with a learner that only exits, so a machine that cannot make these namespaces says so before any check.
"""

from __future__ import annotations

import os
import signal
import sys

from explainer.workshop.jail import limits, namespaces
from explainer.workshop.jail.view import SCRATCH

NEW_NAMESPACES = (namespaces.CLONE_NEWNS | namespaces.CLONE_NEWPID | namespaces.CLONE_NEWNET
                  | namespaces.CLONE_NEWIPC | namespaces.CLONE_NEWUTS)
INSIDE_UID = 1000                # the learner's uid as its own user namespace shows it
PROC_COVERS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")     # bwrap's, over the jail's /proc


def init(req: dict, start_learner, fds: tuple[int, ...]) -> None:
    """Pid 1 of the learner's pid namespace: its mounts, then ``start_learner()`` in a process of its own (``fds``:
    the learner's, closed here), whose orphans it reaps; it ends with it and passes on how. Never returns."""
    output = fds[-1]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    try:
        mounts(req)
        pid = os.fork()
    except BaseException as exc:                          # noqa: BLE001 - said on the output, then exit
        os.write(output, f"the jail could not start the learner's process: {exc}\n".encode())
        os._exit(70)
    if pid == 0:
        start_learner()
        os._exit(0)
    for fd in fds:
        os.close(fd)
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            os._exit(70)
        if done == pid:
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


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


def probe() -> int:
    """The way in, once, in a child (the caller's namespaces stay as they are), with a learner that exits at once:
    0 when every step works here."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            req = {"uid": limits.check_uid(), "covers": []}
            r, w = os.pipe()
            namespaces.unshare(NEW_NAMESPACES)
            inner = os.fork()
            if inner == 0:
                init(req, lambda: (drop(req), os._exit(0)), (r, w))
            os.close(r)
            os.close(w)
            status = os.waitpid(inner, 0)[1]
            code = 0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1
        finally:
            os._exit(code)
    status = os.waitpid(pid, 0)[1]
    return 0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1


if __name__ == "__main__":
    sys.exit(probe())
