"""The asynchronous PP back-channel as vLLM 0.32.0 runs it (``PPHandler`` in ``v1/worker/gpu/pp_utils.py``; the
schedule came with #42187, first read at ``007f85b5``) and the runner that uses it (``async_model_runner.py``).
What 0.32.0 adds to ``007f85b5`` and the toy runs: the ``finished_prefill`` clause of the mask
(``0.32.0 v1/worker/gpu/pp_utils.py:38-52 finished_prefill &= input_batch.is_prefilling_np``), its own broadcast group
(``0.32.0 v1/worker/gpu/pp_utils.py:94-96 group_desc="pp_broadcast"``), the ids padded to ``max_sample_len`` and the draft
relay the runner calls (``0.32.0 v1/worker/gpu/model_runner.py:2263-2273 self.pp_handler.broadcast_drafts(``).

With ``pp_schedule="async"`` every stage works on a different batch each tick (the toy keeps ``pp_size`` batches in
flight; vLLM with Model Runner V2 schedules asynchronously and keeps ``pp_size + 1``,
``0.32.0 config/vllm.py:577-587 return pp_size + 1``) and nobody waits for the back-channel inside a step:

* the last rank samples step T and broadcasts ``sampled_token_ids`` [n, num_speculative_steps + 1] int64 (its int64
  ``assert`` comes *after* the early return on a ``None`` mask), ``num_sampled_num_rejected`` [2, n]
  int32 and, because ``num_speculative_steps`` = CL > 0, ``draft_tokens`` [n, CL] int64;
* a non-last rank's ``sample_tokens`` only *posts* the receive (vLLM: on a side stream). vLLM's then advances
  ``num_computed_tokens`` optimistically and returns a KV-connector-only output
  (``0.32.0 v1/worker/gpu/model_runner.py:2110-2127 ModelRunnerOutput.with_kv_conn_output_only(kv_connector_output)``).
  The toy advances ``num_computed_tokens`` there too, and returns ``None``;
* the posted receive sits in a FIFO pre-seeded with ``pp_size`` empty slots and is consumed ``pp_size``
  steps later, at the top of ``execute_model`` (``update_pp_decode_requests`` ->
  ``get_prev_sampled_outputs`` -> post_update: roll back ``num_computed_tokens``, append the sampled
  ids, take the drafts), skipping requests freed since (a per-slot generation counter);
* both sides decide independently whether the collective happens this step
  (``compute_need_sampled_mask``: does any request finish its prefill or decode?). They must agree, or
  the collective never pairs up. Here that is a bounded wait that names the peer. In vLLM the broadcast waits until
  the NCCL watchdog's timeout takes the group down (PyTorch's default, 600 s:
  ``0.32.0 config/parallel.py:360-363 PyTorch's default timeout is used (600s for NCCL)``).

Where this toy is exact and where it is not:

* ``compute_need_sampled_mask`` is 0.32.0's: the prefill test from each rank's own bookkeeping, and the
  ``finished_prefill`` clause with each request's ``max_seq_len`` (prompt + ``max_tokens``, as 0.32.0's
  ``RequestState`` keeps it) on batches with a prefill; without them it is ``007f85b5``'s form.
* The drafts: 0.32.0's runner calls ``broadcast_drafts`` after the sampler whenever ``num_speculative_steps > 0``
  and the consumer writes them into ``draft_tokens`` (both read); the toy does the same.
* The toy's engine issues one (possibly empty) step per tick, so "``pp_size`` steps later" is exactly a
  request's next step. vLLM's runner consumes the FIFO before its empty-step early return; whether its
  engine core issues empty steps under PP was not checked.
* ``state-sync`` (#52015) rides the same deferred path: its extra tensors are applied at consume time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from explainer.worker.input_batch import InputBatch
from explainer.worker.pp_utils import PPHandler


def compute_need_sampled_mask(batch: InputBatch, num_computed_before: list[int], prefill_lens: list[int],
                              max_seq_lens: list[int | None] | None = None,
                              is_prefilling: list[bool] | None = None) -> list[bool] | None:
    """vLLM 0.32.0's ``compute_need_sampled_mask``: per request, does this step produce a sample a later step
    needs (``old_computed + num_scheduled >= prefill_len``), except a final prefill chunk whose one sampled token
    reaches the request's length cap (``finished_prefill = prefill_len + 1 >= max_seq_len``, only when the batch
    carries ``max_seq_lens``: the runner passes them for batches with a prefill)? None when no request needs one:
    no collective this step. Without ``max_seq_lens`` it is the ``007f85b5`` form."""
    mask = [c + n >= p for c, n, p in zip(num_computed_before, batch.query_lens, prefill_lens)]
    if max_seq_lens is not None:
        mask = [m and not (pre and cap is not None and p + 1 >= cap)
                for m, p, cap, pre in zip(mask, prefill_lens, max_seq_lens, is_prefilling)]
    return mask if any(mask) else None


@dataclass
class PendingRecv:
    """One posted receive (vLLM ``PendingRecv``): buffers pre-allocated, filled when the wire delivers."""
    step: int
    slots: list[int]
    req_ids: list[str]
    need_sampled_mask: list[bool]
    gen_at_receive: list[int]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    done: bool = False


class AsyncPPHandler(PPHandler):
    """The #42187 ``PPHandler``: back-channel deferred by ``pp_size`` steps through a FIFO."""

    def __init__(self, group, *, num_spec: int, hidden_size: int, mode: str, max_num_reqs: int):
        super().__init__(group, num_spec=num_spec, hidden_size=hidden_size, mode=mode)
        # the back-channel's own group, so it never queues behind the stage-to-stage sends (vLLM 0.32.0)
        self.broadcast_group = group.make_sibling_device_group("pp_broadcast") if self.enabled else group
        # non-last ranks: one entry per in-flight step, pre-seeded with pp_size empty slots
        self.queue: deque[PendingRecv | None] = deque() if self.rank == self.last else deque(
            [None] * group.world_size)
        self.wire: deque[PendingRecv] = deque()        # posted, not yet delivered ("side stream")
        self.req_idx_gen = [0] * max_num_reqs

    def broadcast_names(self) -> list[str]:
        """``broadcast`` + ``broadcast_drafts``, in the order they are sent (``self_conditioning_embeds`` goes to
        the first rank as a tensor dict)."""
        return (list(super().broadcast_names()) + ["draft_tokens"] * (self.num_spec > 0)
                + ["is_encoder_phase"] * (self.mode == "state-sync"))

    def on_req_idx_freed(self, slot: int) -> None:
        self.req_idx_gen[slot] += 1

    # ---- last rank -------------------------------------------------------------------------------
    def broadcast_async(self, sampled_token_ids, num_sampled, num_rejected, batch: InputBatch, mask,
                        draft_tokens: torch.Tensor, synced: dict | None = None) -> bool:
        """``broadcast`` + ``broadcast_drafts``: returns False when the mask says skip (early return,
        *before* the int64 assert)."""
        if mask is None:
            return False
        assert sampled_token_ids.dtype == torch.int64
        n, width = sampled_token_ids.shape
        padded = torch.zeros(n, self.num_spec + 1, dtype=torch.int64)
        padded[:, :width] = sampled_token_ids
        tensors = {"sampled_token_ids": padded,
                   "num_sampled_num_rejected": torch.stack([num_sampled, num_rejected]).to(torch.int32)}
        if self.num_spec > 0:                                   # broadcast_drafts
            tensors["draft_tokens"] = draft_tokens.to(torch.int64).contiguous()
        if self.mode == "state-sync":
            tensors["is_encoder_phase"] = synced["is_encoder_phase"].to(torch.bool).contiguous()
        for tensor in tensors.values():
            self.broadcast_group.broadcast(tensor, src=self.last)
        to_first = {}
        if self.mode == "state-sync":
            to_first = {"self_conditioning_embeds": synced["self_conditioning_embeds"].contiguous()}
            self.group.send_tensor_dict(to_first, dst=0)
        return True

    # ---- non-last ranks --------------------------------------------------------------------------
    def post_receive(self, step: int, batch: InputBatch, mask) -> PendingRecv | None:
        """``receive``: pre-allocate and queue; the data arrives later (``deliver``)."""
        if mask is None:
            return None                                          # leave this step's slot None
        n = len(batch.slots)
        tensors = {"sampled_token_ids": torch.empty(n, self.num_spec + 1, dtype=torch.int64),
                   "num_sampled_num_rejected": torch.empty(2, n, dtype=torch.int32)}
        if self.num_spec > 0:
            tensors["draft_tokens"] = torch.empty(n, self.num_spec, dtype=torch.int64)
        if self.mode == "state-sync":
            tensors["is_encoder_phase"] = torch.empty(n, dtype=torch.bool)
        pending = PendingRecv(step, list(batch.slots), list(batch.req_ids), mask,
                              [self.req_idx_gen[s] for s in batch.slots], tensors)
        self.queue[-1] = pending
        self.wire.append(pending)
        return pending

    def deliver(self, step: int) -> PendingRecv | None:
        """The side stream completes the oldest posted receive if it is for ``step``: the blocking
        collective happens here, at the tick the last rank broadcasts."""
        if not self.wire or self.wire[0].step != step:
            return None
        pending = self.wire.popleft()
        for tensor in pending.tensors.values():
            self.broadcast_group.broadcast(tensor, src=self.last)
        if self.mode == "state-sync" and self.rank == 0:
            pending.tensors.update(self.group.recv_tensor_dict(src=self.last))
        pending.done = True
        return pending

    def get_prev_sampled_outputs(self) -> tuple[PendingRecv, list[int]] | None:
        """Pop the entry of ``pp_size`` steps ago (reserve a slot for this step); keep the rows that
        needed a sample and whose slot was not freed since. Returns (entry, kept row indices)."""
        if not self.queue:
            return None
        pending = self.queue.popleft()
        self.queue.append(None)
        if pending is None:
            return None
        while not pending.done:                                  # wait for its event (bounded)
            if self.deliver(self.wire[0].step) is None:
                break
        keep = [i for i, (s, g, m) in enumerate(zip(pending.slots, pending.gen_at_receive, pending.need_sampled_mask))
                if m and self.req_idx_gen[s] == g]
        return (pending, keep) if keep else None
