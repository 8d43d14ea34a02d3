"""The asynchronous PP schedule's engine side (vLLM #42187): a batch queue and a tick-driven pipeline.

``pp_schedule="sync"`` (vLLM #33960, ``inprocess_executor.InProcessExecutor``): one step at a time; every rank
runs it, the last rank broadcasts, the others wait for that broadcast before the step ends. With
``pp_size`` stages each rank is busy one tick in ``pp_size``.

``pp_schedule="async"`` (this module): the engine issues one step per *tick*; step T enters stage 0 at
tick T, stage r at tick T + r, and is sampled by the last rank at tick T + pp - 1. So up to ``pp_size``
steps are in flight, one per stage. A request is not scheduled again while one of its steps is in
flight (the scheduler waits for its output, as vLLM's batch queue does), so its next step enters stage
0 exactly ``pp_size`` ticks later: the tick at which non-last ranks consume its back-channel entry.
A tick with nothing schedulable still issues an empty step (it only advances the ranks' FIFOs).

Every rank runs the same per-tick program, so the same code drives all ranks in this process or one
rank per process (``multiproc_executor.rank_program``):

    for each rank r (rank order): execute_model(step at stage r)   # top: consume the FIFO head
                                  non-last: sample_tokens()          # posts the receive, returns None
    last rank: sample_tokens() for the step at stage pp-1            # samples, broadcasts
    non-last ranks: deliver that step's receive                      # the side stream completes

Each event is stamped with its tick (``Trace.set_tick``): the pipeline timeline's time axis.
"""

from __future__ import annotations

from collections import deque

from explainer.engine.errors import RankFailure
from explainer.engine.inprocess_executor import InProcessExecutor
from explainer.worker.async_model_runner import AsyncModelRunner
from explainer.worker.outputs import ModelRunnerOutput, SchedulerOutput


class AsyncPipelineExecutor(InProcessExecutor):
    """Ranks of this process (all of an in-process world, or one rank over a real group) on the async
    schedule. ``tick(so)`` advances the pipeline by one tick; ``execute_model(so)`` runs one step alone
    through the pipeline (empty steps behind it), as warmup does."""

    runner_cls = AsyncModelRunner

    def __init__(self, config, trace, group=None):
        super().__init__(config, trace, group)
        self.pp = config.pipeline_parallel_size
        self.stages: deque[SchedulerOutput | None] = deque([None] * self.pp, maxlen=self.pp)
        self.ticks = 0

    def busy(self) -> bool:
        return any(step is not None and (step.num_scheduled_tokens or step.finished_req_ids) for step in self.stages)

    def tick(self, scheduler_output: SchedulerOutput) -> tuple[SchedulerOutput | None, ModelRunnerOutput | None]:
        """One tick. Returns (the step that left the last stage, its output as this process knows it)."""
        self.stages.appendleft(scheduler_output)
        failed: list = []
        down = set()
        self.trace.set_tick(self.ticks)
        try:
            for w in self.workers:                               # forward half, rank order
                step = self.stages[w.rank]
                if step is None:
                    continue
                self.run_call(w, "execute_model", lambda w=w, step=step: w.execute_model(step), failed)
                down |= {r for r, _, _ in failed}
                if not w.is_last_rank and w.rank not in down:
                    self.run_call(w, "sample_tokens", w.sample_tokens, failed)       # post the receive
                    down |= {r for r, _, _ in failed}
            done, out = self.stages[-1], None
            if done is not None:
                for w in reversed(self.workers):                 # last rank samples, the others take delivery
                    if w.rank in down:
                        continue
                    if w.is_last_rank:
                        result = self.run_call(w, "sample_tokens", w.sample_tokens, failed)
                    else:
                        result = self.run_call(w, "delivered_output", lambda w=w: w.delivered_output(done.step), failed)
                    down |= {r for r, _, _ in failed}
                    out = out or result
        finally:
            self.ticks += 1
            self.trace.set_tick(None)
        if failed:
            raise RankFailure(failed, any(s is not None and s.warmup for s in self.stages))
        return done, out

    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        """``so`` alone through every stage: this tick, then ``pp - 1`` empty steps behind it."""
        done, out = self.tick(scheduler_output)
        for _ in range(self.pp - 1):
            done, out = self.tick(SchedulerOutput(scheduler_output.step, warmup=scheduler_output.warmup))
        return out
