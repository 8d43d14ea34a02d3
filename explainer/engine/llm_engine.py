"""``LLMEngine`` (vLLM ``v1/engine/llm_engine.py``) and the startup check it runs first.

``from_engine_args(**kw)`` builds the ``EngineConfig`` (whose ``__post_init__`` is the startup check:
``config.py``), traces the verdict, builds the executor for ``distributed_executor_backend`` and, in process,
warms up. With ``processes`` or ``hosts`` nothing starts until ``generate``: each call launches the rank
processes, which warm up and then serve the requests.
"""

from __future__ import annotations

import time
from collections import deque

from explainer.config import EngineConfig
from explainer.engine.core import one_torch_thread, schedule_parts
from explainer.engine.errors import RankFailure, error_summary
from explainer.engine.inprocess_executor import InProcessExecutor
from explainer.engine.multiproc_executor import HostsExecutor, ProcessesExecutor
from explainer.engine.scheduler import Request, RequestOutput
from explainer.errors import UsageError
from explainer.model.interfaces import supports_pp
from explainer.model.registry import ModelRegistry
from explainer.trace import Trace
from explainer.validation import check_int, check_token_ids

EXECUTORS = {"inprocess": InProcessExecutor, "processes": ProcessesExecutor, "hosts": HostsExecutor}


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
        executor_cls, scheduler_cls, self._loop = schedule_parts(config)
        if config.distributed_executor_backend != "inprocess":
            executor_cls = EXECUTORS[config.distributed_executor_backend]   # processes | hosts
        self.executor = executor_cls(config, self.trace)
        if config.warmup and isinstance(self.executor, InProcessExecutor):
            try:
                with one_torch_thread():
                    self.executor.warmup()
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
        scheduler_output = self.scheduler.schedule()
        with one_torch_thread():
            if self.config.pp_schedule == "async":          # one tick: the step leaving the last stage
                scheduler_output, out = self.executor.tick(scheduler_output)
                if scheduler_output is None or out is None or not scheduler_output.num_scheduled_tokens:
                    return []
            else:
                out = self.executor.execute_model(scheduler_output)
        return self.scheduler.update_from_output(scheduler_output, out)

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
