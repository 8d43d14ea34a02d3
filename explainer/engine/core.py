"""The engine loop (vLLM ``v1/engine/core.py``: ``EngineCore.step``, and ``step_with_batch_queue`` for the
asynchronous PP schedule) and the parts each schedule uses.

``run_until_done``: schedule, execute, update, until every request finished; ``run_until_done_async``: one
(possibly empty) step per tick until every request finished and the pipeline drained. ``schedule_parts``
picks (executor, scheduler, loop) for ``EngineConfig.pp_schedule``.
"""

from __future__ import annotations

import contextlib

import torch

from explainer.config import EngineConfig
from explainer.engine.inprocess_executor import InProcessExecutor
from explainer.engine.pipeline_executor import AsyncPipelineExecutor
from explainer.engine.scheduler import AsyncScheduler, RequestOutput, Scheduler
from explainer.worker.outputs import SchedulerOutput


def run_until_done(scheduler: Scheduler, executor, on_finish=None) -> dict[str, RequestOutput]:
    """The engine loop: schedule, execute, update, until every request finished; then free the slots."""
    done: dict[str, RequestOutput] = {}
    while scheduler.has_unfinished_requests():
        scheduler_output = scheduler.schedule()
        for out in scheduler.update_from_output(scheduler_output, executor.execute_model(scheduler_output)):
            done[out.req_id] = out
            if on_finish:
                on_finish(out)
    if scheduler.finished_req_ids:                 # let every rank free the finished slots
        executor.execute_model(SchedulerOutput(scheduler.step, finished_req_ids=scheduler.finished_req_ids))
        scheduler.finished_req_ids = []
    return done


def run_until_done_async(scheduler: AsyncScheduler, executor: AsyncPipelineExecutor,
                         on_finish=None) -> dict[str, RequestOutput]:
    """The async engine loop: one (possibly empty) step per tick until every request finished and the
    pipeline drained; then one more step carries the finished ids to every rank."""
    done: dict[str, RequestOutput] = {}

    def take(step, out):
        if step is not None and out is not None and step.num_scheduled_tokens:
            for o in scheduler.update_from_output(step, out):
                done[o.req_id] = o
                if on_finish:
                    on_finish(o)

    while scheduler.has_unfinished_requests() or executor.busy():
        take(*executor.tick(scheduler.schedule()))
    if scheduler.finished_req_ids:
        take(*executor.tick(scheduler.schedule()))
        while executor.busy():
            take(*executor.tick(SchedulerOutput(scheduler.step)))
    return done


def schedule_parts(config: EngineConfig):
    """(in-process executor, scheduler, engine loop) for ``config.pp_schedule``."""
    if config.pp_schedule == "async":
        return AsyncPipelineExecutor, AsyncScheduler, run_until_done_async
    return InProcessExecutor, Scheduler, run_until_done


@contextlib.contextmanager
def one_torch_thread():
    """The toy's tensors are tiny: intra-op threads only add contention (10x+ slower on a busy 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
