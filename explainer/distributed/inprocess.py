"""An in-process pipeline-parallel group: every rank in one Python process, in lockstep.

It offers the Seam 3 subset of vLLM's ``GroupCoordinator`` (``rank_in_group``, ``world_size``,
``is_first_rank``, ``is_last_rank``, ``send_tensor_dict``, ``recv_tensor_dict``, ``broadcast``) so the
same runner code runs here and, one rank per process, over ``distributed/parallel_state.py``.

Messages sit in per-(sender, receiver) queues. Because the driver runs ranks one after the other, a
receive with nothing pending can never be satisfied later in the same call: instead of hanging (as an
NCCL or gloo receive would) it raises ``NothingPendingError`` naming the peer. ``broadcast`` enforces
the receiver's pre-allocated dtype and shape, as NCCL silently would not.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from explainer.distributed.errors import BroadcastMismatchError
from explainer.errors import UsageError


class NothingPendingError(TimeoutError):
    """A receive found nothing from its peer: in a real group this call would block until the backend's timeout
    (PyTorch's defaults: 600 s for NCCL, 1800 s for gloo)."""


class InProcessWorld:
    """The shared mailboxes of one in-process PP world; ``group(rank)`` is that rank's view."""

    def __init__(self, world_size: int):
        if not isinstance(world_size, int) or world_size < 1:
            raise UsageError(f"world_size must be an int >= 1, got {world_size!r}")
        self.world_size = world_size
        self._queues: dict[tuple[str, int, int], deque] = {}

    def group(self, rank: int) -> "InProcessPPGroup":
        return InProcessPPGroup(self, rank)

    def groups(self) -> list["InProcessPPGroup"]:
        return [self.group(r) for r in range(self.world_size)]

    def _queue(self, kind: str, src: int, dst: int) -> deque:
        return self._queues.setdefault((kind, src, dst), deque())

    def pending(self) -> list[dict]:
        """What is queued and not yet received: ``[{kind, src, dst, count}]``."""
        return [{"kind": k, "src": s, "dst": d, "count": len(q)}
                for (k, s, d), q in sorted(self._queues.items()) if q]


class InProcessPPGroup:
    """One rank's handle on an :class:`InProcessWorld` (the ``GroupCoordinator`` method names)."""

    def __init__(self, world: InProcessWorld, rank: int, channel: str = ""):
        if not 0 <= rank < world.world_size:
            raise UsageError(f"rank must be in [0, {world.world_size - 1}], got {rank!r}")
        self.world, self.channel = world, channel
        self.rank_in_group = rank
        self.world_size = world.world_size
        self.ranks = list(range(world.world_size))

    def make_sibling_device_group(self, group_desc: str) -> "InProcessPPGroup":
        """The same ranks on their own mailboxes (vLLM: a second communicator, e.g. ``pp_broadcast``)."""
        return InProcessPPGroup(self.world, self.rank_in_group, channel=group_desc)

    # --- topology (vLLM names) ---
    @property
    def is_first_rank(self) -> bool:
        return self.rank_in_group == 0

    @property
    def is_last_rank(self) -> bool:
        return self.rank_in_group == self.world_size - 1

    @property
    def next_rank(self) -> int:
        return (self.rank_in_group + 1) % self.world_size

    @property
    def prev_rank(self) -> int:
        return (self.rank_in_group - 1) % self.world_size

    def _peer(self, peer: int | None, default: int, what: str) -> int:
        peer = default if peer is None else peer
        if not isinstance(peer, int) or not 0 <= peer < self.world_size or peer == self.rank_in_group:
            raise UsageError(f"rank {self.rank_in_group}: {what} must be another rank in "
                             f"[0, {self.world_size - 1}], got {peer!r}")
        return peer

    # --- point to point ---
    def send_tensor_dict(self, tensor_dict: dict[str, Any], dst: int | None = None) -> None:
        """Queue a copy of ``tensor_dict`` for ``dst`` (default: the next rank)."""
        dst = self._peer(dst, self.next_rank, "dst")
        if not isinstance(tensor_dict, dict):
            raise TypeError(f"send_tensor_dict expects a dict, got {type(tensor_dict).__name__}")
        copy = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in tensor_dict.items()}
        self.world._queue(self.channel + "p2p", self.rank_in_group, dst).append(copy)

    def recv_tensor_dict(self, src: int | None = None) -> dict[str, Any]:
        """Take the oldest dict ``src`` (default: the previous rank) sent to this rank."""
        src = self._peer(src, self.prev_rank, "src")
        queue = self.world._queue(self.channel + "p2p", src, self.rank_in_group)
        if not queue:
            raise NothingPendingError(
                f"rank {self.rank_in_group}: recv_tensor_dict(src={src}) has nothing pending from rank {src} "
                f"(rank {src} failed or never sent); a real receive would block here")
        return queue.popleft()

    def isend_tensor_dict(self, tensor_dict: dict[str, Any], dst: int | None = None) -> list:
        """``send_tensor_dict`` returning handles, as vLLM 0.32.0's does: the copy is queued at once, so none."""
        self.send_tensor_dict(tensor_dict, dst)
        return []

    def irecv_tensor_dict(self, src: int | None = None) -> tuple[dict[str, Any], list]:
        """``recv_tensor_dict`` as a pair: (the dict, no handle to wait). vLLM 0.32.0's returns a third item, the
        post-processing calls of its all-gather option, which the toy does not have."""
        return self.recv_tensor_dict(src), []

    # --- collective ---
    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``src`` publishes ``tensor``; every other rank copies it in place into its pre-allocated ``tensor``."""
        if not isinstance(src, int) or not 0 <= src < self.world_size:
            raise UsageError(f"broadcast src must be in [0, {self.world_size - 1}], got {src!r}")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"broadcast expects a tensor, got {type(tensor).__name__}")
        if self.world_size == 1:
            return tensor
        if self.rank_in_group == src:
            for dst in self.ranks:
                if dst != src:
                    self.world._queue(self.channel + "bcast", src, dst).append(tensor.detach().clone())
            return tensor
        queue = self.world._queue(self.channel + "bcast", src, self.rank_in_group)
        if not queue:
            raise NothingPendingError(
                f"rank {self.rank_in_group}: broadcast(src={src}) has nothing pending from rank {src} "
                f"(rank {src} failed or never broadcast); a real broadcast would block here")
        sent = queue.popleft()
        if sent.dtype != tensor.dtype or sent.shape != tensor.shape:
            raise BroadcastMismatchError(
                f"rank {self.rank_in_group}: broadcast from rank {src} sent {sent.dtype} {tuple(sent.shape)} "
                f"but the receiver pre-allocated {tensor.dtype} {tuple(tensor.shape)}")
        tensor.copy_(sent)
        return tensor
