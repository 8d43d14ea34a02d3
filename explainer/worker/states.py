"""The per-request state a rank holds, slot-indexed (one copy per PP rank).

* ``RequestState``: MRV2's bookkeeping (``num_computed_tokens``, ``draft_tokens``, ``all_token_ids``);
* ``DiffusionGemmaRequestStates``: DiffusionGemma's canvas state (``canvas``, ``argmax_canvas``, ``step``,
  ``is_encoder_phase``, the accepted-canvas history, ``confident``, ``self_conditioning_embeds``,
  ``prompt_len``). vLLM keeps it in ``DiffusionGemmaModelState.diffusion_states`` (the toy's ``req_states``).
"""

from __future__ import annotations

import torch


def state_tensors(*states) -> dict[str, torch.Tensor]:
    """Every tensor attribute of the given state objects, by name (slot-indexed: [max_num_reqs, ...])."""
    return {k: v for st in states for k, v in vars(st).items() if isinstance(v, torch.Tensor)}


def request_state_fields() -> tuple[str, ...]:
    """The per-request state fields every rank holds (``RequestState`` + ``DiffusionGemmaRequestStates``
    tensors), sorted, read from the classes: equal to ``vocab.REQUEST_STATE_FIELDS`` (a test checks it)."""
    return tuple(sorted(state_tensors(RequestState(1, 1), DiffusionGemmaRequestStates(1, 1, 1, 0))))


class RequestState:
    """MRV2 ``RequestState``: slot-indexed bookkeeping (one copy per rank)."""

    def __init__(self, max_num_reqs: int, num_spec: int):
        self.req_id_to_slot: dict[str, int] = {}
        self.free_slots = list(range(max_num_reqs))
        self.num_computed_tokens = torch.zeros(max_num_reqs, dtype=torch.int32)
        self.draft_tokens = torch.zeros(max_num_reqs, num_spec, dtype=torch.int64)
        self.all_token_ids: list[list[int]] = [[] for _ in range(max_num_reqs)]
        self.max_seq_len: list[int | None] = [None] * max_num_reqs      # prompt + max_tokens (None: no cap given)

    def add_request(self, req_id: str, prompt_token_ids: list[int], max_tokens: int | None = None) -> int:
        slot = self.free_slots.pop(0)
        self.req_id_to_slot[req_id] = slot
        self.num_computed_tokens[slot] = 0
        self.max_seq_len[slot] = None if max_tokens is None else len(prompt_token_ids) + max_tokens
        self.all_token_ids[slot] = list(prompt_token_ids)   # draft_tokens keeps whatever the slot held
        return slot

    def remove_request(self, req_id: str) -> int:
        slot = self.req_id_to_slot.pop(req_id)
        self.free_slots = sorted(self.free_slots + [slot])
        return slot


class DiffusionGemmaRequestStates:
    """The per-request canvas state of vLLM's ``DiffusionGemmaRequestStates`` (``models/diffusion_gemma.py``), one
    copy per rank. R = max_num_seqs, ST = stability_threshold + 1."""

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
