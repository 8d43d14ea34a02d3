"""``InputBatch``: the requests of one step as a rank lays them out (vLLM ``v1/worker/gpu/input_batch.py``), parallel
lists in batch order. vLLM keeps it apart from what flows between the engine and the worker (``outputs``): the batch
is the runner's own layout of a step, made from a ``SchedulerOutput`` and never sent anywhere."""

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
