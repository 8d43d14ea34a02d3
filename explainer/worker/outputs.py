"""What crosses between the engine and the worker for one step: the scheduler's ``SchedulerOutput`` (vLLM
``v1/core/sched/output.py``), the sampler's ``SamplerOutput`` and the runner's ``ModelRunnerOutput`` (vLLM
``v1/outputs.py``). They live with the worker, which consumes and produces them; the engine above imports them.
How a rank lays a step out is ``input_batch``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any



@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list[int]
    seed: int
    max_tokens: int | None = None              # the request's cap: max_seq_len = prompt + max_tokens


@dataclass
class SchedulerOutput:
    step: int
    scheduled_new_reqs: list[NewRequestData] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)        # batch order
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)   # CL drafts
    finished_req_ids: list[str] = field(default_factory=list)
    warmup: bool = False


@dataclass
class SamplerOutput:
    """What the last rank's ``DiffusionSampler`` returned for one step (vLLM: ``SamplerOutput``)."""
    sampled_token_ids: Any                     # [num_reqs, CL] tensor (int32 as vLLM's buffer; int64 once cast)
    num_sampled: Any                           # [num_reqs] int32
    num_rejected: Any                          # [num_reqs] int32
    actions: dict[str, str]                    # per request, what the sampler did (commit, denoise step k, ...)

    def __iter__(self):
        return iter((self.sampled_token_ids, self.num_sampled, self.num_rejected, self.actions))


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    sampled_token_ids: list[list[int]]
    num_rejected: list[int]
    draft_token_ids: dict[str, list[int]]      # draft_tokens_handler: the canvas each request denoises next
