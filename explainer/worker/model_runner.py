"""Per-rank model runner (vLLM MRV2 ``v1/worker/gpu/model_runner.py``) with DiffusionGemma's state.

Every PP rank owns a ``ModelRunner``: its slice of layers, its own ``RequestState`` (num_computed_tokens,
draft_tokens, all_token_ids) and its own ``DiffusionGemmaModelState`` holding the per-request canvas
state (``DiffusionGemmaRequestStates``, ``states.py``), which every rank initialises in ``add_request``. Only the
last rank builds the ``DiffusionSampler``, the one part that advances that state. One engine step on a rank is

    execute_model(scheduler_output, intermediate_tensors)
                                      # add/remove requests, prepare_inputs (first rank: embed + SC),
                                      # prepare_attn (every rank: causal flags from is_encoder_phase),
                                      # forward; a non-last rank returns its IntermediateTensors
                                      # (the ``Worker``, worker.py, receives and sends them)
    sample_tokens()                   # last rank: logits -> sampler -> back-channel broadcast;
                                      # others: receive it; everyone: post_update (num_computed_tokens
                                      # += scheduled - rejected, as vLLM's postprocess) and returns the
                                      # step's ModelRunnerOutput as it knows it

and only the blocking group calls synchronise ranks, so the same code runs ranks in one process
(``distributed/inprocess.py``) or one rank per process. The runner records nothing: what a run shows is taken
from outside, by the recorder the executor wraps around each worker, which asks the runner for its view of the
state (``state_view``) and for what the step's sampler returned (``sampler_output``).

Self-conditioning (``model_state.py``) and the sampler's draw (``diffusion_sampler.py``) are documented where
they happen.
"""

from __future__ import annotations

import torch

from explainer.config import EngineConfig
from explainer.model.kv_cache import KVCache
from explainer.model.registry import ModelRegistry
from explainer.model.stages import IntermediateTensors, get_pp_indices
from explainer.worker.diffusion_sampler import DiffusionSampler
from explainer.worker.model_state import DiffusionGemmaModelState
from explainer.worker.input_batch import InputBatch
from explainer.worker.outputs import ModelRunnerOutput, SamplerOutput, SchedulerOutput
from explainer.worker.pp_utils import PPHandler
from explainer.worker.states import RequestState, state_tensors


class ModelRunner:
    def __init__(self, config: EngineConfig, group):
        self.config, self.group = config, group
        self.rank, self.world_size = group.rank_in_group, group.world_size
        self.is_first_rank, self.is_last_rank = group.is_first_rank, group.is_last_rank
        self.start_layer, self.end_layer = get_pp_indices(config.num_hidden_layers, self.rank, self.world_size)
        self.model = ModelRegistry.resolve_model_cls(config.model)(self.start_layer, self.end_layer)   # load_model
        if not self.is_first_rank:   # persistent receive buffer; a non-PP model has no such method
            self.intermediate_tensors = self.model.make_empty_intermediate_tensors(
                batch_size=1, dtype=torch.float32, device="cpu", num_tokens=config.max_num_batched_tokens)
        self.req_states = RequestState(config.max_num_seqs, config.canvas_length)
        self.model_state = DiffusionGemmaModelState(config)
        self.sampler = (DiffusionSampler(config, self.model, self.model_state, self.req_states)
                        if self.is_last_rank else None)
        self.pp = PPHandler(group, num_spec=config.num_speculative_tokens, hidden_size=config.hidden_size,
                            mode=config.pp_mode, sync_fields=config.sync_fields)
        self.generator = torch.Generator().manual_seed(config.seed)   # this worker's "global" RNG
        self.kv_caches: dict[int, KVCache] = {}
        self.input_batch: InputBatch | None = None
        self._hidden: dict[int, torch.Tensor] = {}
        self.sampler_output: SamplerOutput | None = None        # the last rank's sampler, this step

    # ---- request lifecycle -------------------------------------------------------------------------
    def _update_states(self, scheduler_output: SchedulerOutput) -> None:
        for req_id in scheduler_output.finished_req_ids:
            if req_id in self.req_states.req_id_to_slot:
                slot = self.req_states.remove_request(req_id)
                self.model_state.remove_request(slot)
                self.kv_caches.pop(slot, None)
                if self.sampler:
                    self.sampler.remove_request(slot)
        for new in scheduler_output.scheduled_new_reqs:
            slot = self.req_states.add_request(new.req_id, new.prompt_token_ids, new.max_tokens)
            # state-sync (#52015) seeds the initial canvas per request; otherwise this worker's RNG
            g = (torch.Generator().manual_seed(new.seed) if self.config.pp_mode == "state-sync"
                 else self.generator)
            self.model_state.add_request(slot, new.req_id, len(new.prompt_token_ids), g)
            self.kv_caches[slot] = self.model.new_kv_cache()
            if self.sampler:
                self.sampler.add_request(slot, new.seed)

    def _prepare_batch(self, scheduler_output: SchedulerOutput) -> InputBatch:
        b = InputBatch([], [], [], [], [], [], [])
        for req_id, n in scheduler_output.num_scheduled_tokens.items():
            slot = self.req_states.req_id_to_slot[req_id]
            start = int(self.req_states.num_computed_tokens[slot])
            is_decode = req_id in scheduler_output.scheduled_spec_decode_tokens
            if is_decode:    # the canvas travels as draft tokens
                ids = self.req_states.draft_tokens[slot, :n].clone()
            else:
                ids = torch.tensor(self.req_states.all_token_ids[slot][start:start + n], dtype=torch.int64)
            finishes = not is_decode and start + n >= len(self.req_states.all_token_ids[slot])
            b.req_ids.append(req_id), b.slots.append(slot), b.query_lens.append(n)
            b.is_decode.append(is_decode), b.finishes_prefill.append(finishes), b.input_ids.append(ids)
            b.positions.append(torch.arange(start, start + n))
        return b

    # ---- one step ------------------------------------------------------------------------------------
    @torch.no_grad()
    def execute_model(self, scheduler_output: SchedulerOutput,
                      intermediate_tensors: IntermediateTensors | None = None) -> IntermediateTensors | None:
        self._update_states(scheduler_output)
        batch = self.input_batch = self._prepare_batch(scheduler_output)
        if not batch.req_ids:
            return None
        causal = self.model_state.prepare_attn(batch.slots).tolist()
        embeds = ([self.model_state.prepare_inputs(self.model, ids, s, d)
                   for ids, s, d in zip(batch.input_ids, batch.slots, batch.is_decode)]
                  if self.is_first_rank else None)
        total = sum(batch.query_lens)
        if not self.is_first_rank:
            received = self.pp.recv_intermediate_tensors(self.intermediate_tensors, total, intermediate_tensors)
        outputs, offset = [], 0
        for i, slot in enumerate(batch.slots):
            kv, n = self.kv_caches[slot], batch.query_lens[i]
            assert kv.length == int(self.req_states.num_computed_tokens[slot]), "KV cache out of sync"
            if self.is_first_rank:
                out = self.model(positions=batch.positions[i], inputs_embeds=embeds[i], kv_cache=kv,
                                 causal=causal[i])
            else:
                it = IntermediateTensors({k: v[:, offset:offset + n] for k, v in received.items()})
                out = self.model(positions=batch.positions[i], intermediate_tensors=it, kv_cache=kv,
                                 causal=causal[i])
            outputs.append(out)
            offset += n
        if self.is_last_rank:
            self._hidden = {i: h for i, h in enumerate(outputs) if batch.is_decode[i]}
            return None
        return IntermediateTensors({k: torch.cat([o[k] for o in outputs], dim=1) for k in outputs[0].keys()})

    @torch.no_grad()
    def sample(self, batch) -> SamplerOutput:
        """Last rank: logits -> the DiffusionSampler (kept as ``sampler_output`` for the step)."""
        logits = {i: self.model.compute_logits(h) for i, h in self._hidden.items()}
        self.sampler_output = SamplerOutput(*self.sampler(batch, logits))
        return self.sampler_output

    def sample_tokens(self) -> ModelRunnerOutput:
        """Last rank: sample, broadcast the back-channel. Others: receive it. Every rank then runs
        post_update and returns the step's output as this rank knows it (identical on every rank)."""
        batch = self.input_batch
        if batch is None or not batch.req_ids:
            return ModelRunnerOutput([], [], [], {})
        if self.is_last_rank:
            sampled, num_sampled, num_rejected, _ = self.sample(batch)
            if self.pp.enabled:
                self.pp.broadcast(sampled, num_sampled, num_rejected, synced=self._synced_state(batch))
        else:
            got = self.pp.receive(len(batch.slots), like=self._synced_state(batch))
            sampled, (num_sampled, num_rejected) = got["sampled_token_ids"], got["num_sampled_num_rejected"]
            if self.config.pp_mode == "state-sync":
                self._apply_synced_state(batch, got)
        self.post_update(batch, sampled, num_sampled, num_rejected, batch.query_lens)
        return ModelRunnerOutput(
            list(batch.req_ids), [sampled[i, :int(num_sampled[i])].tolist() for i in range(len(batch.slots))],
            [int(n) for n in num_rejected],
            {rid: self.req_states.draft_tokens[s].tolist() for rid, s in zip(batch.req_ids, batch.slots)})

    def _synced_state(self, batch: InputBatch) -> dict[str, torch.Tensor] | None:
        """state-sync: this rank's copy of each ``config.sync_fields`` field for the batch's slots."""
        if self.config.pp_mode != "state-sync":
            return None
        fields = self.state_tensors()
        return {name: fields[name][batch.slots] for name in self.config.sync_fields}

    def _apply_synced_state(self, batch: InputBatch, got: dict) -> None:
        """state-sync (#52015): overwrite this rank's copy of each synced field with the owner's values."""
        fields = self.state_tensors()
        for name in self.config.sync_fields:
            if name in got:                                       # first-rank-only fields reach rank 0 only
                fields[name][batch.slots] = got[name]

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Every per-request state tensor this rank holds, slot-indexed, by field name."""
        return state_tensors(self.req_states, self.model_state.req_states)

    def state_view(self) -> dict:
        """This rank's view of each request, as the recorder snapshots it: canvas ids, ``draft_tokens``,
        ``is_encoder_phase``, the norm of ``self_conditioning_embeds``, ``step`` and ``num_computed_tokens``."""
        st, rs = self.model_state.req_states, self.req_states
        return {rid: {"canvas": st.canvas[s].tolist(), "draft_tokens": rs.draft_tokens[s].tolist(),
                      "is_encoder_phase": bool(st.is_encoder_phase[s]),
                      "self_conditioning_embeds": round(float(st.self_conditioning_embeds[s].norm()), 5),
                      "step": int(st.step[s]), "num_computed_tokens": int(rs.num_computed_tokens[s])}
                for rid, s in rs.req_id_to_slot.items()}

    def post_update(self, batch: InputBatch, sampled, num_sampled, num_rejected, query_lens=None) -> None:
        """vLLM's ``post_update``: num_computed_tokens += the scheduled tokens (``query_lens``; None when they were
        already counted, optimistically) - num_rejected (denoise rolls back; KV truncated); append sampled."""
        for i, slot in enumerate(batch.slots):
            n = (int(self.req_states.num_computed_tokens[slot]) + (query_lens[i] if query_lens else 0)
                 - int(num_rejected[i]))
            self.req_states.num_computed_tokens[slot] = n
            self.req_states.all_token_ids[slot] += sampled[i, :int(num_sampled[i])].tolist()
            self.kv_caches[slot].truncate(n)
