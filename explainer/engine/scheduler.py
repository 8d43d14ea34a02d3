"""The scheduler (vLLM ``v1/core/sched/scheduler.py``) and its requests (vLLM ``v1/request.py``, ``vllm/outputs.py``).

A request's prompt tokens are scheduled once, then ``canvas_length`` draft tokens per step: vLLM runs
DiffusionGemma through the speculative-decoding data path, so the canvas travels as ``draft_tokens``. A
denoise step rejects all of them (``num_computed_tokens`` rolls back); a commit step emits ``canvas_length``
tokens. A request finishes on EOS (kept, the rest of the canvas dropped) or at ``max_tokens`` (truncated, as
vLLM). ``AsyncScheduler`` is the batch queue of the asynchronous PP schedule (#42187): a request with a step
in flight is not scheduled again until that step's output returns.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from explainer.config import EngineConfig
from explainer.worker.outputs import ModelRunnerOutput, NewRequestData, SchedulerOutput


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
        scheduler_output = SchedulerOutput(self.step, finished_req_ids=self.finished_req_ids)
        self.finished_req_ids = []
        budget = self.config.max_num_batched_tokens
        for req in self.running:
            if self._skip(req):
                continue
            n = self._num_new_tokens(req)
            if n <= budget:
                self._schedule(scheduler_output, req, n)
                budget -= n
        while self.waiting and len(self.running) < self.config.max_num_seqs \
                and len(self.waiting[0].prompt_token_ids) <= budget:
            req = self.waiting.popleft()
            self.running.append(req)
            scheduler_output.scheduled_new_reqs.append(NewRequestData(req.req_id, list(req.prompt_token_ids), req.seed,
                                                                               req.max_tokens))
            self._schedule(scheduler_output, req, len(req.prompt_token_ids))
            budget -= len(req.prompt_token_ids)
        return scheduler_output

    def _num_new_tokens(self, req: Request) -> int:
        remaining_prompt = len(req.prompt_token_ids) - req.num_computed_tokens
        return remaining_prompt if remaining_prompt > 0 else self.config.canvas_length

    def _schedule(self, scheduler_output: SchedulerOutput, req: Request, n: int) -> None:
        scheduler_output.num_scheduled_tokens[req.req_id] = n
        if req.num_computed_tokens >= len(req.prompt_token_ids):
            scheduler_output.scheduled_spec_decode_tokens[req.req_id] = list(req.spec_token_ids)
        req.num_steps += 1

    def update_from_output(self, scheduler_output: SchedulerOutput, out: ModelRunnerOutput) -> list[RequestOutput]:
        by_id = {r.req_id: r for r in self.running}
        finished = []
        eos = self.config.eos_token_id
        for i, req_id in enumerate(out.req_ids):
            req = by_id[req_id]
            req.num_computed_tokens += scheduler_output.num_scheduled_tokens[req_id] - out.num_rejected[i]
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


class AsyncScheduler(Scheduler):
    """A request with a step in flight is skipped until that step's output returns, so with ``pp_size`` steps in
    flight its next step comes ``pp_size`` steps later. vLLM's ``AsyncScheduler`` reaches that cadence another way:
    it schedules the request again, with output placeholders, exactly ``pp_size`` steps later
    (``0.32.0 v1/core/sched/async_scheduler.py:55-57 self.current_step + self.decode_stagger``)."""

    def __init__(self, config):
        super().__init__(config)
        self.in_flight: set[str] = set()

    def _skip(self, req) -> bool:
        return req.req_id in self.in_flight

    def schedule(self) -> SchedulerOutput:
        scheduler_output = super().schedule()        # Scheduler's budget loop, skipping requests in flight
        self.in_flight |= set(scheduler_output.num_scheduled_tokens)
        return scheduler_output

    def update_from_output(self, scheduler_output: SchedulerOutput, out: ModelRunnerOutput) -> list[RequestOutput]:
        self.in_flight -= set(scheduler_output.num_scheduled_tokens)
        return super().update_from_output(scheduler_output, out)
