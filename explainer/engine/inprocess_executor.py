"""``InProcessExecutor``: every PP rank's ``ModelRunner`` in this process, in lockstep over
``distributed/inprocess.py`` (vLLM's ``v1/executor/uniproc_executor.py`` runs one worker in the engine process;
here one per rank).

The synchronous schedule (vLLM #33960): ``execute_model`` in rank order (sends before receives), then
``sample_tokens`` from the last rank down (broadcast before receive). A rank that raises is recorded in the
trace and the others carry on to their next blocking call, which reports what it was waiting for instead of
hanging. With ``group`` it drives the one rank of a real ``GroupCoordinator`` this process owns (the
multi-process backend's rank program).
"""

from __future__ import annotations

from explainer.config import EngineConfig
from explainer.distributed.inprocess import InProcessWorld
from explainer.engine.errors import RankFailure, error_summary
from explainer.trace import Trace
from explainer.trace.recorder import RankRecorder, RecordingGroup, WarmupRecorder, failure_phase
from explainer.worker.model_runner import ModelRunner
from explainer.worker.outputs import ModelRunnerOutput, SchedulerOutput
from explainer.worker.warmup import WARMUP_DECODE_STEPS, warmup_kernels, warmup_requests
from explainer.worker.worker import Worker


class InProcessExecutor:
    """Ranks in this process, each a ``Worker`` (with a ``runner_cls`` runner) over its PP group (all ranks of an
    in-process world, or, with ``group``, the one rank of a real ``GroupCoordinator`` this process owns)."""

    processes_started = 0
    runner_cls = ModelRunner

    def __init__(self, config: EngineConfig, trace: Trace, group=None):
        self.config, self.trace = config, trace
        self.world = InProcessWorld(config.pipeline_parallel_size) if group is None else None
        groups = self.world.groups() if group is None else [group]
        self.workers = [self._worker(g) for g in groups]
        self.ticks = 0                                          # the timeline's clock (sync schedule)

    def _worker(self, group):
        """A rank's ``Worker``; with a trace, behind its recorder, over its group recorded (``trace.recorder``)."""
        if not self.trace.enabled:
            return Worker(self.config, group, self.runner_cls)
        recorded = RecordingGroup(group)
        return RankRecorder(self.trace, Worker(self.config, recorded, self.runner_cls), recorded,
                            mode=self.config.pp_mode, async_schedule=self.config.pp_schedule == "async")

    def warmup(self) -> None:
        """``warmup_kernels`` through this executor, between its two engine-level events."""
        req_ids, prompt = warmup_requests(self.config)
        recorder = WarmupRecorder(self.trace)
        recorder.started(len(req_ids), len(prompt), WARMUP_DECODE_STEPS, self.config.canvas_length)
        warmup_kernels(self, self.config)
        recorder.done(req_ids)

    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        """One synchronous step (#33960): rank r forwards at tick base + r; the last rank samples and
        broadcasts, and the others receive, at tick base + pp - 1; the next step starts after that."""
        failed: list[tuple[int, str, BaseException]] = []
        pp, base = self.config.pipeline_parallel_size, self.ticks
        try:
            for w in self.workers:                                  # forward: rank order
                self.trace.set_tick(base + w.rank)
                self.run_call(w, "execute_model", lambda w=w: w.execute_model(scheduler_output), failed)
            output = None
            self.trace.set_tick(base + pp - 1)
            for w in reversed(self.workers):                        # back-channel: last rank first
                if any(r == w.rank for r, _, _ in failed):
                    continue
                result = self.run_call(w, "sample_tokens", w.sample_tokens, failed)
                output = output or result
        finally:
            self.ticks += pp
            self.trace.set_tick(None)
        if failed:
            raise RankFailure(failed, scheduler_output.warmup)
        return output

    def shutdown(self) -> None:
        """Nothing to stop in-process."""

    def run_call(self, worker: Worker, call: str, fn, failed: list):
        """``fn`` (the worker's ``call``); a failure is recorded in the phase of the call that was running."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every rank's failure is reported, none is lost
            phase = failure_phase(exc, call, worker.is_last_rank)
            err = error_summary(exc)
            self.trace.record(worker.rank, phase, f"{err['type']}: {err['message']}", data={"error": err})
            failed.append((worker.rank, phase, exc))
            return None
