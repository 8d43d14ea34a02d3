"""The binary message header of the shared-memory channel, and what it can describe.

vLLM sends a 192-byte ``TensorListMeta`` (byte count and dtype of <= 8 tensors) and appends the keys and
shapes as a pickled uint8 tensor. Here one fixed binary header carries all of it, packed with ``struct``
(nothing is ever unpickled)::

    message header  <IHHQ   magic, tensor count, header bytes, message bytes (header + payload, padded)
    per tensor      <BBHQ   dtype code, ndim, key bytes, tensor bytes
                    <{ndim}q shape
                    key     UTF-8

The payload follows, each non-empty tensor at a 64-byte aligned offset. A pipeline stage sends the
same layout (keys, dtypes, shapes) every step, so a ``Layout`` is built once per layout and cached on
both sides: the sender looks it up by ``(key, dtype, shape)``, the receiver by the header bytes.
Sizes are always recomputed from dtype and shape, never taken from the peer's byte counts.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import torch

MAX_TENSORS = 6        # vLLM: 8 tensors per list minus its meta tensor and the pickled keys/shapes
MAX_DIMS = 16
MAX_KEY_BYTES = 200
HEADER_ROOM = 4096                 # >= the largest header (6 entries x (12 + 16*8 + 200) + 16)
ALIGN = 64
MAGIC_MSG = 0x4753584D             # "MXSG"
HDR = struct.Struct("<IHHQ")       # magic, n_tensors, header bytes, message bytes
ENTRY = struct.Struct("<BBHQ")     # dtype code, ndim, key bytes, tensor bytes
DTYPES = [getattr(torch, n) for n in (
    "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool",
    "complex64", "complex128", "uint16", "uint32", "uint64") if hasattr(torch, n)]
DTYPE_CODE = {dt: i for i, dt in enumerate(DTYPES)}
_CACHE_LIMIT = 64                  # layouts remembered per side (PP uses one or two)


class ShmPayloadError(RuntimeError, ValueError):
    """A value the shared-memory path cannot carry (vLLM raises RuntimeError here)."""


def pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True, eq=False)
class Layout:
    """One message shape: the packed header and where each tensor's bytes go inside the message.
    Compared and hashed by identity: each codec keeps one object per layout, and the channel keys its
    cached views on it."""
    header: bytes
    keys: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[int, ...], ...]
    nbytes: tuple[int, ...]
    offsets: tuple[int, ...]       # from the start of the message (the header is at 0)
    total: int                     # message bytes: header, padding and payload
    templates: tuple[torch.Tensor, ...] = ()   # memory-less tensors of each dtype and shape (see ``empty``)

    def __post_init__(self):
        object.__setattr__(self, "templates", tuple(_template(s, d) for s, d in zip(self.shapes, self.dtypes)))

    def empty(self) -> list[torch.Tensor]:
        """Fresh contiguous tensors of this layout. ``empty_like`` of a template skips parsing the shape
        and dtype arguments, the slow part of ``torch.empty(shape, dtype=...)`` for small tensors."""
        return [torch.empty_like(t) for t in self.templates]


def _template(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A 0-d tensor expanded to ``shape`` (no memory): ``empty_like`` turns it into a contiguous tensor.
    Tensors of <= 1 element would keep the expanded strides, so they get a real (tiny) template."""
    if math.prod(shape) <= 1:
        return torch.empty(shape, dtype=dtype)
    return torch.empty((), dtype=dtype).expand(shape)


def _place(hlen: int, nbytes) -> tuple[tuple[int, ...], int]:
    """Payload offsets: the header padded to 64 bytes, then each non-empty tensor 64-byte aligned."""
    offsets, pos = [], pad(hlen)
    for n in nbytes:
        pos = pad(pos) if n else pos
        offsets.append(pos)
        pos += n
    return tuple(offsets), pos


def _accepted() -> str:
    return (f"contiguous CPU torch.Tensor values of dtype {', '.join(str(d)[6:] for d in DTYPES)}, "
            f"under str keys, at most {MAX_TENSORS} per message")


def check_tensors(items: list[tuple[object, object]]) -> None:
    """Everything the channel accepts: <= MAX_TENSORS contiguous CPU tensors under str keys."""
    if len(items) > MAX_TENSORS:
        raise ShmPayloadError(f"{len(items)} tensors is more than the shared-memory channel takes "
                              f"(accepted: 0..{MAX_TENSORS}, as vLLM's 8-entry TensorListMeta)")
    seen = set()
    for key, t in items:
        if not isinstance(key, str) or len(key.encode()) > MAX_KEY_BYTES:
            raise ShmPayloadError(f"key {key!r}: accepted keys are str of at most {MAX_KEY_BYTES} UTF-8 bytes")
        if key in seen:
            raise ShmPayloadError(f"key {key!r} appears twice; accepted: distinct keys (the receiver builds a dict)")
        seen.add(key)
        if not isinstance(t, torch.Tensor):
            raise ShmPayloadError(f"key {key!r} holds a {type(t).__name__}; accepted: {_accepted()}")
        if not t.is_cpu or not t.is_contiguous() or t.dtype not in DTYPE_CODE or t.dim() > MAX_DIMS:
            problem = ("is on device " + str(t.device) if t.device.type != "cpu" else
                       "is not contiguous (call .contiguous())" if not t.is_contiguous() else
                       f"has dtype {t.dtype}" if t.dtype not in DTYPE_CODE else f"has {t.dim()} dims")
            raise ShmPayloadError(f"key {key!r}: tensor {problem}; accepted: {_accepted()}")


def build_layout(items: list[tuple[str, torch.Tensor]]) -> Layout:
    """Validate ``items`` and pack their header (the slow path, once per layout)."""
    check_tensors(items)
    nbytes = tuple(t.numel() * t.element_size() for _, t in items)
    entries = b"".join(ENTRY.pack(DTYPE_CODE[t.dtype], t.dim(), len(k.encode()), n)
                       + struct.pack(f"<{t.dim()}q", *t.shape) + k.encode()
                       for (k, t), n in zip(items, nbytes))
    hlen = HDR.size + len(entries)
    offsets, total = _place(hlen, nbytes)
    header = HDR.pack(MAGIC_MSG, len(items), hlen, total) + entries
    return Layout(header, tuple(k for k, _ in items), tuple(t.dtype for _, t in items),
                  tuple(tuple(t.shape) for _, t in items), nbytes, offsets, total)


class HeaderCodec:
    """Per-channel caches: the sender's ``encode`` and the receiver's ``decode`` (vLLM: bind_tensor_list)."""

    def __init__(self):
        self._by_items: dict[tuple, Layout] = {}
        self._by_header: dict[bytes, Layout] = {}

    def encode(self, items) -> tuple[Layout, list[int]]:
        """The layout of ``items`` and each tensor's data address, read in one pass. A cached layout vouches
        for keys, dtypes and shapes; type, contiguity and device are checked on every call (anything
        unusual takes the full check, which raises the clear error; a Tensor subclass passes)."""
        key, ptrs = [], []
        for k, t in items:
            if type(k) is not str or type(t) is not torch.Tensor or not t.is_contiguous() or not t.is_cpu:
                return self._build(items)
            key += (k, t.dtype, t.shape)
            ptrs.append(t.data_ptr())
        layout = self._by_items.get(tuple(key))
        if layout is None:
            return self._build(items)
        return layout, ptrs

    def _build(self, items) -> tuple[Layout, list[int]]:
        layout = build_layout(items)
        _remember(self._by_items, tuple(x for k, t in items for x in (k, t.dtype, t.shape)), layout)
        return layout, [t.data_ptr() for _, t in items]

    def decode(self, header: bytes) -> Layout:
        """A peer's header -> ``Layout``; anything inconsistent raises ``ValueError``."""
        layout = self._by_header.get(header)
        if layout is None:
            layout = parse(header)
            _remember(self._by_header, header, layout)
        return layout


def _remember(cache: dict, key, layout: Layout) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = layout


def parse(header: bytes) -> Layout:
    """Decode and check a header: every size is recomputed from dtype and shape."""
    try:
        magic, count, hlen, total = HDR.unpack_from(header, 0)
        if magic != MAGIC_MSG or count > MAX_TENSORS or hlen != len(header):
            raise ValueError("bad magic, count or length")
        at, keys, dtypes, shapes, nbytes = HDR.size, [], [], [], []
        for _ in range(count):
            code, ndim, klen, n = ENTRY.unpack_from(header, at)
            if ndim > MAX_DIMS or code >= len(DTYPES):
                raise ValueError(f"bad entry: dtype code {code}, {ndim} dims")
            shape = struct.unpack_from(f"<{ndim}q", header, at + ENTRY.size)
            at += ENTRY.size + 8 * ndim
            key = header[at:at + klen].decode()
            at += klen
            dtype = DTYPES[code]
            if min(shape, default=0) < 0 or n != math.prod(shape) * dtype.itemsize:
                raise ValueError(f"bad entry {key!r}: shape {shape} does not match {n} bytes")
            keys.append(key), dtypes.append(dtype), shapes.append(shape), nbytes.append(n)
        offsets, expected = _place(hlen, nbytes)
        if at != hlen or total != expected:
            raise ValueError("header and payload sizes disagree")
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"truncated header ({exc})") from exc
    return Layout(header, tuple(keys), tuple(dtypes), tuple(shapes), tuple(nbytes), offsets, total)
