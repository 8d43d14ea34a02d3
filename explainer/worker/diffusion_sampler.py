"""``DiffusionSampler``: on the last PP rank, the one part that advances the canvas state (vLLM's class of the same
name in ``models/diffusion_gemma.py``). Every rank's ``add_request`` initialises that state.

A commit step emits the canvas's argmax (``canvas_length`` tokens) and draws a fresh canvas; a denoise step
runs ``sampler.denoise_step`` (temperature, candidate draw, entropy-bound acceptance, renoise) and the
stable-and-confident stopping rule, and rejects every scheduled token. The candidate draw
(``EngineConfig.sampler_draw``): ``"multinomial"`` (HF's, default) or ``"gumbel"``: Gumbel-max in the form of
vLLM's PyTorch reference (``rand_like`` over the logits; vLLM draws it in ``sample_row_stats``, see
``explainer.sampler.primitives``). The toy keeps one generator per request, seeded by the request's ``seed``.
That is the toy's choice: vLLM's DiffusionSampler ignores per-request seeds and draws from the global RNG for the
whole batch, so its tokens also depend on the batch. ``sampled`` is int32 as vLLM's ``_sampled`` buffer (the PP
back-channel's int64 assert trips on it); ``pp_mode`` other than ``generic`` casts it to int64.
"""

from __future__ import annotations

import torch

from explainer.config import EngineConfig
from explainer.sampler import denoise_step
from explainer.worker.input_batch import InputBatch
from explainer.worker.model_state import DiffusionGemmaModelState
from explainer.worker.states import RequestState


class DiffusionSampler:
    """Last rank only: vLLM's model runner builds it in ``load_model`` on the last PP rank, through the model
    state's ``custom_sampler``. The toy's per-request generators make a request's tokens independent of the batch
    and equal to ``explainer.sampler.generate`` for the same seed."""

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

    def __call__(self, batch: InputBatch, logits: dict[int, torch.Tensor]):
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
