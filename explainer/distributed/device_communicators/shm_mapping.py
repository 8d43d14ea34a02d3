"""The shared-memory segments of one group, as one rank maps them: create, exchange names, join, unlink, close,
and who is still alive (``shm.ShmGroup`` adds the data path on top).

The Python counterpart of the set-up half of vLLM's ``csrc/cpu/shm.cpp`` (``init_shm_manager`` /
``join_shm_manager``). Segment per rank (``/dev/shm/<group_name>_<rank>-<random hex>``, created ``O_EXCL`` with
mode 0600)::

    CTRL  4 KiB, one 64-byte line per counter, each written ONLY by the owner:
          line 0: magic, pid, state (ALIVE/CLOSED), waiting (1 while blocked on the doorbell)
          line 1+p: sent[p]  = chunks the owner has published to peer p   (monotonic int64)
          line 9+p: acked[p] = chunks the owner has consumed from peer p
    DATA  per peer p: outbox[p][0], outbox[p][1]   (double buffer, ``chunk_bytes`` + 4 KiB header room each)

Names are exchanged through the gloo group, and each owner unlinks its own name as soon as every rank has
mapped it, so a crash after set-up leaves nothing in /dev/shm (``shm_segments`` covers every other path). Each
rank also owns a doorbell (an abstract-namespace UNIX datagram socket, nothing in the filesystem) that peers
ring when it waits. A peer that closed its end or whose process is gone is reported as ``PeerGoneError``.
"""

from __future__ import annotations

import mmap
import os
import secrets
import select
import socket
import warnings
from typing import Callable

import torch

from explainer.distributed.device_communicators import shm_wait
from explainer.distributed.device_communicators.shm_header import ALIGN, HEADER_ROOM
from explainer.distributed.device_communicators.shm_segments import (LIVE_GROUPS, OWNED_NAMES, SHM_DIR,
                                                                     ShmCapacityError, check_capacity,
                                                                     check_segment_name, install_exit_hooks,
                                                                     sweep_stale_segments, unlink_name)
from explainer.distributed.procs import pid_alive

MAX_RANKS = 8          # vLLM MAX_SHM_RANK_NUM
DEFAULT_CHUNK_BYTES = 4 << 20   # one half-buffer; vLLM uses 2 MiB halves of a 4 MiB per-thread buffer
MIN_CHUNK_BYTES = 64 << 10
CTRL_BYTES = 4096
MAGIC = 0x4D485358               # "XSHM"
ALIVE, CLOSED = 1, 2
Q_PID, Q_STATE, Q_WAITING = 1, 2, 3   # int64 slots in CTRL line 0


class PeerGoneError(TimeoutError):
    """The peer's process is gone or it closed the channel: the awaited data can never arrive."""


def sent_slot(p: int) -> int:
    """The int64 index of ``sent[p]`` in a CTRL block."""
    return 8 * (1 + p)


def acked_slot(p: int) -> int:
    """The int64 index of ``acked[p]`` in a CTRL block."""
    return 8 * (1 + MAX_RANKS + p)


class ShmMapping:
    """One rank's segment and its read-only mappings of its peers' (the set-up half of vLLM's ``SHMManager``).

    ``exchange(str) -> list[str]`` all-gathers a string over the group (gloo) and ``barrier()``
    synchronises it; both are called collectively during set-up only.
    """

    def __init__(self, group_name: str, rank: int, world_size: int, *,
                 exchange: Callable[[str], list[str]], barrier: Callable[[], None],
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, timeout: float = 30.0,
                 unlink_after_join: bool = True, peer_labels: list[str] | None = None,
                 wait_policy: shm_wait.WaitPolicy = shm_wait.DEFAULT):
        if not 1 <= world_size <= MAX_RANKS:
            raise ValueError(f"world size {world_size}: the shared-memory channel takes 1..{MAX_RANKS} ranks")
        if chunk_bytes < MIN_CHUNK_BYTES or chunk_bytes % ALIGN:
            raise ValueError(f"chunk_bytes {chunk_bytes}: accepted are multiples of {ALIGN} >= {MIN_CHUNK_BYTES}")
        if timeout <= 0:
            raise ValueError(f"timeout {timeout}: accepted are seconds > 0")
        if not os.path.isdir(SHM_DIR):
            raise RuntimeError(f"{SHM_DIR} does not exist: the shared-memory channel needs Linux POSIX shm")
        self.group_name, self.rank, self.world_size = group_name, rank, world_size
        self.chunk = chunk_bytes + HEADER_ROOM             # the header never pushes payload into an extra chunk
        self.timeout, self.wait_policy = float(timeout), wait_policy
        self.peer_labels = peer_labels or [f"group rank {p}" for p in range(world_size)]
        # group name + rank + creator pid + random suffix: the pid lets a launcher sweep what a killed rank left
        self.name = f"{group_name}_{rank}-{os.getpid()}-{secrets.token_hex(4)}"
        if "/" in self.name or len(self.name) > 255:
            raise ValueError(f"segment name {self.name!r}: accepted are names without '/' of <= 255 bytes")
        self.size = CTRL_BYTES + 2 * self.chunk * max(world_size - 1, 1)
        self.segment_names: list[str] = []
        self.closed, self._linked = False, False
        self._maps: list[mmap.mmap | None] = [None] * world_size
        self._bell: socket.socket | None = None
        self.blocked_waits = 0                            # how often a wait fell back to the doorbell
        install_exit_hooks()
        sweep_stale_segments()                            # segments of dead creators (a killed group)
        try:
            self._create()
            self.segment_names = list(exchange(self.name))
            self._join()
            barrier()                                    # every rank has mapped every segment
            if unlink_after_join:
                self.unlink()
        except BaseException:
            self.close()
            raise
        LIVE_GROUPS.add(self)

    # --- set-up ------------------------------------------------------------------------------
    def _create(self) -> None:
        path = os.path.join(SHM_DIR, self.name)
        check_capacity(self.size)                         # before sizing: a full tmpfs means SIGBUS later
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, 0o600)   # vLLM: shm_open(..., 0600)
        OWNED_NAMES.add(self.name)
        self._linked = True
        try:
            os.fchmod(fd, 0o600)                          # whatever the umask
            os.ftruncate(fd, self.size)
            try:                                          # reserve the pages now: ENOSPC here, not SIGBUS later
                os.posix_fallocate(fd, 0, self.size)
            except OSError as exc:
                if exc.errno in (28, 27):                 # ENOSPC, EFBIG
                    raise ShmCapacityError(f"{SHM_DIR} cannot hold a segment of {self.size} bytes "
                                           f"({exc.strerror}); free space is needed for it") from exc
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._maps[self.rank] = mmap.mmap(fd, self.size, flags=flags)
        finally:
            os.close(fd)
        self._ctrl = [None] * self.world_size
        self._buf = [None] * self.world_size
        self._mem = [None] * self.world_size              # memoryview of each mapping: the hot path's copies
        self._addr = [0] * self.world_size
        self._view(self.rank)
        self._bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._bell.bind(self._bell_addr(self.name))
        self._bell.setblocking(False)
        self._poll = select.poll()
        self._poll.register(self._bell, select.POLLIN)
        c = self._ctrl[self.rank]
        c[0], c[Q_PID], c[Q_STATE] = MAGIC, os.getpid(), ALIVE

    @staticmethod
    def _bell_addr(segment_name: str) -> str:
        return "\0explainer-bell-" + segment_name[-80:]   # Linux abstract namespace: no file

    def _view(self, p: int) -> None:
        mm = self._maps[p]
        self._ctrl[p] = memoryview(mm)[:CTRL_BYTES].cast("q")
        self._mem[p] = memoryview(mm)
        with warnings.catch_warnings():                  # peers' segments are mapped read-only
            warnings.simplefilter("ignore")
            self._buf[p] = torch.frombuffer(mm, dtype=torch.uint8)
        self._addr[p] = self._buf[p].data_ptr()           # valid while the mapping is (until close)

    def _join(self) -> None:
        if len(self.segment_names) != self.world_size or self.segment_names[self.rank] != self.name:
            raise RuntimeError(f"segment name exchange returned {self.segment_names!r} for rank {self.rank}")
        for p, name in enumerate(self.segment_names):   # validate every peer's name before opening any
            if p != self.rank:
                check_segment_name(name, self.group_name, p)
        for p, name in enumerate(self.segment_names):
            if p == self.rank:
                continue
            try:                                          # vLLM: "open shm in SHMManager failed. errno: 2"
                fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError as exc:
                raise RuntimeError(f"open shm in SHMManager failed. errno: {exc.errno} "
                                   f"(segment {name!r} of {self.peer_labels[p]}: {exc.strerror})") from exc
            try:
                self._maps[p] = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                                          prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            self._view(p)
            if self._ctrl[p][0] != MAGIC:
                raise RuntimeError(f"segment {name!r} of {self.peer_labels[p]} is not an explainer shm segment")
        self._peer_pid = [int(c[Q_PID]) if c is not None else 0 for c in self._ctrl]
        self._peer_bell = [self._bell_addr(n) for n in self.segment_names]

    def unlink(self) -> None:
        """Remove this rank's name from /dev/shm (mappings stay valid)."""
        if self._linked:
            unlink_name(self.name)
            self._linked = False

    def _unlink_dead_peers(self) -> None:
        """A killed owner cannot unlink its own name; a surviving peer does it for it."""
        for p, name in enumerate(self.segment_names):
            pid = self._peer_pid[p] if p < len(getattr(self, "_peer_pid", [])) else 0
            if p != self.rank and pid and not pid_alive(pid):
                try:
                    os.unlink(os.path.join(SHM_DIR, name))
                except FileNotFoundError:
                    pass

    def close(self) -> None:
        """Mark the channel closed for peers, unlink the own name, drop the mappings. Idempotent."""
        if self.closed:
            return
        self.closed = True
        ctrl = getattr(self, "_ctrl", None)
        if ctrl and ctrl[self.rank] is not None:
            ctrl[self.rank][Q_STATE] = CLOSED
        self.unlink()
        self._unlink_dead_peers()
        if self._bell is not None:
            self._bell.close()
            self._bell = None
        for views in (getattr(self, "_ctrl", None), getattr(self, "_mem", None), getattr(self, "_buf", None)):
            for p, v in enumerate(views or []):
                if isinstance(v, memoryview):
                    v.release()
                if views is not None:
                    views[p] = None
        for p, mm in enumerate(self._maps):
            if mm is not None:
                try:
                    mm.close()
                except BufferError:                       # a view is still referenced; GC unmaps
                    pass
                self._maps[p] = None
        LIVE_GROUPS.discard(self)

    def _check_peer_alive(self, peer: int, what: str, timed_out: bool) -> None:
        label = f"{self.peer_labels[peer]} (pid {self._peer_pid[peer]})"
        if self._ctrl[peer][Q_STATE] == CLOSED:
            raise PeerGoneError(f"shm group {self.group_name!r}: {label} closed the channel "
                                f"while rank {self.rank} waited for it to {what}")
        if not pid_alive(self._peer_pid[peer]):
            self._unlink_dead_peers()
            raise PeerGoneError(f"shm group {self.group_name!r}: {label} is gone (process exited "
                                f"or was killed) while rank {self.rank} waited for it to {what}")
        if timed_out:
            raise TimeoutError(f"shm group {self.group_name!r}: rank {self.rank} waited "
                               f"{self.timeout:.1f}s for {label} to {what}; the peer is stuck "
                               f"or not calling the matching send/recv")

    def _check(self, peer: int) -> None:
        if self.closed:
            raise RuntimeError(f"shm group {self.group_name!r} is closed")
        if not (0 <= peer < self.world_size) or peer == self.rank:
            raise ValueError(f"peer {peer}: accepted are group ranks 0..{self.world_size - 1} "
                             f"other than this rank {self.rank}")

    def _outbox(self, peer: int, seq: int, owner: int) -> int:
        idx = peer if peer < owner else peer - 1
        return CTRL_BYTES + (2 * idx + seq % 2) * self.chunk
