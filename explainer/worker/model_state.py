"""``DiffusionGemmaModelState``: the MRV2 model-state hooks of DiffusionGemma (vLLM
``v1/worker/gpu/model_states/interface.py``, implemented in ``models/diffusion_gemma.py``).

Built on every rank. ``add_request`` / ``prepare_inputs`` / ``prepare_attn`` read the canvas state; only the
last rank's ``DiffusionSampler`` writes it after ``add_request``. Self-conditioning, two modes
(``EngineConfig.self_conditioning``):

* ``"hf"`` (default; keeps the engine at PP=1 token-identical to transformers): the SC MLP runs only on
  a request the rank believes is denoising (``is_encoder_phase`` False); a commit step's encoder pass
  gets plain embeddings, as HF's encoder pass does.
* ``"vllm"``: as vLLM's ``DiffusionGemmaModelState.prepare_inputs``: the SC MLP runs on every request
  that has logits this step (denoise *and* commit), on the stored soft embedding. Where that is zero
  (a canvas's first step, a commit step, a stale rank 0 that never receives it) the MLP adds zero and the
  result is ``post_norm(embeds)``: the weightless RMSNorm of the embeddings, not the embeddings.
"""

from __future__ import annotations

import torch

from explainer.config import EngineConfig
from explainer.worker.states import DiffusionGemmaRequestStates


class DiffusionGemmaModelState:
    """Built on every rank; ``req_states`` is vLLM's ``diffusion_states``. ``add_request`` / ``prepare_inputs`` /
    ``prepare_attn`` read the state; only the last rank's sampler writes it after ``add_request``."""

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
