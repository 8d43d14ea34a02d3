"""The engine: a tiny vLLM-like scheduler and the executor that drives the per-rank runners.

The scheduler schedules a request's prompt tokens once, then ``canvas_length`` draft tokens per step
(the canvas travels as speculative "draft" tokens, reference §1.2). A denoise step rejects all of them
(``num_computed_tokens`` rolls back); a commit step emits ``canvas_length`` tokens. A request finishes
on EOS (kept, the rest of the canvas dropped) or at ``max_tokens`` (truncated, as vLLM).

Two backends run the same per-rank code (``ModelRunner.execute_model`` then ``sample_tokens``; only the
blocking group calls synchronise ranks):

* ``inprocess``: every rank in this process, in lockstep over ``distributed/inprocess.py``:
  ``execute_model`` in rank order (sends before receives), then ``sample_tokens`` from the last rank
  down (broadcast before receive). A rank that raises is recorded in the trace and the others carry on
  to their next blocking call, which reports what it was waiting for instead of hanging.
* ``processes``: one real process per rank over ``distributed/parallel_state.py`` (gloo, shared memory),
  with the scheduler replicated on every rank; the per-rank traces are merged in the same order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections import deque
from dataclasses import dataclass, field

import torch

from explainer.config import EngineConfig
from explainer.distributed.inprocess import InProcessWorld
from explainer.errors import UsageError
from explainer.model.interfaces import supports_pp
from explainer.model.registry import ModelRegistry
from explainer.worker.model_runner import ModelRunner, ModelRunnerOutput, NewRequestData, SchedulerOutput
from explainer.trace import EXECUTE_PHASES, SAMPLE_PHASES, Trace
from explainer.validation import check_int, check_token_ids
from explainer.worker.warmup import warmup_kernels


# ---- scheduler -----------------------------------------------------------------------------------------
@dataclass
class Request:
    req_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    seed: int
    num_computed_tokens: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    num_steps: int = 0


@dataclass
class RequestOutput:
    req_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    finish_reason: str | None
    num_steps: int

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class Scheduler:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished_req_ids: list[str] = []
        self.step = 0

    def add_request(self, req: Request) -> None:
        self.waiting.append(req)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def _skip(self, req: Request) -> bool:
        """A running request not to schedule this step (the async batch queue skips one in flight)."""
        return False

    def schedule(self) -> SchedulerOutput:
        self.step += 1
        so = SchedulerOutput(self.step, finished_req_ids=self.finished_req_ids)
        self.finished_req_ids = []
        budget = self.config.max_num_batched_tokens
        for req in self.running:
            if self._skip(req):
                continue
            n = self._num_new_tokens(req)
            if n <= budget:
                self._schedule(so, req, n)
                budget -= n
        while self.waiting and len(self.running) < self.config.max_num_seqs \
                and len(self.waiting[0].prompt_token_ids) <= budget:
            req = self.waiting.popleft()
            self.running.append(req)
            so.scheduled_new_reqs.append(NewRequestData(req.req_id, list(req.prompt_token_ids), req.seed))
            self._schedule(so, req, len(req.prompt_token_ids))
            budget -= len(req.prompt_token_ids)
        return so

    def _num_new_tokens(self, req: Request) -> int:
        remaining_prompt = len(req.prompt_token_ids) - req.num_computed_tokens
        return remaining_prompt if remaining_prompt > 0 else self.config.canvas_length

    def _schedule(self, so: SchedulerOutput, req: Request, n: int) -> None:
        so.num_scheduled_tokens[req.req_id] = n
        if req.num_computed_tokens >= len(req.prompt_token_ids):
            so.scheduled_spec_decode_tokens[req.req_id] = list(req.spec_token_ids)
        req.num_steps += 1

    def update_from_output(self, so: SchedulerOutput, out: ModelRunnerOutput) -> list[RequestOutput]:
        by_id = {r.req_id: r for r in self.running}
        finished = []
        eos = self.config.eos_token_id
        for i, req_id in enumerate(out.req_ids):
            req = by_id[req_id]
            req.num_computed_tokens += so.num_scheduled_tokens[req_id] - out.num_rejected[i]
            req.spec_token_ids = out.draft_token_ids.get(req_id, [])
            new = out.sampled_token_ids[i]
            if eos in new:
                new, req.finish_reason = new[: new.index(eos) + 1], "stop"
            req.output_token_ids += new
            if req.finish_reason is None and len(req.output_token_ids) >= req.max_tokens:
                del req.output_token_ids[req.max_tokens:]
                req.finish_reason = "length"
            if req.finish_reason:
                self.running.remove(req)
                self.finished_req_ids.append(req_id)
                finished.append(RequestOutput(req_id, req.prompt_token_ids, list(req.output_token_ids),
                                              req.finish_reason, req.num_steps))
        return finished


# ---- executors -----------------------------------------------------------------------------------------
class RankError(Exception):
    """A failure raised in a rank process, rebuilt in the driver from its type name and message."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


class RankFailure(RuntimeError):
    """One or more ranks raised during a step. ``cause`` is the root failure, not a rank that was only
    left waiting for it (a ``TimeoutError``: nothing pending, peer gone, timed out)."""

    processes_started = 0

    def __init__(self, failures: list[tuple[int, str, BaseException]], warmup: bool):
        self.failures, self.warmup = failures, warmup
        roots = [f for f in failures if not _starved(f[2])] or failures
        self.rank, self.phase, self.cause = roots[0]
        super().__init__("; ".join(f"rank {r} in {p}: {error_summary(e)['type']}: {error_summary(e)['message']}"
                                   for r, p, e in failures))


def _starved(exc: BaseException) -> bool:
    if getattr(exc, "culprit", False):                    # the launcher found this rank dead or stopped
        return False
    # a rank left waiting for another (the launcher names the peer that died or stopped: that one is the root)
    return isinstance(exc, TimeoutError) or getattr(exc, "type_name", None) in (
        "NothingPendingError", "PeerGoneError", "TimeoutError", "PeerTimeoutError")


def error_summary(exc: BaseException) -> dict:
    """``{type, message}``; a bare ``assert`` gets its source line as the message (what a traceback shows)."""
    message = str(exc)
    if not message and exc.__traceback__ is not None:
        message = (traceback.extract_tb(exc.__traceback__)[-1].line or "").strip()
    return {"type": getattr(exc, "type_name", type(exc).__name__), "message": message}


class InProcessExecutor:
    """Ranks in this process, each a ``ModelRunner`` over its PP group (all ranks of an in-process world,
    or, with ``group``, the one rank of a real ``GroupCoordinator`` this process owns)."""

    processes_started = 0
    runner_cls = ModelRunner

    def __init__(self, config: EngineConfig, trace: Trace, group=None):
        self.config, self.trace = config, trace
        self.world = InProcessWorld(config.pipeline_parallel_size) if group is None else None
        groups = self.world.groups() if group is None else [group]
        self.workers = [self.runner_cls(config, g, trace) for g in groups]
        self.ticks = 0                                          # the timeline's clock (sync schedule)

    def execute_model(self, so: SchedulerOutput) -> ModelRunnerOutput | None:
        """One synchronous step (#33960): rank r forwards at tick base + r; the last rank samples and
        broadcasts, and the others receive, at tick base + pp - 1; the next step starts after that."""
        failed: list[tuple[int, str, BaseException]] = []
        pp, base = self.config.pipeline_parallel_size, self.ticks
        try:
            for w in self.workers:                                  # forward: rank order
                self.trace.set_tick(base + w.rank)
                self._run(w, lambda w=w: w.execute_model(so), failed)
            output = None
            self.trace.set_tick(base + pp - 1)
            for w in reversed(self.workers):                        # back-channel: last rank first
                if any(r == w.rank for r, _, _ in failed):
                    continue
                result = self._run(w, w.sample_tokens, failed)
                output = output or result
        finally:
            self.ticks += pp
            self.trace.set_tick(None)
        if failed:
            raise RankFailure(failed, so.warmup)
        return output

    def shutdown(self) -> None:
        """Nothing to stop in-process."""

    def _run(self, worker: ModelRunner, fn, failed: list):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every rank's failure is reported, none is lost
            phase = worker.phase if worker.phase in EXECUTE_PHASES + SAMPLE_PHASES else "prepare"
            err = error_summary(exc)
            self.trace.record(worker.rank, phase, f"{err['type']}: {err['message']}", data={"error": err})
            failed.append((worker.rank, phase, exc))
            return None


class ProcessesExecutor:
    """One real process per rank (``distributed.launch``; the ``GroupCoordinator`` of
    ``distributed.parallel_state``), each running the same ``ModelRunner``, warmup and step loop.

    The scheduler is replicated on every rank: its inputs (the requests, then each step's back-channel)
    are identical everywhere, so every rank schedules the same steps without a scheduler process.
    A ``generate`` call is one launch: warmup, then the requests, then the processes exit. Each rank
    returns its own trace; the driver merges them in the in-process backend's order.
    """

    def __init__(self, config: EngineConfig, trace: Trace, timeout: float = 120.0):
        self.config, self.trace, self.timeout = config, trace, timeout
        self.processes_started = 0

    def run(self, requests: list[Request]) -> dict[str, RequestOutput]:
        pp = self.config.pipeline_parallel_size
        results = self._launch(_rank_program, pp, (self.config, requests))
        self.processes_started += pp
        parts = {r.rank: r.value for r in results if r.ok}
        self.trace.append_rank_traces([parts[r]["trace"] for r in sorted(parts)])
        failures = [(e.rank, e.phase, RankError(e.data["error"]["type"], e.data["error"]["message"]), e.warmup)
                    for e in self.trace.events if e.rank is not None and "error" in e.data and e.rank in parts]
        warmup = failures[0][3] if failures else False
        for r in results:
            if not r.ok:                                  # the launcher's view: a dead or stopped rank is the root
                err = RankError(r.error_type, r.error_message)
                err.culprit = r.culprit
                failures.insert(0 if r.culprit else len(failures), (r.rank, "process", err, warmup))
        if failures:
            exc = RankFailure([f[:3] for f in failures], warmup=warmup)
            exc.processes_started = self.processes_started
            raise exc
        return {o["req_id"]: RequestOutput(**o) for o in parts[pp - 1]["outputs"]}

    def _launch(self, fn, pp: int, args: tuple):
        from explainer.distributed.launch import launch
        return launch(fn, pp, args=args, timeout=self.timeout)

    def shutdown(self) -> None:
        """Rank processes end with each ``run`` (launch joins them, or ends them by pid)."""


class HostsExecutor(ProcessesExecutor):
    """``ProcessesExecutor`` whose ranks run on two network-namespace hosts, one torchrun per host
    (``distributed/hosts.py``); ``hosts_runs`` keeps what each launch did on the hosts."""

    def __init__(self, config: EngineConfig, trace: Trace, timeout: float = 120.0):
        super().__init__(config, trace, timeout)
        self.hosts_runs: list = []

    def _launch(self, fn, pp: int, args: tuple):
        from explainer.distributed import hosts
        if pp != 2:
            raise UsageError(f"pipeline_parallel_size={pp}: the hosts backend runs one rank on each of 2 hosts")
        run = hosts.HostsRun([], "")
        self.hosts_runs.append(run)
        return hosts.launch(fn, args=args, timeout=self.timeout, record=run)


def _rank_program(config: EngineConfig, requests: list[Request]) -> dict:
    """Body of one rank process: this rank's runner over the real PP group, warmup, the step loop."""
    from explainer.distributed.parallel_state import initialize_pp_group
    trace = Trace()
    executor_cls, scheduler_cls, loop = _schedule_parts(config)
    group = initialize_pp_group(config.pipeline_parallel_size, gate=config.comm_gate)
    executor = executor_cls(config, trace, group=group)
    outputs: dict[str, RequestOutput] = {}
    try:
        if config.warmup:
            warmup_kernels(executor, config)
        scheduler = scheduler_cls(config)
        for req in requests:
            scheduler.add_request(req)
        outputs = loop(scheduler, executor)
    except RankFailure:
        pass                                      # recorded in the trace; the driver reports it
    return {"trace": trace.to_json(), "outputs": [dataclasses.asdict(o) for o in outputs.values()]}


def run_until_done(scheduler: Scheduler, executor, on_finish=None) -> dict[str, RequestOutput]:
    """The engine loop: schedule, execute, update, until every request finished; then free the slots."""
    done: dict[str, RequestOutput] = {}
    while scheduler.has_unfinished_requests():
        so = scheduler.schedule()
        for out in scheduler.update_from_output(so, executor.execute_model(so)):
            done[out.req_id] = out
            if on_finish:
                on_finish(out)
    if scheduler.finished_req_ids:                 # let every rank free the finished slots
        executor.execute_model(SchedulerOutput(scheduler.step, finished_req_ids=scheduler.finished_req_ids))
        scheduler.finished_req_ids = []
    return done


EXECUTORS = {"inprocess": InProcessExecutor, "processes": ProcessesExecutor, "hosts": HostsExecutor}


def _schedule_parts(config: EngineConfig):
    """(in-process executor, scheduler, engine loop) for ``config.pp_schedule``."""
    if config.pp_schedule == "async":
        from explainer.engine.pipeline_executor import AsyncPipelineExecutor, AsyncScheduler, run_until_done_async
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


# ---- the engine ----------------------------------------------------------------------------------------
def startup_check(trace: Trace, **engine_args) -> EngineConfig:
    """Build the ``EngineConfig`` (the startup check lives in its ``__post_init__``) and trace the verdict."""
    trace.set_step(0)
    start = time.perf_counter()
    try:
        config = EngineConfig(**engine_args)
    except ValueError as exc:                  # UsageError, FlashInfer ValueError, the PP rejection
        ms = (time.perf_counter() - start) * 1e3
        trace.record(None, "startup-check", f"rejected in {ms:.2f} ms: {exc}",
                     data={"error": error_summary(exc), "ms": ms, "processes_started": 0})
        raise
    ms = (time.perf_counter() - start) * 1e3
    cls = ModelRegistry.resolve_model_cls(config.model)
    trace.record(None, "startup-check",
                 f"{config.model} ({cls.__name__}): supports_pp={supports_pp(cls)}, "
                 f"pipeline_parallel_size={config.pipeline_parallel_size} -> accepted in {ms:.2f} ms",
                 data={"ms": ms})
    return config


class LLMEngine:
    """``from_engine_args(**kw)`` runs the startup check, builds the executor and (in-process) warms up.
    With ``processes`` nothing starts until ``generate``: each call launches the rank processes, which
    warm up and then serve the requests."""

    def __init__(self, config: EngineConfig, trace: Trace | None = None):
        self.config = config
        self.trace = trace if trace is not None else Trace()
        self.trace.meta.update(model=config.model, pp_size=config.pipeline_parallel_size, pp_mode=config.pp_mode,
                               pp_schedule=config.pp_schedule,
                               backend=config.distributed_executor_backend, canvas_length=config.canvas_length)
        executor_cls, scheduler_cls, self._loop = _schedule_parts(config)
        if config.distributed_executor_backend != "inprocess":
            executor_cls = EXECUTORS[config.distributed_executor_backend]   # processes | hosts
        self.executor = executor_cls(config, self.trace)
        if config.warmup and isinstance(self.executor, InProcessExecutor):
            try:
                with one_torch_thread():
                    warmup_kernels(self.executor, config)
            except RankFailure as exc:
                exc.processes_started = self.executor.processes_started
                self.executor.shutdown()
                raise
        self.scheduler = scheduler_cls(config)
        self._num_requests = 0

    @classmethod
    def from_engine_args(cls, trace: Trace | None = None, **engine_args) -> "LLMEngine":
        trace = trace if trace is not None else Trace()
        return cls(startup_check(trace, **engine_args), trace)

    @property
    def processes_started(self) -> int:
        return self.executor.processes_started

    def add_request(self, prompt_token_ids: list[int], max_tokens: int, seed: int | None = None,
                    req_id: str | None = None) -> str:
        if not prompt_token_ids:
            raise UsageError("a prompt must hold at least one token")
        check_token_ids("prompt token ids", prompt_token_ids, self.config.vocab_size)
        if len(prompt_token_ids) > self.config.max_num_batched_tokens:
            raise UsageError(f"prompt of {len(prompt_token_ids)} tokens exceeds max_num_batched_tokens="
                             f"{self.config.max_num_batched_tokens}")
        check_int("max_tokens", max_tokens, 1)
        req_id = req_id or f"req-{self._num_requests}"
        seed = self.config.seed + self._num_requests if seed is None else seed
        self._num_requests += 1
        self.scheduler.add_request(Request(req_id, list(prompt_token_ids), max_tokens, seed))
        return req_id

    def step(self) -> list[RequestOutput]:
        if not isinstance(self.executor, InProcessExecutor):
            raise UsageError("step() drives ranks one step at a time: use the 'inprocess' backend "
                             "('processes' serves whole generate() calls)")
        so = self.scheduler.schedule()
        with one_torch_thread():
            if self.config.pp_schedule == "async":          # one tick: the step leaving the last stage
                so, out = self.executor.tick(so)
                if so is None or out is None or not so.num_scheduled_tokens:
                    return []
            else:
                out = self.executor.execute_model(so)
        return self.scheduler.update_from_output(so, out)

    def generate(self, prompts: list[list[int]], max_tokens: int, seeds: list[int] | None = None,
                 on_finish=None) -> list[RequestOutput]:
        ids = [self.add_request(p, max_tokens, None if seeds is None else seeds[i]) for i, p in enumerate(prompts)]
        if isinstance(self.executor, ProcessesExecutor):
            requests, self.scheduler.waiting = list(self.scheduler.waiting), deque()
            done = self.executor.run(requests)
            for out in done.values():
                if on_finish:
                    on_finish(out)
        else:
            with one_torch_thread():
                done = self._loop(self.scheduler, self.executor, on_finish)
        return [done[i] for i in ids]
