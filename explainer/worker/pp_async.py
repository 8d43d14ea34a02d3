"""The asynchronous PP back-channel (vLLM #42187, ``PPHandler`` in ``v1/worker/gpu/pp_utils.py`` at
``007f85b5``) and the runner that uses it (MRV2 ``model_runner.py`` at ``0036d38``).

With ``pp_schedule="async"`` every stage works on a different batch each tick (one batch in flight per
stage) and nobody waits for the back-channel inside a step:

* the last rank samples step T and broadcasts ``sampled_token_ids`` [n, num_spec+1] int64 (its int64
  ``assert`` comes *after* the ``need_sampled`` early return), ``num_sampled_num_rejected`` [2, n]
  int32 and, because ``num_speculative_steps`` = CL > 0, ``draft_tokens`` [n, CL] int64;
* a non-last rank's ``sample_tokens`` only *posts* the receive (vLLM: on a side stream), advances its
  ``num_computed_tokens`` optimistically (already done in ``execute_model``) and returns nothing;
* the posted receive sits in a FIFO pre-seeded with ``pp_size`` empty slots and is consumed ``pp_size``
  steps later, at the top of ``execute_model`` (``update_pp_decode_requests`` ->
  ``get_prev_sampled_outputs`` -> post_update: roll back ``num_computed_tokens``, append the sampled
  ids, take the drafts), skipping requests freed since (a per-slot generation counter);
* both sides decide independently whether the collective happens this step
  (``compute_need_sampled_mask``: does any request finish its prefill or decode?). They must agree, or
  the collective never pairs up: here a bounded wait that names the peer (vLLM: a hang).

Where this toy is exact and where it is not:

* ``compute_need_sampled_mask`` is the ``007f85b5`` one (``num_computed + num_scheduled >= prefill_len``,
  from each rank's own bookkeeping). The runner at ``0036d38`` passes a ``max_seq_len`` that "is only
  consumed by the PP compute_need_sampled_mask", i.e. a later mask revision we have not read.
* The runner at ``0036d38`` neither calls ``broadcast_drafts`` nor passes ``draft_tokens_to_update``;
  the handler at ``007f85b5`` receives drafts whenever ``num_speculative_steps > 0``. The toy wires both
  ends (drafts sent after the sampler, applied at consume time), as the handler's docstring intends
  ("so non-last ranks can embed real token ids"). That coupling is inferred, not read.
* The toy's engine issues one (possibly empty) step per tick, so "``pp_size`` steps later" is exactly a
  request's next step. vLLM's runner consumes the FIFO before its empty-step early return; whether its
  engine core issues empty steps under PP was not checked.
* ``state-sync`` (#52015) rides the same deferred path: its extra tensors are applied at consume time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from explainer.worker.pp_utils import PPHandler, _transfer
from explainer.worker.model_runner import InputBatch, ModelRunner, ModelRunnerOutput, SchedulerOutput


def compute_need_sampled_mask(batch: InputBatch, num_computed_before: list[int],
                              prefill_lens: list[int]) -> list[bool] | None:
    """vLLM ``compute_need_sampled_mask`` (007f85b5): per request, does this step produce a sample
    (``old_computed + num_scheduled >= prefill_len``)? None when none does: no collective this step."""
    mask = [c + n >= p for c, n, p in zip(num_computed_before, batch.query_lens, prefill_lens)]
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

    def __init__(self, group, trace, *, num_spec: int, hidden_size: int, mode: str, max_num_reqs: int):
        super().__init__(group, trace, num_spec=num_spec, hidden_size=hidden_size, mode=mode)
        # non-last ranks: one entry per in-flight step, pre-seeded with pp_size empty slots
        self.queue: deque[PendingRecv | None] = deque() if self.rank == self.last else deque(
            [None] * group.world_size)
        self.wire: deque[PendingRecv] = deque()        # posted, not yet delivered ("side stream")
        self.req_idx_gen = [0] * max_num_reqs

    def on_req_idx_freed(self, slot: int) -> None:
        self.req_idx_gen[slot] += 1

    # ---- last rank -------------------------------------------------------------------------------
    def broadcast_async(self, sampled_token_ids, num_sampled, num_rejected, batch: InputBatch, mask,
                        draft_tokens: torch.Tensor, synced: dict | None = None) -> bool:
        """``broadcast`` + ``broadcast_drafts``: returns False when the mask says skip (early return,
        *before* the int64 assert)."""
        if mask is None:
            self.trace.record(self.rank, "broadcast", "need_sampled mask is None: no request finishes a "
                              "prefill or decodes, the broadcast returns early", data={"skipped": True})
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
        transfers = []
        for name, tensor in tensors.items():
            self.group.broadcast(tensor, src=self.last)
            transfers += [_transfer(self.last, r, name, tensor, "broadcast") for r in range(self.last)]
        if self.mode == "state-sync":
            sc = synced["self_conditioning_embeds"].contiguous()
            self.group.send_tensor_dict({"self_conditioning_embeds": sc}, dst=0)
            transfers.append(_transfer(self.last, 0, "self_conditioning_embeds", sc, "send"))
        self.trace.record(self.rank, "broadcast", f"back-channel ({self.mode}, async) -> ranks 0..{self.last - 1}; "
                          f"consumed there {self.group.world_size} steps later", transfers=transfers)
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
            self.group.broadcast(tensor, src=self.last)
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


class AsyncModelRunner(ModelRunner):
    """``ModelRunner`` on the async schedule: consume at the top of ``execute_model``; non-last ranks'
    ``sample_tokens`` only post the receive and return nothing."""

    def __init__(self, config, group, trace):
        super().__init__(config, group, trace)
        self.pp = AsyncPPHandler(group, trace, num_spec=config.num_speculative_tokens,
                                 hidden_size=config.hidden_size, mode=config.pp_mode,
                                 max_num_reqs=config.max_num_seqs)
        self._step = 0
        self._mask = None

    @torch.no_grad()
    def execute_model(self, so: SchedulerOutput) -> None:
        self.trace.set_step(so.step, so.warmup)
        self._step = so.step
        if self.pp.enabled and not self.is_last_rank:
            self.update_pp_decode_requests()
        for req_id in so.finished_req_ids:                      # generation counter, then free
            slot = self.req_states.req_id_to_slot.get(req_id)
            if slot is not None:
                self.pp.on_req_idx_freed(slot)
        computed = {}
        for req_id in so.num_scheduled_tokens:                  # old_computed, for the mask
            slot = self.req_states.req_id_to_slot.get(req_id)
            computed[req_id] = 0 if slot is None else int(self.req_states.num_computed_tokens[slot])
        super().execute_model(so)
        batch = self._batch
        prefill = [len(self.req_states.all_token_ids[s]) if not d else 0
                   for s, d in zip(batch.slots, batch.is_decode)]
        self._mask = (compute_need_sampled_mask(batch, [computed[r] for r in batch.req_ids], prefill)
                      if batch.req_ids else None)

    def update_pp_decode_requests(self) -> None:
        got = self.pp.get_prev_sampled_outputs()
        if got is None:
            return
        pending, keep = got
        t = pending.tensors
        sampled, (num_sampled, num_rejected) = t["sampled_token_ids"], t["num_sampled_num_rejected"]
        st = self.model_state.req_states
        batch = InputBatch([pending.req_ids[i] for i in keep], [pending.slots[i] for i in keep],
                           [], [], [], [], [])
        self._post_update(batch, sampled[keep], num_sampled[keep], num_rejected[keep])
        applied = ["num_computed_tokens", "all_token_ids"]
        if "draft_tokens" in t:
            self.req_states.draft_tokens[batch.slots] = t["draft_tokens"][keep]
            applied.append("draft_tokens")
        if "is_encoder_phase" in t:
            st.is_encoder_phase[batch.slots] = t["is_encoder_phase"][keep]
            applied.append("is_encoder_phase")
        if "self_conditioning_embeds" in t:
            st.self_conditioning_embeds[batch.slots] = t["self_conditioning_embeds"][keep]
            applied.append("self_conditioning_embeds")
        self.trace.record(self.rank, "consume", f"step {pending.step}'s back-channel, consumed "
                          f"{self.world_size} steps later: {', '.join(applied)} for {', '.join(batch.req_ids)}",
                          data={"consumed_step": pending.step, "applied": applied})

    @torch.no_grad()
    def sample_tokens(self) -> ModelRunnerOutput | None:
        batch = self._batch
        self.trace.set_step(self._step, self.trace.warmup)
        if batch is None or not batch.req_ids:
            if self.pp.enabled and not self.is_last_rank:
                self.pp.post_receive(self._step, batch, None)
            return ModelRunnerOutput([], [], [], {}) if self.is_last_rank else None
        if not self.is_last_rank:                                # post the receive, return nothing
            self.phase = "receive"
            posted = self.pp.post_receive(self._step, batch, self._mask)
            when = f"consumed {self.world_size} steps later" if posted else "mask None: no collective"
            self.trace.record(self.rank, "receive", f"receive posted for step {self._step} ({when}); "
                              f"num_computed_tokens advanced optimistically", data={"posted": posted is not None})
            return None
        sampled, num_sampled, num_rejected = self._sample(batch)
        if self.pp.enabled:
            self.phase = "broadcast"
            st = self.model_state.req_states
            self.pp.broadcast_async(sampled, num_sampled, num_rejected, batch, self._mask,
                                    self.req_states.draft_tokens[batch.slots],
                                    synced={"is_encoder_phase": st.is_encoder_phase[batch.slots],
                                            "self_conditioning_embeds": st.self_conditioning_embeds[batch.slots]})
        self._post_update(batch, sampled, num_sampled, num_rejected)
        return self._output(batch, sampled, num_sampled, num_rejected)

    def delivered_output(self, step: int) -> ModelRunnerOutput | None:
        """Non-last rank: complete the receive for ``step`` (if posted) and return the step's output as
        this rank now knows it (its replicated scheduler needs it in the one-process-per-rank backend)."""
        self.phase = "receive"
        pending = self.pp.deliver(step)
        if pending is None:
            return None
        self.trace.set_step(step, self.trace.warmup)            # recorded under the step it belongs to
        t = pending.tensors
        sampled, (num_sampled, num_rejected) = t["sampled_token_ids"], t["num_sampled_num_rejected"]
        self.trace.record(self.rank, "receive", f"back-channel for step {step} delivered (side stream): "
                          f"{', '.join(t)}", data={"delivered_step": step})
        drafts = t.get("draft_tokens")
        return ModelRunnerOutput(
            list(pending.req_ids), [sampled[i, :int(num_sampled[i])].tolist() for i in range(len(pending.slots))],
            [int(n) for n in num_rejected],
            {} if drafts is None else {rid: drafts[i].tolist() for i, rid in enumerate(pending.req_ids)})

    def _output(self, batch, sampled, num_sampled, num_rejected) -> ModelRunnerOutput:
        return ModelRunnerOutput(
            list(batch.req_ids), [sampled[i, :int(num_sampled[i])].tolist() for i in range(len(batch.slots))],
            [int(n) for n in num_rejected],
            {rid: self.req_states.draft_tokens[s].tolist() for rid, s in zip(batch.req_ids, batch.slots)})
