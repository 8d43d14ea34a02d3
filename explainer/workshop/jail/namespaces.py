"""The Linux calls a learner's process makes on its way into its own corner of the warm jail (``zygote.py``).

Python 3.11 has no ``os.unshare``, so these go through ``ctypes`` to the C library; each raises ``OSError``
naming the call when the kernel refuses.

* ``unshare(flags)``: new namespaces (mount, pid, network, IPC, UTS, user) for this process and its children;
* ``mount``: a fresh tmpfs or proc, a bind, a remount (the mount namespace is made private first);
* ``map_user(inside, uid, gid)``: in a new user namespace, ``inside`` is this process's uid (and gid);
* ``drop_capabilities()``: no capability left in any set (and none in the bounding set);
* ``forbid_unix_sockets()``: a seccomp filter: ``socket()`` opens only Internet sockets (AF_INET, AF_INET6, in
  the process's own empty network namespace); any other family fails with EACCES: Unix (a socket file left in a
  visible folder then connects nowhere), vsock (which reaches the host across namespaces), netlink, packet and
  the rest. ``io_uring_setup`` (which could open sockets around the filter) fails too, and a system call of
  another architecture (x32, or i386 through ``int 0x80``) fails with EPERM.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 2
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 4, 24, 38, 22, 2
LAST_CAP = 63
AF_INET, AF_INET6 = 2, 10        # the only socket families a learner's process may open
# (seccomp's AUDIT_ARCH value, socket's number, io_uring_setup's number) on the machines this runs on
ARCH = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _c(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_c(source), _c(target), _c(fstype), ctypes.c_ulong(flags), _c(data)), f"mount {target}")


def umount(target: str) -> None:
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def map_user(inside: int, uid: int, gid: int) -> None:
    """After ``unshare(CLONE_NEWUSER)``: ``inside`` is this process's uid and gid in its new user namespace.
    (A process that changed its uid is not dumpable, and then its /proc files are root's: made dumpable first,
    so it can write its own maps; only its own uid could reach it anyway.)"""
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(DUMPABLE)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{inside} {uid} 1"), ("gid_map", f"{inside} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty the bounding set, then every capability set (version 3 of capset: two 32-bit words per set)."""
    for cap in range(LAST_CAP + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)        # EINVAL past the kernel's last capability: fine
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data), "capset")


def effective_capabilities() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def forbid_unix_sockets() -> bool:
    """Install the seccomp filter (see the module's docstring: Internet sockets only, no io_uring, no foreign
    system calls); False where the architecture is not known."""
    known = ARCH.get(platform.machine())
    if known is None:
        return False
    audit_arch, nr_socket, nr_io_uring = known
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny, foreign = 0x7FFF0000, 0x00050000 | errno.EACCES, 0x00050000 | errno.EPERM
    prog = b"".join([
        _bpf(ld, 4),                          # 0: A = seccomp_data.arch
        _bpf(jeq, audit_arch, 1, 0),          # 1: this architecture: skip to 3
        _bpf(ret, foreign),                   # 2: another one (i386, int 0x80): EPERM
        _bpf(ld, 0),                          # 3: A = the system call's number
        _bpf(jge, 0x40000000, 6, 0),          # 4: x32 numbering: deny (11)
        _bpf(jeq, nr_socket, 0, 3),           # 5: socket(): look at its family (6), else (9)
        _bpf(ld, 16),                         # 6: A = args[0], the family (low word)
        _bpf(jeq, AF_INET, 2, 0),             # 7: AF_INET: allow (10)
        _bpf(jeq, AF_INET6, 1, 2),            # 8: AF_INET6: allow (10); any other family: deny (11)
        _bpf(jeq, nr_io_uring, 1, 0),         # 9: io_uring_setup: deny (11)
        _bpf(ret, allow),                     # 10
        _bpf(ret, deny),                      # 11
    ])
    program = ctypes.create_string_buffer(prog)
    fprog = struct.pack("@HP", len(prog) // 8, ctypes.addressof(program))      # struct sock_fprog
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0), "seccomp")
    return True
