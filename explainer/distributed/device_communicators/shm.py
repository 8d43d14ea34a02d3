"""The shared-memory channel between the ranks of one group on one host: its segments and their set-up, the waits,
the hand-off and the messages (vLLM's ``SHMManager`` in ``csrc/cpu/shm.cpp``: ``init_shm_manager`` /
``join_shm_manager``, ``shm_send_tensor_list`` / ``shm_recv_tensor_list``), single-threaded and with timeouts.

Segment per rank (``/dev/shm/<group_name>_<rank>-<pid>-<random hex>``, created ``O_EXCL`` with mode 0600)::

    CTRL  4 KiB, one 64-byte line per counter, each written ONLY by the owner:
          line 0: magic, pid, state (ALIVE/CLOSED), waiting (1 while blocked on the doorbell)
          line 1+p: sent[p]  = chunks the owner has published to peer p   (monotonic int64)
          line 9+p: acked[p] = chunks the owner has consumed from peer p
    DATA  per peer p: outbox[p][0], outbox[p][1]   (double buffer, ``chunk_bytes`` + 4 KiB header room each)

Names are exchanged through the gloo group, and each owner unlinks its own name as soon as every rank has
mapped it, so a crash after set-up leaves nothing in /dev/shm (``shm_segments`` covers every other path). Each
rank also owns a doorbell (an abstract-namespace UNIX datagram socket, nothing in the filesystem) that peers
ring when it waits. A peer that closed its end or whose process is gone is reported as ``PeerGoneError``.

One message = the binary header of ``shm_header`` (keys, dtypes, shapes) padded to 64 bytes, then each
tensor's bytes at a 64-byte aligned offset. Chunk ``s`` (1-based) goes to ``outbox[dst][s % 2]``; the
sender waits for ``acked >= s - 2`` before reusing a half, so it runs at most two chunks ahead (vLLM's
``check_no_buffer_conflict``); the receiver waits for ``sent >= r`` (vLLM's ``check_stamp_ready``).

The hot path (a PP hand-off of a few KiB costs a few microseconds, so every Python call counts):

* a message that fits one half (up to ``chunk_bytes``) takes the fast path: one wait, the copies,
  one counter store. Larger ones stream through both halves chunk by chunk (``ctypes.memmove``);
* the sender reads each tensor's type, contiguity, device, dtype, shape and address in one pass; the
  layout (header bytes, offsets) is built and validated once per (key, dtype, shape) and cached, and a
  half that still holds the layout's header is not rewritten;
* fast-path copies are memoryview slice assignments (a plain memcpy), over views of tensor memory
  cached by address; every length comes from a validated dtype and shape, never from the peer;
* the receiver expects the layout its peer sent last (PP sends the same one every step): *before*
  waiting it allocates that layout's tensors and the dict it returns, so the allocation hides in the
  wait; on arrival it compares the header in place (``Inbox``) and only parses one that differs.

Differences from vLLM, on purpose: every wait is bounded and raises ``TimeoutError`` naming the
peer, or ``PeerGoneError`` as soon as the peer's process is gone or it closed the channel (vLLM spins
forever). Waiting is spin, then yield, then sleep (``shm_wait``, which documents the trade-off):
after that the waiter sets a "waiting" flag in its own control line and blocks on a doorbell (an
abstract-namespace UNIX datagram socket, nothing in the filesystem) that the publisher rings only
when it sees that flag; a short poll bounds any lost wake-up.

Memory ordering: a plain aligned 8-byte store after the data copy is a release on x86-64 (TSO); other
architectures would need real fences (vLLM uses acquire/release atomics on aarch64).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import secrets
import select
import socket
import time
import warnings
from typing import Callable

import torch

from explainer.distributed.device_communicators import shm_wait
from explainer.distributed.device_communicators.shm_header import (ALIGN, HDR, HEADER_ROOM, HeaderCodec, Layout,
                                                                   ShmPayloadError, pad)  # noqa: F401
from explainer.distributed.device_communicators.shm_segments import (LIVE_GROUPS, OWNED_NAMES, SHM_DIR,  # noqa: F401
                                                                     ShmCapacityError, check_capacity,
                                                                     check_segment_name, close_all,
                                                                     install_exit_hooks, sweep_segments_of,
                                                                     sweep_stale_segments, unlink_name)
from explainer.distributed.procs import pid_alive

_memmove = ctypes.memmove       # raw copies: ~0.5 us a call instead of ~5 us of torch slicing
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


class ShmGroup:
    """One rank's end of the shared-memory channel of a group (vLLM's ``SHMManager``): its segment and read-only
    mappings of its peers', the waits, the hand-off and the messages. The names imported above from
    ``shm_header`` and ``shm_segments`` are part of the channel's public face (``shm.ShmPayloadError``,
    ``shm.SHM_DIR``, ``shm.sweep_segments_of`` ...).

    ``exchange(str) -> list[str]`` all-gathers a string over the group (gloo) and ``barrier()``
    synchronises it; both are called collectively during set-up only. The parts of a hand-off (``ctrl``, ``mem``,
    ``codec``, ``inbox``, ``outbox``, ``copy_in``) are public: the benchmark times each phase on its own.
    """

    def __init__(self, group_name: str, rank: int, world_size: int, *,
                 exchange: Callable[[str], list[str]], barrier: Callable[[], None],
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, timeout: float = 30.0,
                 unlink_after_join: bool = True, peer_labels: list[str] | None = None,
                 wait_policy: shm_wait.WaitPolicy = shm_wait.DEFAULT):
        self.codec, self._views, self.inbox = HeaderCodec(), {}, {}   # hot-path caches
        self._header_at: dict[int, Layout] = {}           # own half offset -> the layout whose header is there
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
        self.ctrl = [None] * self.world_size
        self._buf = [None] * self.world_size
        self.mem = [None] * self.world_size              # memoryview of each mapping: the hot path's copies
        self._addr = [0] * self.world_size
        self._view(self.rank)
        self._bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._bell.bind(self._bell_addr(self.name))
        self._bell.setblocking(False)
        self._poll = select.poll()
        self._poll.register(self._bell, select.POLLIN)
        c = self.ctrl[self.rank]
        c[0], c[Q_PID], c[Q_STATE] = MAGIC, os.getpid(), ALIVE

    @staticmethod
    def _bell_addr(segment_name: str) -> str:
        return "\0explainer-bell-" + segment_name[-80:]   # Linux abstract namespace: no file

    def _view(self, p: int) -> None:
        mm = self._maps[p]
        self.ctrl[p] = memoryview(mm)[:CTRL_BYTES].cast("q")
        self.mem[p] = memoryview(mm)
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
            if self.ctrl[p][0] != MAGIC:
                raise RuntimeError(f"segment {name!r} of {self.peer_labels[p]} is not an explainer shm segment")
        self._peer_pid = [int(c[Q_PID]) if c is not None else 0 for c in self.ctrl]
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
        """Mark the channel closed for peers, unlink the own name, drop the mappings (the cached views that pin
        them first). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._views, self.inbox = {}, {}
        ctrl = getattr(self, "ctrl", None)
        if ctrl and ctrl[self.rank] is not None:
            ctrl[self.rank][Q_STATE] = CLOSED
        self.unlink()
        self._unlink_dead_peers()
        if self._bell is not None:
            self._bell.close()
            self._bell = None
        for views in (getattr(self, "ctrl", None), getattr(self, "mem", None), getattr(self, "_buf", None)):
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
        if self.ctrl[peer][Q_STATE] == CLOSED:
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

    def outbox(self, peer: int, seq: int, owner: int) -> int:
        idx = peer if peer < owner else peer - 1
        return CTRL_BYTES + (2 * idx + seq % 2) * self.chunk

    # --- waits (the policy: shm_wait) ----------------------------------------------------------
    def _wait(self, peer: int, ctrl, slot: int, target: int, what: str) -> None:
        """Until ``ctrl[slot] >= target``: spin, yield, then sleep on the doorbell; bounded by the timeout."""
        if ctrl[slot] >= target or shm_wait.spin_then_yield(ctrl, slot, target, self.wait_policy):
            return
        mine = self.ctrl[self.rank]
        mine[Q_WAITING] = 1                              # ask the peer to ring; then re-check
        start = time.monotonic()
        deadline, check_at = start + self.timeout, start + 0.02
        try:
            while ctrl[slot] < target:
                if self._poll.poll(self.wait_policy.poll_ms):   # bounds a lost wake-up
                    self._drain()
                now = time.monotonic()
                if now >= check_at and ctrl[slot] < target:
                    check_at = now + 0.05
                    self._check_peer_alive(peer, what, now >= deadline)
        finally:
            mine[Q_WAITING] = 0

    def _drain(self) -> None:
        try:
            while True:
                self._bell.recv(64)
        except (BlockingIOError, InterruptedError):
            pass

    def _ring(self, peer: int) -> None:
        """Wake ``peer`` if it is blocked (it set its waiting flag)."""
        if self.ctrl[peer][Q_WAITING]:
            try:
                self._bell.sendto(b"!", self._peer_bell[peer])
            except OSError:                               # queue full (already rung) or peer gone
                pass

    # --- point to point ----------------------------------------------------------------------
    # A message is one Layout (shm_header): the header, then each tensor at its offset. When it fits one
    # half it takes the fast path: one wait, the copies, one publish. Larger ones stream chunk by chunk.
    def send(self, items, dst: int) -> int:
        """Stream ``items`` (``(key, tensor)`` pairs, e.g. ``dict.items()``) to group rank ``dst``;
        returns once every chunk is in shared memory."""
        self._check(dst)
        layout, ptrs = self.codec.encode(items)          # validated; packed once per layout; tensor addresses
        if layout.total > self.chunk:
            return self._send_stream(layout, ptrs, dst)
        s, base = self._claim(dst)
        self.copy_in(layout, ptrs, base)
        self._publish(dst, s)
        return len(layout.header)

    def recv(self, src: int) -> dict[str, torch.Tensor]:
        """Receive one message from group rank ``src`` into fresh tensors, as a dict (vLLM zips the keys
        back onto its tensor list)."""
        self._check(src)
        inbox = self.inbox.get(src)                      # the layout src sent last: PP sends the same one
        if inbox is not None:                             # every step, so its tensors and dict are made now,
            out, destinations = inbox.allocate()          # while the wait hides the cost
        r, base = self._arrival(src)
        half = r % 2
        if inbox is None or inbox.headers[half] != inbox.layout.header:   # compared in place
            inbox = self._learn(src, base)                # another layout: parse and validate its header
            if inbox.layout.total > self.chunk:
                return self._recv_stream(inbox.layout, src, r)
            out, destinations = inbox.allocate()
        for dst_bytes, src_bytes in zip(destinations, inbox.payload[half]):
            dst_bytes[:] = src_bytes                      # the copy out
        self._release(src, r)
        return out

    # the hand-off, shared by send/recv and the raw ping-pong the benchmark uses as its floor
    def _claim(self, dst: int) -> tuple[int, int]:
        """Wait until ``dst`` has consumed what was in the next half; its sequence number and offset."""
        s = self.ctrl[self.rank][sent_slot(dst)] + 1
        self._wait(dst, self.ctrl[dst], acked_slot(self.rank), s - 2, "free a buffer half")
        return s, self.outbox(dst, s, self.rank)

    def _publish(self, dst: int, s: int) -> None:
        self.ctrl[self.rank][sent_slot(dst)] = s        # the release store (x86 TSO): data before counter
        self._ring(dst)

    def _arrival(self, src: int) -> tuple[int, int]:
        """Wait until ``src`` has published the next chunk; its sequence number and offset."""
        r = self.ctrl[self.rank][acked_slot(src)] + 1
        self._wait(src, self.ctrl[src], sent_slot(self.rank), r, "publish data")
        return r, self.outbox(self.rank, r, src)

    def _release(self, src: int, r: int) -> None:
        self.ctrl[self.rank][acked_slot(src)] = r       # hand the half back
        self._ring(src)

    def send_raw(self, data: memoryview, dst: int) -> None:
        """The floor: the same hand-off carrying the bytes of ``data`` (<= one half), no header, no tensors."""
        s, base = self._claim(dst)
        self._header_at.pop(base, None)
        self.mem[self.rank][base:base + len(data)] = data
        self._publish(dst, s)

    def recv_raw(self, out: memoryview, src: int) -> None:
        r, base = self._arrival(src)
        out[:] = self.mem[src][base:base + len(out)]
        self._release(src, r)

    # the phases of one message
    def copy_in(self, layout: Layout, ptrs: list[int], base: int) -> None:
        """Header and tensors into the own half at ``base`` (lengths from the validated layout). A half
        that still holds this layout's header keeps it: the peer's cached copy of that line stays valid."""
        if self._header_at.get(base) is not layout:
            self.mem[self.rank][base:base + len(layout.header)] = layout.header
            self._header_at[base] = layout
        for dst_bytes, ptr in zip(self._slices(self.rank, base, layout), ptrs):
            src_bytes = _BYTES_AT.get(ptr)                # a view of the tensor's memory (see _bytes_at)
            if src_bytes is None or len(src_bytes) != len(dst_bytes):
                src_bytes = _bytes_at(ptr, len(dst_bytes))
            dst_bytes[:] = src_bytes

    def _learn(self, src: int, base: int) -> "Inbox":
        """The header at ``base`` in ``src``'s outbox, parsed and validated, remembered as its next expected layout."""
        mem = self.mem[src]
        hlen = HDR.unpack_from(mem, base)[2]
        try:
            if not HDR.size <= hlen <= HEADER_ROOM:
                raise ValueError(f"header length {hlen}")
            layout = self.codec.decode(bytes(mem[base:base + hlen]))
        except ValueError as exc:
            raise RuntimeError(f"shm group {self.group_name!r}: corrupt header from "
                               f"{self.peer_labels[src]} ({exc})") from None
        if layout.total > self.chunk:
            self.inbox.pop(src, None)
            return Inbox(layout, (), ())
        halves = [self.outbox(self.rank, r, src) for r in (0, 1)]
        inbox = self.inbox[src] = Inbox(layout, tuple(mem[h:h + hlen] for h in halves),
                                          tuple(self._slices(src, h, layout) for h in halves))
        return inbox

    def _slices(self, p: int, base: int, layout: Layout) -> list[memoryview]:
        """Each tensor's bytes in rank ``p``'s half at ``base``, as memoryview slices (cached per half and layout)."""
        views = self._views.get((p, base, layout))
        if views is None:
            mem = self.mem[p]
            views = [mem[base + off:base + off + n] for off, n in zip(layout.offsets, layout.nbytes)]
            if len(self._views) >= 64:
                self._views.clear()
            self._views[(p, base, layout)] = views
        return views

    # messages larger than a half: stream chunk by chunk through both halves
    def _send_stream(self, layout: Layout, ptrs: list[int], dst: int) -> int:
        chunk, addr = self.chunk, self._addr[self.rank]
        self._header_at.clear()                           # chunks overwrite the start of both halves
        s, base = self._claim(dst)
        _memmove(addr + base, layout.header, len(layout.header))
        pos = pad(len(layout.header))
        for ptr, n in zip(ptrs, layout.nbytes):
            off = 0
            pos = pad(pos) if n else pos
            while off < n:
                if pos >= chunk:                          # this half is full: publish it, take the next
                    self._publish(dst, s)
                    s, base = self._claim(dst)
                    pos = 0
                k = min(n - off, chunk - pos)
                _memmove(addr + base + pos, ptr + off, k)   # bounds: pos + k <= chunk, off + k <= n
                pos += k
                off += k
        self._publish(dst, s)
        return len(layout.header)

    def _recv_stream(self, layout: Layout, src: int, r: int) -> dict[str, torch.Tensor]:
        chunk, addr = self.chunk, self._addr[src]
        base = self.outbox(self.rank, r, src)
        out = layout.empty()
        pos = pad(len(layout.header))
        for t, n in zip(out, layout.nbytes):
            off, ptr = 0, t.data_ptr()
            pos = pad(pos) if n else pos
            while off < n:
                if pos >= chunk:                          # consumed this half: hand it back
                    self._release(src, r)
                    r, base = self._arrival(src)
                    pos = 0
                k = min(n - off, chunk - pos)
                _memmove(ptr + off, addr + base + pos, k)
                pos += k
                off += k
        self._release(src, r)
        return dict(zip(layout.keys, out))


class Inbox:
    """What a receiver keeps of the layout a peer sent last: views of its header and of each tensor's
    bytes in both halves of the peer's outbox, so a repeated layout is checked and copied without parsing."""
    __slots__ = ("layout", "headers", "payload")

    def __init__(self, layout: Layout, headers: tuple, payload: tuple):
        self.layout, self.headers, self.payload = layout, headers, payload

    def allocate(self) -> tuple[dict[str, torch.Tensor], list[memoryview]]:
        """Fresh tensors of the layout, already in the dict ``recv`` returns, and writable views of their bytes."""
        tensors = self.layout.empty()
        return (dict(zip(self.layout.keys, tensors)),
                [_bytes_at(t.data_ptr(), n) for t, n in zip(tensors, self.layout.nbytes)])


_BYTES_AT: dict[int, memoryview] = {}


def _bytes_at(ptr: int, n: int) -> memoryview:
    """``n`` bytes of process memory at ``ptr`` as a memoryview (no copy), cached by address: the
    allocator hands a PP stage the same addresses step after step, and building a view costs as much
    as ~5 copies of 4 KiB. Only ever used while a live tensor occupies those bytes."""
    view = _BYTES_AT.get(ptr)
    if view is None or len(view) != n:
        view = memoryview((ctypes.c_char * n).from_address(ptr)).cast("B") if n else memoryview(bytearray())
        if len(_BYTES_AT) >= 256:
            _BYTES_AT.clear()
        _BYTES_AT[ptr] = view
    return view
