"""``InputBatch``: the requests of one step as a rank lays them out (vLLM ``v1/worker/gpu/input_batch.py``),
parallel lists in batch order."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class InputBatch:
    req_ids: list[str]
    slots: list[int]
    query_lens: list[int]
    is_decode: list[bool]               # scheduled CL draft tokens (denoise or commit)
    finishes_prefill: list[bool]
    input_ids: list[torch.Tensor]       # [T_i] per request
    positions: list[torch.Tensor]       # [T_i] per request
