"""``PPHandler``: what crosses pipeline stages on the synchronous schedule (vLLM #33960's
``v1/worker/gpu/pp_handler.py`` at ``62900c5``; the asynchronous handler, as 0.32.0 runs it, is ``pp_async.py``).

Which revision this models, precisely: #33960's *timing* (a broadcast every step, no ``need_sampled_mask``, no
draft ids) with the later ``PPHandler.broadcast``'s *payload* (the int64 assert, the ids padded to
``max_sample_len`` = ``num_speculative_steps + 1``, the two counts stacked into one tensor; vLLM 0.32.0
``0.32.0 v1/worker/gpu/pp_utils.py:259 assert sampled_token_ids.dtype == torch.int64``).
#33960's own handler sent the ids as they were, in three separate broadcasts, with no assert, padding or stacking.
The toy's ``num_spec`` is vLLM's ``num_speculative_steps``.

Forward path: the ``Worker`` (``worker.py``) sends a non-last rank's ``IntermediateTensors`` to the next rank
and receives them on a non-first rank; the runner copies them into its persistent buffer
(``make_empty_intermediate_tensors``).

Back-channel from the last rank, after sampling, every step. This schedule has no ``need_sampled_mask`` and no
draft ids; the asynchronous schedule came with #42187, and the draft relay with #50514 and #46994. Generic modes
send the later ``PPHandler.broadcast`` payload on #33960's timing:

    sampled_token_ids   [num_reqs, num_speculative_steps + 1] int64   (an int64 assert first; inferred to be
                                                                      the warmup crash)
    num_sampled_num_rejected  [2, num_reqs] int32

Receivers pre-allocate both. Mode ``state-sync`` (open vLLM PR #52015) also broadcasts what every rank
reads: ``draft_tokens`` [num_reqs, CL] int64 and ``is_encoder_phase`` [num_reqs] bool, and sends
``self_conditioning_embeds`` [num_reqs, CL, H] fp32 to the first rank. ``EngineConfig.sync_fields``
picks any other subset of the per-request state fields (``vocab.REQUEST_STATE_FIELDS``; the workshop's
``sync-fields`` exercise): ``send_state``/``recv_state`` broadcast each chosen field, except those only the
first rank reads, which go point to point to it. ``broadcast_names`` is the payload's order, what a recorder of
the group's broadcasts names them by.
"""

from __future__ import annotations

import torch

from explainer.vocab import FIRST_RANK_ONLY_FIELDS

BACK_CHANNEL = ("sampled_token_ids", "num_sampled_num_rejected")


class PPHandler:
    def __init__(self, group, *, num_spec: int, hidden_size: int, mode: str, sync_fields: tuple[str, ...] = ()):
        """``sync_fields``: what mode ``state-sync`` sends besides the ids and counts (``EngineConfig.sync_fields``)."""
        self.group, self.mode = group, mode
        self.sync_fields = tuple(sync_fields) if mode == "state-sync" else ()
        self.num_spec, self.hidden_size = num_spec, hidden_size
        self.rank, self.last = group.rank_in_group, group.world_size - 1

    @property
    def enabled(self) -> bool:
        return self.group.world_size > 1

    def broadcast_names(self) -> list[str]:
        """The back-channel's broadcasts, in the order they are sent (what goes to the first rank only is a
        tensor dict: its keys name it)."""
        return list(BACK_CHANNEL) + [n for n in self.sync_fields if n not in FIRST_RANK_ONLY_FIELDS]

    # ---- forward path (the ``Worker`` receives and sends; the runner copies into its buffer) ---------
    def recv_intermediate_tensors(self, buffer, num_tokens: int, intermediate_tensors) -> dict[str, torch.Tensor]:
        """Copy what the previous rank sent (reading it waits for the receive) into the persistent buffer
        [1, max_tokens, H]; return views."""
        out = {}
        for name, tensor in intermediate_tensors.tensors.items():
            buffer[name][:, :num_tokens].copy_(tensor)
            out[name] = buffer[name][:, :num_tokens]
        return out

    # ---- back-channel ------------------------------------------------------------------------
    def broadcast(self, sampled_token_ids: torch.Tensor, num_sampled: torch.Tensor, num_rejected: torch.Tensor,
                  synced: dict[str, torch.Tensor] | None = None) -> None:
        """Last rank. ``synced``: the state-sync fields for this batch (None or empty in generic modes)."""
        assert sampled_token_ids.dtype == torch.int64
        n, width = sampled_token_ids.shape
        padded = torch.zeros(n, self.num_spec + 1, dtype=torch.int64)     # pad to max_sample_len
        padded[:, :width] = sampled_token_ids
        counts = torch.stack([num_sampled, num_rejected]).to(torch.int32)
        for tensor in (padded, counts):                        # BACK_CHANNEL
            self.group.broadcast(tensor, src=self.last)
        if synced:
            self.send_state(synced)

    def receive(self, num_reqs: int, like: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Non-last rank: pre-allocate, then take the last rank's back-channel tensors. ``like``: this rank's
        own copy of the state-sync fields (dtype and shape to pre-allocate), None in generic modes."""
        out = {"sampled_token_ids": torch.empty(num_reqs, self.num_spec + 1, dtype=torch.int64),
               "num_sampled_num_rejected": torch.empty(2, num_reqs, dtype=torch.int32)}
        for tensor in out.values():
            self.group.broadcast(tensor, src=self.last)
        if like:
            out.update(self.recv_state(like))
        return out

    # ---- state sync (#52015): any subset of the per-request state fields ------------------------------
    def send_state(self, synced: dict[str, torch.Tensor]) -> None:
        """Last rank: broadcast each field in order; the fields only the first rank reads go to it as one dict."""
        to_first = {}
        for name, tensor in synced.items():
            tensor = tensor.contiguous()
            if name in FIRST_RANK_ONLY_FIELDS:
                to_first[name] = tensor
                continue
            self.group.broadcast(tensor, src=self.last)
        if to_first:
            self.group.send_tensor_dict(to_first, dst=0)

    def recv_state(self, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Non-last rank: the mirror of ``send_state`` (the first rank also takes the point-to-point dict)."""
        out = {}
        for name, mine in like.items():
            if name not in FIRST_RANK_ONLY_FIELDS:
                out[name] = self.group.broadcast(torch.empty_like(mine, memory_format=torch.contiguous_format),
                                                 src=self.last)
        if self.rank == 0 and any(name in FIRST_RANK_ONLY_FIELDS for name in like):
            out.update(self.group.recv_tensor_dict(src=self.last))
        return out
