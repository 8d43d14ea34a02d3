"""``warmup_kernels`` (vLLM ``v1/worker/gpu/warmup.py``, PR #36280; read at ``009cf8a`` and in 0.32.0).

Fake ``_warmup_{i}_`` requests go through the executor's real ``execute_model`` / ``sample_tokens`` on
every rank, so the PP communication (intermediate tensors forward, the back-channel broadcast) really
runs and a PP bug surfaces here, before the first user request. As in vLLM:

* the prompt is ``list(range(decode_query_len + 1))``: ``canvas_length + 1`` tokens for DiffusionGemma
  (``decode_query_len`` = CL, no bonus token), so the prefill is never mistaken for a decode batch;
* one prefill step, then decode steps, then one step that finishes the requests.

vLLM's decode steps are a mix (``0.32.0 v1/worker/gpu/warmup.py:435-451 decode_steps.append(([0, 1], [False, False]))``).
With two or more requests and speculative steps there are five: every request with placeholder drafts
``[0] * num_speculative_steps``; requests 0 and 1, one with drafts and one as a one-token decode without;
both without; request 0 with; request 0 without. Its ``num_decode_steps`` (5 with speculative steps) is the
upper bound on those steps and sizes the KV blocks it reserves.

What the toy simplifies: its five decode steps all schedule CL tokens for every request, with placeholder
drafts ``[0] * CL``. vLLM warms ``min(max_num_seqs, max_num_batched_tokens // (CL + 1))`` requests
(further capped by free KV blocks), reserves KV blocks for them, passes a grammar bitmask on the prefill
step and may run an extra mixed prefill+decode step; the toy warms ``min(2, max_num_seqs)`` requests and
has no KV blocks or structured outputs. The toy's runner, unlike vLLM's, keeps its own
``num_computed_tokens`` instead of taking the warmup's (so denoise steps roll back here too).
"""

from __future__ import annotations

from explainer.worker.outputs import NewRequestData, SchedulerOutput

WARMUP_DECODE_STEPS = 5
WARMUP_NUM_REQS = 2


def warmup_prompt(config) -> list[int]:
    """``list(range(CL + 1))`` (vLLM's ``decode_query_len + 1``), folded into the toy's vocabulary; cut to
    ``max_num_batched_tokens`` when that is only one canvas (vLLM would warm no request at all then)."""
    n = min(config.canvas_length + 1, config.max_num_batched_tokens)
    return [i % config.vocab_size for i in range(n)]


def warmup_requests(config, num_reqs: int = WARMUP_NUM_REQS) -> tuple[list[str], list[int]]:
    """(the fake requests' ids, their prompt): as many as vLLM's budget cap lets in, at most ``num_reqs``."""
    prompt = warmup_prompt(config)
    fit = config.max_num_batched_tokens // max(len(prompt), config.canvas_length)     # vLLM's budget cap
    return [f"_warmup_{i}_" for i in range(max(1, min(num_reqs, config.max_num_seqs, fit)))], prompt


def warmup_kernels(executor, config, num_reqs: int = WARMUP_NUM_REQS) -> None:
    req_ids, prompt = warmup_requests(config, num_reqs)
    CL, step = config.canvas_length, 1
    executor.execute_model(SchedulerOutput(
        step, [NewRequestData(r, list(prompt), seed=i) for i, r in enumerate(req_ids)],
        {r: len(prompt) for r in req_ids}, warmup=True))
    for _ in range(WARMUP_DECODE_STEPS):
        step += 1
        executor.execute_model(SchedulerOutput(step, [], {r: CL for r in req_ids}, {r: [0] * CL for r in req_ids},
                                               warmup=True))
    executor.execute_model(SchedulerOutput(step + 1, finished_req_ids=req_ids, warmup=True))
