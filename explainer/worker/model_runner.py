"""Per-rank model runner (vLLM MRV2 ``v1/worker/gpu/model_runner.py``) with DiffusionGemma's state.

Every PP rank owns a ``ModelRunner``: its slice of layers, its own ``RequestState`` (num_computed_tokens,
draft_tokens, all_token_ids) and its own ``DiffusionGemmaModelState`` holding the per-request canvas
state (``DiffusionGemmaRequestStates``, reference §1.3). Only the last rank builds the
``DiffusionSampler`` (the only writer of that state). One engine step on a rank is

    execute_model(scheduler_output)   # add/remove requests, prepare_inputs (first rank: embed + SC),
                                      # prepare_attn (every rank: causal flags from is_encoder_phase),
                                      # recv -> forward -> send
    sample_tokens()                   # last rank: logits -> sampler -> back-channel broadcast;
                                      # others: receive it; everyone: post_update (rollback) and
                                      # returns the step's ModelRunnerOutput as it knows it

and only the blocking group calls synchronise ranks, so the same code runs ranks in one process
(``distributed/inprocess.py``) or one rank per process.

Self-conditioning, two modes (``EngineConfig.self_conditioning``):

* ``"hf"`` (default; keeps the engine at PP=1 token-identical to transformers): the SC MLP runs only on
  a request the rank believes is denoising (``is_encoder_phase`` False); a commit step's encoder pass
  gets plain embeddings, as HF's encoder pass does.
* ``"vllm"``: as vLLM's ``DiffusionGemmaModelState.prepare_inputs``: the SC MLP runs on every request
  that has logits this step (denoise *and* commit), on the stored soft embedding. Where that is zero
  (a canvas's first step, a commit step, a stale rank 0 that never receives it) the MLP adds zero and the
  result is ``post_norm(embeds)``: the weightless RMSNorm of the embeddings, not the embeddings.

The sampler's candidate draw (``EngineConfig.sampler_draw``): ``"multinomial"`` (HF's, default) or
``"gumbel"`` (vLLM ``DiffusionSampler``'s Gumbel-max over a ``rand`` of [1, CL, V]). The toy keeps one
generator per request (seeded like vLLM's per-request ``seed``); vLLM's DiffusionSampler draws from the
global RNG for the whole batch, so its tokens also depend on the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from explainer.config import EngineConfig
from explainer.model.kv_cache import KVCache
from explainer.model.stages import IntermediateTensors, get_pp_indices
from explainer.worker.pp_utils import PPHandler
from explainer.model.registry import ModelRegistry
from explainer.sampler import denoise_step
from explainer.trace import Trace


# ---- what the scheduler sends and gets back (vLLM ``SchedulerOutput`` / ``ModelRunnerOutput``) ----
@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list[int]
    seed: int


@dataclass
class SchedulerOutput:
    step: int
    scheduled_new_reqs: list[NewRequestData] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)        # batch order
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)   # CL drafts
    finished_req_ids: list[str] = field(default_factory=list)
    warmup: bool = False


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    sampled_token_ids: list[list[int]]
    num_rejected: list[int]
    draft_token_ids: dict[str, list[int]]      # draft_tokens_handler: the canvas each request denoises next


# ---- per-rank state -------------------------------------------------------------------------------
def _tensors_of(*states) -> dict[str, torch.Tensor]:
    return {k: v for st in states for k, v in vars(st).items() if isinstance(v, torch.Tensor)}


def request_state_fields() -> tuple[str, ...]:
    """The per-request state fields every rank holds (``RequestState`` + ``DiffusionGemmaRequestStates``
    tensors), sorted: the names state sync accepts (``EngineConfig.sync_fields``)."""
    return tuple(sorted(_tensors_of(RequestState(1, 1), DiffusionGemmaRequestStates(1, 1, 1, 0))))


class RequestState:
    """MRV2 ``RequestState``: slot-indexed bookkeeping (one copy per rank)."""

    def __init__(self, max_num_reqs: int, num_spec: int):
        self.req_id_to_slot: dict[str, int] = {}
        self.free_slots = list(range(max_num_reqs))
        self.num_computed_tokens = torch.zeros(max_num_reqs, dtype=torch.int32)
        self.draft_tokens = torch.zeros(max_num_reqs, num_spec, dtype=torch.int64)
        self.all_token_ids: list[list[int]] = [[] for _ in range(max_num_reqs)]

    def add_request(self, req_id: str, prompt_token_ids: list[int]) -> int:
        slot = self.free_slots.pop(0)
        self.req_id_to_slot[req_id] = slot
        self.num_computed_tokens[slot] = 0
        self.all_token_ids[slot] = list(prompt_token_ids)   # draft_tokens keeps whatever the slot held
        return slot

    def remove_request(self, req_id: str) -> int:
        slot = self.req_id_to_slot.pop(req_id)
        self.free_slots = sorted(self.free_slots + [slot])
        return slot


class DiffusionGemmaRequestStates:
    """The per-request canvas state (reference §1.3). R = max_num_seqs, ST = stability_threshold + 1."""

    def __init__(self, R: int, CL: int, H: int, stability_threshold: int):
        ST = stability_threshold + 1
        self.canvas = torch.zeros(R, CL, dtype=torch.int64)
        self.argmax_canvas = torch.zeros(R, CL, dtype=torch.int64)
        self.step = torch.zeros(R, dtype=torch.int32)
        self.is_encoder_phase = torch.zeros(R, dtype=torch.bool)
        # zeros as upstream; never read before ST rows are written (stable needs hist_len >= ST)
        self.accepted_canvas_history = torch.zeros((R, ST, CL), dtype=torch.int64)
        self.accepted_canvas_history_len = torch.zeros(R, dtype=torch.int32)
        self.confident = torch.zeros(R, dtype=torch.bool)
        self.self_conditioning_embeds = torch.zeros(R, CL, H, dtype=torch.float32)
        self.prompt_len = torch.zeros(R, dtype=torch.int32)


class DiffusionGemmaModelState:
    """Built on every rank. ``add_request`` / ``prepare_inputs`` / ``prepare_attn`` read the state;
    only the last rank's sampler writes it after ``add_request``."""

    num_new_sampled_tokens_per_step = 0

    def __init__(self, config: EngineConfig):
        R, CL = config.max_num_seqs, config.canvas_length
        self.vocab_size, self.canvas_length = config.vocab_size, CL
        self.self_conditioning = config.self_conditioning          # "hf" | "vllm"
        self.req_states = DiffusionGemmaRequestStates(R, CL, config.hidden_size, config.stability_threshold)
        self._causal_buf = torch.zeros(R, dtype=torch.bool)       # persistent, like vLLM's

    def init_canvas(self, slot: int, generator: torch.Generator) -> None:
        self.req_states.canvas[slot] = torch.randint(0, self.vocab_size, (self.canvas_length,), generator=generator)

    def add_request(self, slot: int, req_id: str, prompt_len: int, generator: torch.Generator) -> None:
        st = self.req_states
        st.is_encoder_phase[slot] = True
        self.init_canvas(slot, generator)
        st.step[slot] = 0
        st.accepted_canvas_history_len[slot] = 0
        st.self_conditioning_embeds[slot] = 0
        if not req_id.startswith("_warmup_"):
            st.prompt_len[slot] = prompt_len

    def remove_request(self, slot: int) -> None:
        """As upstream: phase off, history length 0, SC embeddings zeroed."""
        self.req_states.is_encoder_phase[slot] = False
        self.req_states.accepted_canvas_history_len[slot] = 0
        self.req_states.self_conditioning_embeds[slot] = 0

    def prepare_inputs(self, model, input_ids: torch.Tensor, slot: int, is_decode: bool) -> torch.Tensor:
        """First rank: embed [1, T] ids, then SC from the stored soft embeddings (see the module doc):
        ``hf``: decode requests this rank believes are denoising; ``vllm``: every decode request."""
        embeds = model.embed_input_ids(input_ids[None])
        sc = self.req_states.self_conditioning_embeds[slot]            # read for every decode request
        if is_decode and (self.self_conditioning == "vllm" or not bool(self.req_states.is_encoder_phase[slot])):
            embeds = model.apply_self_conditioning(embeds, sc[None])
        return embeds

    def prepare_attn(self, slots: list[int]) -> torch.Tensor:
        """Every rank: per-request causal flags from ``is_encoder_phase`` (True = causal, keeps KV)."""
        n = len(slots)
        self._causal_buf[:n] = self.req_states.is_encoder_phase[slots]
        return self._causal_buf[:n]


class DiffusionSampler:
    """Last rank only (reference §2). Per-request generators (vLLM's per-request ``seed``) make a request's
    tokens independent of the batch and equal to ``explainer.sampler.generate`` for the same seed."""

    def __init__(self, config: EngineConfig, model, model_state: DiffusionGemmaModelState, req_state: RequestState):
        self.config, self.model, self.model_state = config, model, model_state
        self.state, self.req_state = model_state.req_states, req_state
        R, CL = config.max_num_seqs, config.canvas_length
        self.ST = config.stability_threshold + 1
        self.generators: dict[int, torch.Generator] = {}
        self.cast_int64 = config.pp_mode != "generic"          # the naive port's fix for the PP assert
        self._sampled = torch.zeros(R, CL, dtype=torch.int32)     # vLLM's buffer is int32

    def add_request(self, slot: int, seed: int) -> None:
        self.generators[slot] = torch.Generator().manual_seed(seed)

    def remove_request(self, slot: int) -> None:
        self.generators.pop(slot, None)

    def _finish_prefills(self, slots: list[int]) -> None:
        for slot in slots:
            self.model_state.init_canvas(slot, self.generators[slot])
            self.req_state.draft_tokens[slot] = self.state.canvas[slot]
            self.state.is_encoder_phase[slot] = False

    def __call__(self, batch: "InputBatch", logits: dict[int, torch.Tensor]):
        """logits: batch index -> [1, CL, V] for decode requests. Returns (sampled, num_sampled,
        num_rejected, actions)."""
        n, st, cfg = len(batch.slots), self.state, self.config
        self._finish_prefills([s for s, done in zip(batch.slots, batch.finishes_prefill) if done])
        num_sampled = torch.zeros(n, dtype=torch.int32)
        num_rejected = torch.zeros(n, dtype=torch.int32)
        actions = {}
        N = cfg.max_denoising_steps
        for i, slot in enumerate(batch.slots):
            rid = batch.req_ids[i]
            if i not in logits:
                actions[rid] = "prefill done: canvas initialised" if batch.finishes_prefill[i] else "prefill chunk"
                continue
            g = self.generators[slot]
            if bool(st.is_encoder_phase[slot]):                     # commit step
                self._sampled[slot] = st.argmax_canvas[slot].to(torch.int32)
                num_sampled[i] = cfg.canvas_length
                if cfg.sampler_draw == "gumbel":    # vLLM draws the Gumbel noise for commit rows too
                    torch.rand(logits[i].shape, generator=g)
                self.model_state.init_canvas(slot, g)              # fresh canvas for the next block
                st.step[slot] = 0
                st.accepted_canvas_history_len[slot] = 0
                st.is_encoder_phase[slot] = False
                actions[rid] = f"commit: emitted {cfg.canvas_length} argmax tokens, new random canvas"
            else:                                                   # denoise step
                step = int(st.step[slot])
                res = denoise_step(logits[i], st.canvas[slot][None], cur_step=max(N - step, 1), num_steps=N,
                                   entropy_bound=cfg.entropy_bound, t_min=cfg.t_min, t_max=cfg.t_max, generator=g,
                                   draw=cfg.sampler_draw)
                st.step[slot] = step + 1
                st.canvas[slot] = res.canvas[0]
                hist_len = int(st.accepted_canvas_history_len[slot])
                st.accepted_canvas_history[slot, hist_len % self.ST] = res.argmax[0]
                st.accepted_canvas_history_len[slot] = hist_len + 1
                st.argmax_canvas[slot] = res.argmax[0]
                st.confident[slot] = bool(res.entropy.mean() < cfg.confidence_threshold)
                history = st.accepted_canvas_history[slot]
                stable = hist_len + 1 >= self.ST and bool((history == history[:1]).all())
                converged = (stable and bool(st.confident[slot])) or step + 1 >= N
                st.is_encoder_phase[slot] = converged
                if converged:
                    st.self_conditioning_embeds[slot] = 0
                    st.canvas[slot] = st.argmax_canvas[slot]
                else:
                    st.self_conditioning_embeds[slot] = self.model.soft_embedding(res.processed_logits)[0]
                num_rejected[i] = batch.query_lens[i]
                actions[rid] = (f"denoise step {step + 1}: T={res.temperature:.3f}, accepted "
                                f"{int(res.accepted.sum())}/{cfg.canvas_length}"
                                + (", converged -> commit next" if converged else ""))
            self.req_state.draft_tokens[slot] = st.canvas[slot]      # hand-off to the next step's inputs
        width = self.config.canvas_length if logits else 1              # [n, 1] on prefill-only batches
        sampled = self._sampled[batch.slots, :width].clone()
        if self.cast_int64:
            sampled = sampled.to(torch.int64)
        return sampled, num_sampled, num_rejected, actions


@dataclass
class InputBatch:
    req_ids: list[str]
    slots: list[int]
    query_lens: list[int]
    is_decode: list[bool]               # scheduled CL draft tokens (denoise or commit)
    finishes_prefill: list[bool]
    input_ids: list[torch.Tensor]       # [T_i] per request
    positions: list[torch.Tensor]       # [T_i] per request


class ModelRunner:
    def __init__(self, config: EngineConfig, group, trace: Trace):
        self.config, self.group, self.trace = config, group, trace
        self.rank, self.world_size = group.rank_in_group, group.world_size
        self.is_first_rank, self.is_last_rank = group.is_first_rank, group.is_last_rank
        start, end = get_pp_indices(config.num_hidden_layers, self.rank, self.world_size)
        self.model = ModelRegistry.resolve_model_cls(config.model)(start, end)      # load_model
        trace.meta.setdefault("layers", {})[str(self.rank)] = [start, end]
        if not self.is_first_rank:   # persistent receive buffer; a non-PP model has no such method
            self.intermediate_tensors = self.model.make_empty_intermediate_tensors(
                batch_size=1, dtype=torch.float32, device="cpu", num_tokens=config.max_num_batched_tokens)
        self.req_states = RequestState(config.max_num_seqs, config.canvas_length)
        self.model_state = DiffusionGemmaModelState(config)
        self.sampler = (DiffusionSampler(config, self.model, self.model_state, self.req_states)
                        if self.is_last_rank else None)
        self.pp = PPHandler(group, trace, num_spec=config.num_speculative_tokens, hidden_size=config.hidden_size,
                            mode=config.pp_mode)
        self.generator = torch.Generator().manual_seed(config.seed)   # this worker's "global" RNG
        self.kv_caches: dict[int, KVCache] = {}
        self.phase = "startup"
        self._batch: InputBatch | None = None
        self._hidden: dict[int, torch.Tensor] = {}
        trace.attach(self.rank, self.view)

    # ---- request lifecycle -------------------------------------------------------------------------
    def _update_states(self, so: SchedulerOutput) -> None:
        for req_id in so.finished_req_ids:
            if req_id in self.req_states.req_id_to_slot:
                slot = self.req_states.remove_request(req_id)
                self.model_state.remove_request(slot)
                self.kv_caches.pop(slot, None)
                if self.sampler:
                    self.sampler.remove_request(slot)
        for new in so.scheduled_new_reqs:
            slot = self.req_states.add_request(new.req_id, new.prompt_token_ids)
            # state-sync (#52015) seeds the initial canvas per request; otherwise this worker's RNG
            g = (torch.Generator().manual_seed(new.seed) if self.config.pp_mode == "state-sync"
                 else self.generator)
            self.model_state.add_request(slot, new.req_id, len(new.prompt_token_ids), g)
            self.kv_caches[slot] = self.model.new_kv_cache()
            if self.sampler:
                self.sampler.add_request(slot, new.seed)

    def _prepare_batch(self, so: SchedulerOutput) -> InputBatch:
        b = InputBatch([], [], [], [], [], [], [])
        for req_id, n in so.num_scheduled_tokens.items():
            slot = self.req_states.req_id_to_slot[req_id]
            start = int(self.req_states.num_computed_tokens[slot])
            is_decode = req_id in so.scheduled_spec_decode_tokens
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
    def execute_model(self, so: SchedulerOutput) -> None:
        self.trace.set_step(so.step, so.warmup)
        self.phase = "prepare"
        self._update_states(so)
        batch = self._batch = self._prepare_batch(so)
        if not batch.req_ids:
            return
        causal = self.model_state.prepare_attn(batch.slots).tolist()
        embeds = ([self.model_state.prepare_inputs(self.model, ids, s, d)
                   for ids, s, d in zip(batch.input_ids, batch.slots, batch.is_decode)]
                  if self.is_first_rank else None)
        reads = {rid: ["is_encoder_phase"] + (["draft_tokens", "self_conditioning_embeds"]
                                              if self.is_first_rank and d else [])
                 for rid, d in zip(batch.req_ids, batch.is_decode)}
        self.trace.record(self.rank, "prepare", self._describe(batch, causal), reads=reads)
        total = sum(batch.query_lens)
        if not self.is_first_rank:
            self.phase = "recv"
            received = self.pp.recv_intermediate_tensors(self.intermediate_tensors, total)
        self.phase = "forward"
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
            self.req_states.num_computed_tokens[slot] += n      # optimistic; post_update rolls back
        self.trace.record(self.rank, "forward", f"layers [{self.model.model.start_layer}, "
                          f"{self.model.model.end_layer}) over {total} tokens")
        if self.is_last_rank:
            self._hidden = {i: h for i, h in enumerate(outputs) if batch.is_decode[i]}
        else:
            self.phase = "send"
            self.pp.send_intermediate_tensors({k: torch.cat([o[k] for o in outputs], dim=1)
                                               for k in outputs[0].keys()})

    @torch.no_grad()
    def _sample(self, batch):
        """Last rank: logits -> the DiffusionSampler; the sample event (what each request emitted) is traced."""
        self.phase = "sample"
        logits = {i: self.model.compute_logits(h) for i, h in self._hidden.items()}
        sampled, num_sampled, num_rejected, actions = self.sampler(batch, logits)
        emitted = {rid: sampled[i, :int(num_sampled[i])].tolist()
                   for i, rid in enumerate(batch.req_ids) if int(num_sampled[i])}
        self.trace.record(self.rank, "sample", "; ".join(f"{r}: {a}" for r, a in actions.items()),
                          data={"emitted": emitted, "actions": actions,
                                "sampled_dtype": str(sampled.dtype).removeprefix("torch.")})
        return sampled, num_sampled, num_rejected

    def sample_tokens(self) -> ModelRunnerOutput:
        """Last rank: sample, broadcast the back-channel. Others: receive it. Every rank then runs
        post_update and returns the step's output as this rank knows it (identical on every rank)."""
        batch = self._batch
        if batch is None or not batch.req_ids:
            return ModelRunnerOutput([], [], [], {})
        if self.is_last_rank:
            sampled, num_sampled, num_rejected = self._sample(batch)
            if self.pp.enabled:
                self.phase = "broadcast"
                self.pp.broadcast(sampled, num_sampled, num_rejected, synced=self._synced_state(batch))
            self._post_update(batch, sampled, num_sampled, num_rejected)
        else:
            self.phase = "receive"
            got = self.pp.receive(len(batch.slots), like=self._synced_state(batch))
            sampled, (num_sampled, num_rejected) = got["sampled_token_ids"], got["num_sampled_num_rejected"]
            if self.config.pp_mode == "state-sync":
                self._apply_synced_state(batch, got)
            self._post_update(batch, sampled, num_sampled, num_rejected)
            self.trace.record(self.rank, "receive", f"back-channel <- rank {self.world_size - 1}: "
                              f"{', '.join(got)}; post_update")
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
        return _tensors_of(self.req_states, self.model_state.req_states)

    def _post_update(self, batch: InputBatch, sampled, num_sampled, num_rejected) -> None:
        """num_computed_tokens -= num_rejected (denoise rolls back; KV truncated); append sampled."""
        for i, slot in enumerate(batch.slots):
            n = int(self.req_states.num_computed_tokens[slot]) - int(num_rejected[i])
            self.req_states.num_computed_tokens[slot] = n
            self.req_states.all_token_ids[slot] += sampled[i, :int(num_sampled[i])].tolist()
            self.kv_caches[slot].truncate(n)

    # ---- trace views ---------------------------------------------------------------------------------
    def view(self) -> dict:
        st, rs = self.model_state.req_states, self.req_states
        return {rid: {"canvas": st.canvas[s].tolist(), "draft_tokens": rs.draft_tokens[s].tolist(),
                      "is_encoder_phase": bool(st.is_encoder_phase[s]),
                      "self_conditioning_embeds": round(float(st.self_conditioning_embeds[s].norm()), 5),
                      "step": int(st.step[s]), "num_computed_tokens": int(rs.num_computed_tokens[s])}
                for rid, s in rs.req_id_to_slot.items()}

    def _describe(self, batch: InputBatch, causal: list[bool]) -> str:
        parts = []
        for rid, n, d, c in zip(batch.req_ids, batch.query_lens, batch.is_decode, causal):
            kind = ("commit" if c else "denoise") if d else "prefill"
            parts.append(f"{rid}: {kind} {n} tokens, {'causal' if c else 'bidirectional'}")
        return "; ".join(parts)
