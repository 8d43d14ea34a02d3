"""``AsyncModelRunner``: the ``ModelRunner`` of the asynchronous PP schedule (vLLM #42187, MRV2
``model_runner.py`` at ``0036d38``).

Non-last ranks consume the back-channel entry of ``pp_size`` steps ago at the top of ``execute_model``
(``update_pp_decode_requests``) and only *post* the receive in ``sample_tokens``; the last rank samples and
broadcasts. ``pp_async.py`` documents the handler, the FIFO and where the toy is exact and where it is not.
"""

from __future__ import annotations

import torch

from explainer.model.stages import IntermediateTensors
from explainer.worker.model_runner import ModelRunner
from explainer.worker.input_batch import InputBatch
from explainer.worker.outputs import ModelRunnerOutput, SchedulerOutput
from explainer.worker.pp_async import AsyncPPHandler, compute_need_sampled_mask


class AsyncModelRunner(ModelRunner):
    """``ModelRunner`` on the async schedule: consume at the top of ``execute_model``; non-last ranks'
    ``sample_tokens`` only post the receive and return ``None`` (vLLM's return a KV-connector-only output)."""

    def __init__(self, config, group):
        super().__init__(config, group)
        self.pp = AsyncPPHandler(group, num_spec=config.num_speculative_tokens, hidden_size=config.hidden_size,
                                 mode=config.pp_mode, max_num_reqs=config.max_num_seqs)
        self._step = 0
        self.need_sampled_mask = None                           # this step's compute_need_sampled_mask
        self.consumed: tuple[int, list[str], list[str]] | None = None   # (step, fields, req ids) taken this step

    @torch.no_grad()
    def execute_model(self, scheduler_output: SchedulerOutput,
                      intermediate_tensors: IntermediateTensors | None = None) -> IntermediateTensors | None:
        self._step = scheduler_output.step
        self.consumed = None
        if self.pp.enabled and not self.is_last_rank:
            self.consumed = self.update_pp_decode_requests()
        for req_id in scheduler_output.finished_req_ids:          # generation counter, then free
            slot = self.req_states.req_id_to_slot.get(req_id)
            if slot is not None:
                self.pp.on_req_idx_freed(slot)
        computed = {}
        for req_id in scheduler_output.num_scheduled_tokens:      # old_computed, for the mask
            slot = self.req_states.req_id_to_slot.get(req_id)
            computed[req_id] = 0 if slot is None else int(self.req_states.num_computed_tokens[slot])
        output = super().execute_model(scheduler_output, intermediate_tensors)
        batch = self.input_batch
        before = [computed[r] for r in batch.req_ids]
        prefill = [len(self.req_states.all_token_ids[s]) if not d else 0
                   for s, d in zip(batch.slots, batch.is_decode)]
        prefilling = [not d and c < p for d, c, p in zip(batch.is_decode, before, prefill)]
        caps = [self.req_states.max_seq_len[s] for s in batch.slots] if any(prefilling) else None
        self.need_sampled_mask = (compute_need_sampled_mask(batch, before, prefill, caps, prefilling)
                                  if batch.req_ids else None)
        return output

    def update_pp_decode_requests(self) -> tuple[int, list[str], list[str]] | None:
        """Take the back-channel entry of ``pp_size`` steps ago: post_update (roll back the optimistic
        ``num_computed_tokens``), then the synced fields. Returns (its step, the fields set, the requests)."""
        got = self.pp.get_prev_sampled_outputs()
        if got is None:
            return None
        pending, keep = got
        t = pending.tensors
        sampled, (num_sampled, num_rejected) = t["sampled_token_ids"], t["num_sampled_num_rejected"]
        st = self.model_state.req_states
        batch = InputBatch([pending.req_ids[i] for i in keep], [pending.slots[i] for i in keep],
                           [], [], [], [], [])
        self.post_update(batch, sampled[keep], num_sampled[keep], num_rejected[keep])   # counted at sample_tokens
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
        return pending.step, applied, batch.req_ids

    @torch.no_grad()
    def sample_tokens(self) -> ModelRunnerOutput | None:
        batch = self.input_batch
        if batch is None or not batch.req_ids:
            if self.pp.enabled and not self.is_last_rank:
                self.pp.post_receive(self._step, batch, None)
            return ModelRunnerOutput([], [], [], {}) if self.is_last_rank else None
        if not self.is_last_rank:            # post the receive; count the tokens optimistically; return None
            self.pp.post_receive(self._step, batch, self.need_sampled_mask)
            for slot, n in zip(batch.slots, batch.query_lens):      # vLLM: postprocess_num_computed_tokens
                self.req_states.num_computed_tokens[slot] += n
            return None
        sampled, num_sampled, num_rejected, _ = self.sample(batch)
        if self.pp.enabled:
            st = self.model_state.req_states
            self.pp.broadcast_async(sampled, num_sampled, num_rejected, batch, self.need_sampled_mask,
                                    self.req_states.draft_tokens[batch.slots],
                                    synced={"is_encoder_phase": st.is_encoder_phase[batch.slots],
                                            "self_conditioning_embeds": st.self_conditioning_embeds[batch.slots]})
        self.post_update(batch, sampled, num_sampled, num_rejected, batch.query_lens)
        return self._output(batch, sampled, num_sampled, num_rejected)

    def delivered_output(self, step: int) -> ModelRunnerOutput | None:
        """Non-last rank: complete the receive for ``step`` (if posted) and return the step's output as
        this rank now knows it (its replicated scheduler needs it in the one-process-per-rank backend)."""
        pending = self.pp.deliver(step)
        if pending is None:
            return None
        t = pending.tensors
        sampled, (num_sampled, num_rejected) = t["sampled_token_ids"], t["num_sampled_num_rejected"]
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
