"""The tensor-dict paths of vLLM's ``GroupCoordinator`` (``vllm/distributed/parallel_state.py``, 0.32.0), as a mixin
of ``parallel_state.GroupCoordinator``: the metadata objects, the generic path and the switch to the custom one.

Generic path: the metadata list goes first (an int64 size, then the bytes, over the cpu group), then one
``torch.distributed.isend`` per non-empty tensor. ``isend_tensor_dict`` returns the handles and keeps them, with
their source tensors, in ``pending_isends`` until they complete; ``irecv_tensor_dict`` receives the metadata,
posts one ``irecv`` per tensor and returns the dict with its handles; ``send_tensor_dict``/``recv_tensor_dict``
wait for the handles (what vLLM's worker does asynchronously, ``worker/worker.py`` does too). Before, vLLM sent
each tensor blocking (``parallel_state.py`` at ``0c175ae``): the same messages, each waited at once.
Custom path (``use_cpu_custom_send_recv``): the whole dict goes to ``device_communicator``, synchronously.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from explainer.distributed import phases
from explainer.distributed.tensor_metadata import TensorMetadata, decode_metadata, encode_metadata, split_tensor_dict


class TensorDictPaths:
    """Needs ``ranks``, ``world_size``, ``cpu_group``, ``device_communicator``, ``use_cpu_custom_send_recv``,
    ``pending_isends``, ``bounded`` and ``transfer_peer`` (``GroupCoordinator`` has them)."""

    transfers = 0                  # tensor dicts so far: the first two mark the rank's phase for the launcher

    def _count_transfer(self) -> None:
        if self.transfers < 2:
            self.transfers += 1
            phases.enter("first-transfer" if self.transfers == 1 else "steady-state")

    # --- generic objects ---------------------------------------------------------------------
    def recv_object(self, src: int) -> bytes:
        size = torch.empty(1, dtype=torch.long)
        rank_size = self.bounded("recv_object", src, dist.recv, size, src=self.ranks[src], group=self.cpu_group)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        rank_obj = self.bounded("recv_object", src, dist.recv, payload, src=self.ranks[src], group=self.cpu_group)
        assert rank_obj == rank_size, "Received object sender rank does not match the size sender rank."
        return payload.numpy().tobytes()

    # --- tensor dicts (ARCHITECTURE Seam 3) ----------------------------------------------------
    def send_tensor_dict(self, tensor_dict: dict[str, Any], dst: int | None = None) -> dict | None:
        """vLLM 0.32.0: ``isend_tensor_dict``, then wait for every handle."""
        if not dist.is_initialized() or self.world_size == 1:
            return tensor_dict
        handles = self.isend_tensor_dict(tensor_dict, dst)
        peer = (self.rank_in_group + 1) % self.world_size if dst is None else dst
        for handle in handles:
            self.bounded("send_tensor_dict", peer, handle.wait)
        if self.pending_isends and self.pending_isends[-1][0] is handles:
            self.pending_isends.pop()                    # waited: nothing left to retain
        return None

    def isend_tensor_dict(self, tensor_dict: dict[str, Any], dst: int | None = None) -> list:
        """Post every send of one dict and return the handles: the metadata (an int64 size, then the bytes, over
        the cpu group), then one ``isend`` per non-empty tensor. Handles and source tensors are also kept in
        ``pending_isends`` until they complete, so a caller that drops the handles frees nothing in flight.
        The custom path (``use_cpu_custom_send_recv``) is synchronous and returns no handle."""
        if not dist.is_initialized() or self.world_size == 1:
            return []
        dst = self.transfer_peer(dst, +1)
        self._count_transfer()
        if self.use_cpu_custom_send_recv:
            self.device_communicator.send_tensor_dict(tensor_dict, dst)
            return []
        metadata_list, tensor_list = split_tensor_dict(tensor_dict)
        for t in tensor_list:
            if t.device.type != "cpu":
                raise ValueError(f"tensor on {t.device}: this CPU group accepts CPU tensors only")
        self._reap_completed_isends()
        payload = torch.frombuffer(bytearray(encode_metadata(metadata_list)), dtype=torch.uint8)
        sources = [torch.tensor([payload.numel()], dtype=torch.long), payload]    # vLLM's isend_object
        sources += [t.contiguous() for t in tensor_list if t.numel() > 0]       # empty ones: from metadata
        handles = [self.bounded("isend_tensor_dict", dst, dist.isend, t, dst=self.ranks[dst], group=self.cpu_group)
                   for t in sources]
        self.pending_isends.append((handles, sources))
        return handles

    def _reap_completed_isends(self) -> None:
        """Drop the retained sends that completed, oldest first. Unlike vLLM 0.32.0, the toy also waits for the
        metadata sends (gloo) to report completion: vLLM gates on the tensor sends' handles only (``handles[1:]``),
        because gloo's ``is_completed`` can answer early, and drops metadata-only entries without waiting."""
        while self.pending_isends and all(h.is_completed() for h in self.pending_isends[0][0]):
            self.pending_isends.popleft()

    def recv_tensor_dict(self, src: int | None = None) -> dict[str, Any] | None:
        """vLLM 0.32.0: ``irecv_tensor_dict``, then wait for every handle."""
        if not dist.is_initialized() or self.world_size == 1:
            return None
        tensor_dict, handles = self.irecv_tensor_dict(src)
        peer = (self.rank_in_group - 1) % self.world_size if src is None else src
        for handle in handles:
            self.bounded("recv_tensor_dict", peer, handle.wait)
        return tensor_dict

    def irecv_tensor_dict(self, src: int | None = None) -> tuple[dict[str, Any] | None, list]:
        """Receive the metadata (blocking), allocate each tensor and post its ``irecv``: (dict, handles). The
        tensors hold their values once the handles are waited. vLLM 0.32.0's also returns the post-processing
        calls of its all-gather option, which the toy does not have."""
        if not dist.is_initialized() or self.world_size == 1:
            return None, []
        src = self.transfer_peer(src, -1)
        self._count_transfer()
        if self.use_cpu_custom_send_recv:
            return self.device_communicator.recv_tensor_dict(src), []
        tensor_dict: dict[str, Any] = {}
        handles = []
        for key, value in decode_metadata(self.recv_object(src)):
            if isinstance(value, TensorMetadata):
                tensor = torch.empty(value.size, dtype=value.dtype, device=value.device)
                if tensor.numel() > 0:
                    handles.append(self.bounded("irecv_tensor_dict", src, dist.irecv, tensor,
                                                 src=self.ranks[src], group=self.cpu_group))
                tensor_dict[key] = tensor
            else:
                tensor_dict[key] = value
        return tensor_dict, handles
