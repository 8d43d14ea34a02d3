"""``warmup_kernels`` (vLLM ``v1/worker/gpu/warmup.py``, PR #36280).

Fake ``_warmup_{i}_`` requests go through the executor's real ``execute_model`` / ``sample_tokens`` on
every rank: one prefill step, then a few decode steps with placeholder drafts ``[0] * CL``, then they are
finished. So the PP communication (intermediate tensors forward, the back-channel broadcast) really runs,
and a PP bug surfaces here, before the first user request.
"""

from __future__ import annotations

from explainer.runner import NewRequestData, SchedulerOutput

WARMUP_PROMPT_LEN = 4
WARMUP_DECODE_STEPS = 3


def warmup_kernels(executor, config, num_reqs: int = 2) -> None:
    trace, CL = executor.trace, config.canvas_length
    req_ids = [f"_warmup_{i}_" for i in range(min(num_reqs, config.max_num_seqs))]
    trace.set_step(0, warmup=True)
    trace.record(None, "warmup", f"warmup_kernels: {len(req_ids)} fake requests, 1 prefill step, "
                 f"{WARMUP_DECODE_STEPS} decode steps with placeholder drafts [0]*{CL}")
    step = 1
    executor.execute_model(SchedulerOutput(
        step, [NewRequestData(r, [0] * WARMUP_PROMPT_LEN, seed=i) for i, r in enumerate(req_ids)],
        {r: WARMUP_PROMPT_LEN for r in req_ids}, warmup=True))
    for _ in range(WARMUP_DECODE_STEPS):
        step += 1
        executor.execute_model(SchedulerOutput(step, [], {r: CL for r in req_ids}, {r: [0] * CL for r in req_ids},
                                               warmup=True))
    executor.execute_model(SchedulerOutput(step + 1, finished_req_ids=req_ids, warmup=True))
    trace.record(None, "warmup", f"warmup done: {', '.join(req_ids)} finished and removed")
