"""One real process per rank (vLLM ``v1/executor/multiproc_executor.py``), or one per host on two
network-namespace hosts.

``ProcessesExecutor`` launches ``rank_program`` on every rank (``distributed.launch``; the ``GroupCoordinator``
of ``distributed.parallel_state``): the same ``ModelRunner``, warmup and step loop as in process. The
scheduler is replicated on every rank: its inputs (the requests, then each step's back-channel) are
identical everywhere, so every rank schedules the same steps without a scheduler process. A ``generate``
call is one launch: warmup, then the requests, then the processes exit. Each rank returns its own trace; the
driver merges them in the in-process backend's order. ``HostsExecutor`` runs the ranks on two hosts, one
torchrun per host (``distributed/hosts.py``).
"""

from __future__ import annotations

import dataclasses

from explainer.config import EngineConfig
from explainer.distributed import hosts
from explainer.distributed.launch import launch
from explainer.distributed.parallel_state import initialize_pp_group
from explainer.engine.core import schedule_parts
from explainer.engine.errors import RankError, RankFailure
from explainer.engine.scheduler import Request, RequestOutput
from explainer.errors import UsageError
from explainer.trace import Trace


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
        results = self._launch(rank_program, pp, (self.config, requests))
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
        if pp != 2:
            raise UsageError(f"pipeline_parallel_size={pp}: the hosts backend runs one rank on each of 2 hosts")
        run = hosts.HostsRun([], "")
        self.hosts_runs.append(run)
        return hosts.launch(fn, args=args, timeout=self.timeout, record=run)


def rank_program(config: EngineConfig, requests: list[Request]) -> dict:
    """Body of one rank process: this rank's runner over the real PP group, warmup, the step loop."""
    trace = Trace()
    executor_cls, scheduler_cls, loop = schedule_parts(config)
    group = initialize_pp_group(config.pipeline_parallel_size, gate=config.comm_gate)
    executor = executor_cls(config, trace, group=group)
    outputs: dict[str, RequestOutput] = {}
    try:
        if config.warmup:
            executor.warmup()
        scheduler = scheduler_cls(config)
        for req in requests:
            scheduler.add_request(req)
        outputs = loop(scheduler, executor)
    except RankFailure:
        pass                                      # recorded in the trace; the driver reports it
    return {"trace": trace.to_json(), "outputs": [dataclasses.asdict(o) for o in outputs.values()]}
