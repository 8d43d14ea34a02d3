"""Shared-memory tensor-list channel between the ranks of one group on one host.

The Python counterpart of vLLM's ``csrc/cpu/shm.cpp`` (``shm_send_tensor_list`` / ``shm_recv_tensor_list``;
``init_shm_manager`` / ``join_shm_manager`` are ``shm_mapping.ShmMapping``), single-threaded and with timeouts.

The segments, their CTRL counters and their set-up are ``shm_mapping``'s.

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
  wait; on arrival it compares the header in place (``_Inbox``) and only parses one that differs.

Differences from vLLM, on purpose: every wait is bounded and raises ``TimeoutError`` naming the
peer, or ``PeerGoneError`` as soon as the peer's process is gone or it closed the channel (vLLM spins
forever). Waiting is spin, then yield, then sleep (``shm_wait``, which documents the trade-off):
after that the waiter sets a "waiting" flag in its own control line and blocks on a doorbell (an
abstract-namespace UNIX datagram socket, nothing in the filesystem) that the publisher rings only
when it sees that flag; a short poll bounds any lost wake-up.

Memory
ordering: a plain aligned 8-byte store after the data copy is a release on x86-64 (TSO); other
architectures would need real fences (vLLM uses acquire/release atomics on aarch64).
"""

from __future__ import annotations

import ctypes
import time

import torch

from explainer.distributed.device_communicators import shm_wait
from explainer.distributed.device_communicators.shm_header import (HDR, HEADER_ROOM, HeaderCodec, Layout,  # noqa: F401
                                                                   ShmPayloadError, pad)
from explainer.distributed.device_communicators.shm_mapping import (CLOSED, DEFAULT_CHUNK_BYTES,  # noqa: F401
                                                                    MIN_CHUNK_BYTES, Q_STATE, Q_WAITING, PeerGoneError,
                                                                    ShmMapping, acked_slot, sent_slot)
from explainer.distributed.device_communicators.shm_segments import (SHM_DIR, ShmCapacityError,  # noqa: F401
                                                                     check_segment_name, close_all,
                                                                     sweep_segments_of, sweep_stale_segments)

_memmove = ctypes.memmove       # raw copies: ~0.5 us a call instead of ~5 us of torch slicing


class ShmGroup(ShmMapping):
    """One rank's end of the shared-memory channel of a group (vLLM's ``SHMManager``): the mappings of
    ``ShmMapping`` plus the waits, the hand-off and the messages. The re-exported names above are the
    channel's public face (``shm.ShmGroup``, ``shm.SHM_DIR``, ``shm.PeerGoneError`` ...)."""

    def __init__(self, *args, **kwargs):
        self._codec, self._views, self._inbox = HeaderCodec(), {}, {}   # hot-path caches
        self._header_at: dict[int, Layout] = {}           # own half offset -> the layout whose header is there
        super().__init__(*args, **kwargs)

    def close(self) -> None:
        """As ``ShmMapping.close``; the cached views that pin the mappings go first."""
        self._views, self._inbox = {}, {}
        super().close()

    # --- waits (the policy: shm_wait) ----------------------------------------------------------
    def _wait(self, peer: int, ctrl, slot: int, target: int, what: str) -> None:
        """Until ``ctrl[slot] >= target``: spin, yield, then sleep on the doorbell; bounded by the timeout."""
        if ctrl[slot] >= target or shm_wait.spin_then_yield(ctrl, slot, target, self.wait_policy):
            return
        mine = self._ctrl[self.rank]
        mine[Q_WAITING] = 1                              # ask the peer to ring; then re-check
        self.blocked_waits += 1
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
        if self._ctrl[peer][Q_WAITING]:
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
        layout, ptrs = self._codec.encode(items)          # validated; packed once per layout; tensor addresses
        if layout.total > self.chunk:
            return self._send_stream(layout, ptrs, dst)
        s, base = self._claim(dst)
        self._copy_in(layout, ptrs, base)
        self._publish(dst, s)
        return len(layout.header)

    def recv(self, src: int) -> dict[str, torch.Tensor]:
        """Receive one message from group rank ``src`` into fresh tensors, as a dict (vLLM zips the keys
        back onto its tensor list)."""
        self._check(src)
        inbox = self._inbox.get(src)                      # the layout src sent last: PP sends the same one
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
        s = self._ctrl[self.rank][sent_slot(dst)] + 1
        self._wait(dst, self._ctrl[dst], acked_slot(self.rank), s - 2, "free a buffer half")
        return s, self._outbox(dst, s, self.rank)

    def _publish(self, dst: int, s: int) -> None:
        self._ctrl[self.rank][sent_slot(dst)] = s        # the release store (x86 TSO): data before counter
        self._ring(dst)

    def _arrival(self, src: int) -> tuple[int, int]:
        """Wait until ``src`` has published the next chunk; its sequence number and offset."""
        r = self._ctrl[self.rank][acked_slot(src)] + 1
        self._wait(src, self._ctrl[src], sent_slot(self.rank), r, "publish data")
        return r, self._outbox(self.rank, r, src)

    def _release(self, src: int, r: int) -> None:
        self._ctrl[self.rank][acked_slot(src)] = r       # hand the half back
        self._ring(src)

    def send_raw(self, data: memoryview, dst: int) -> None:
        """The floor: the same hand-off carrying the bytes of ``data`` (<= one half), no header, no tensors."""
        s, base = self._claim(dst)
        self._header_at.pop(base, None)
        self._mem[self.rank][base:base + len(data)] = data
        self._publish(dst, s)

    def recv_raw(self, out: memoryview, src: int) -> None:
        r, base = self._arrival(src)
        out[:] = self._mem[src][base:base + len(out)]
        self._release(src, r)

    # the phases of one message
    def _copy_in(self, layout: Layout, ptrs: list[int], base: int) -> None:
        """Header and tensors into the own half at ``base`` (lengths from the validated layout). A half
        that still holds this layout's header keeps it: the peer's cached copy of that line stays valid."""
        if self._header_at.get(base) is not layout:
            self._mem[self.rank][base:base + len(layout.header)] = layout.header
            self._header_at[base] = layout
        for dst_bytes, ptr in zip(self._slices(self.rank, base, layout), ptrs):
            src_bytes = _BYTES_AT.get(ptr)                # a view of the tensor's memory (see _bytes_at)
            if src_bytes is None or len(src_bytes) != len(dst_bytes):
                src_bytes = _bytes_at(ptr, len(dst_bytes))
            dst_bytes[:] = src_bytes

    def _learn(self, src: int, base: int) -> "_Inbox":
        """The header at ``base`` in ``src``'s outbox, parsed and validated, remembered as its next expected layout."""
        mem = self._mem[src]
        hlen = HDR.unpack_from(mem, base)[2]
        try:
            if not HDR.size <= hlen <= HEADER_ROOM:
                raise ValueError(f"header length {hlen}")
            layout = self._codec.decode(bytes(mem[base:base + hlen]))
        except ValueError as exc:
            raise RuntimeError(f"shm group {self.group_name!r}: corrupt header from "
                               f"{self.peer_labels[src]} ({exc})") from None
        if layout.total > self.chunk:
            self._inbox.pop(src, None)
            return _Inbox(layout, (), ())
        halves = [self._outbox(self.rank, r, src) for r in (0, 1)]
        inbox = self._inbox[src] = _Inbox(layout, tuple(mem[h:h + hlen] for h in halves),
                                          tuple(self._slices(src, h, layout) for h in halves))
        return inbox

    def _slices(self, p: int, base: int, layout: Layout) -> list[memoryview]:
        """Each tensor's bytes in rank ``p``'s half at ``base``, as memoryview slices (cached per half and layout)."""
        views = self._views.get((p, base, layout))
        if views is None:
            mem = self._mem[p]
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
        base = self._outbox(self.rank, r, src)
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


class _Inbox:
    """What a receiver keeps of the layout a peer sent last: views of its header and of each tensor's
    bytes in both halves of the peer's outbox, so a repeated layout is checked and copied without parsing."""
    __slots__ = ("layout", "headers", "payload")


class _Inbox:
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
