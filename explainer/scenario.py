"""Named scenarios: every story a notebook tells, runnable by anyone (DESIGN contract 3).

``python -m explainer scenario NAME [--backend inprocess|processes|hosts] [--pp-schedule sync|async]
[--gate pre-40150|post-40150] [--json]``

A scenario module registers functions with ``@scenario("name", summary=...)``; each takes
``backend`` (and, for the PP stories, ``pp_schedule``) and returns a ``ScenarioResult``. PP scenarios
live in ``pp_scenarios.py``, the communicator ones in ``comm_scenarios.py`` (no PP schedule: they
ignore it).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from explainer.errors import UsageError

OUTCOMES = ("ok", "startup-rejected", "warmup-crash", "runtime-error", "diverged")
BACKENDS = ("inprocess", "processes", "hosts")
GATES = ("pre-40150", "post-40150")          # the CPU communicator's tensor-dict gate (vLLM PR #40150)
# hosts = two network-namespace hosts (explainer/distributed/hosts.py): the scenarios with one rank per node
HOSTS_SCENARIOS = ("pp2-pre-fix", "pp2-pre-fix-int64", "pp2-gated", "pp2-state-sync",
                   "comm-inter-node-pre-fix", "comm-inter-node-fixed")
GATED_SCENARIOS = ("pp2-pre-fix", "pp2-pre-fix-int64", "pp2-state-sync")   # PP runs whose group takes --gate
PP_SCHEDULES = ("sync", "async")
SCENARIO_NAMES = (
    "pp1", "pp2-pre-fix", "pp2-pre-fix-int64", "pp2-gated", "pp2-state-sync",
    "comm-same-node", "comm-inter-node-pre-fix", "comm-inter-node-fixed",
)
_MODULES = ("explainer.pp_scenarios", "explainer.comm_scenarios")
_REGISTRY: dict[str, tuple[Callable[..., "ScenarioResult"], str]] = {}


@dataclass
class ScenarioResult:
    scenario: str
    pp_size: int
    backend: str
    outcome: str
    error: dict | None = None                 # {"type": ..., "message": ...}
    processes_started: int = 0
    output_text: str | None = None
    first_divergence: dict | None = None      # {"step", "rank", "fields", ...}
    bytes_per_step: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)   # scenario-specific extras
    summary: str = ""                         # readable per-rank summary (non-JSON output)
    trace: Any = dataclasses.field(default=None, repr=False, compare=False)  # explainer.trace.Trace

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")

    def to_json(self) -> dict:
        data = dataclasses.asdict(dataclasses.replace(self, trace=None))
        data.pop("trace")
        data.pop("summary")
        return data


def scenario(name: str, summary: str):
    """Register a scenario function ``fn(backend: str) -> ScenarioResult``."""
    def wrap(fn):
        _REGISTRY[name] = (fn, summary)
        return fn
    return wrap


def _load_all() -> None:
    for mod in _MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


def available() -> dict[str, str]:
    """Scenario name -> one-line description, in the order of ``SCENARIO_NAMES``."""
    _load_all()
    return {name: _REGISTRY[name][1] for name in SCENARIO_NAMES if name in _REGISTRY}


def run(name: str, backend: str = "inprocess", pp_schedule: str = "sync",
        gate: str | None = None) -> ScenarioResult:
    """Run the named scenario (``pp1``, ``pp2-gated``, ``comm-same-node``, ...) on ``backend``.

    ``pp_schedule`` (PP scenarios) picks the back-channel schedule; ``gate`` (PP scenarios on real groups) picks
    the communicator's tensor-dict gate."""
    _load_all()
    if name not in _REGISTRY:
        known = ", ".join(available()) or "(none registered)"
        raise UsageError(f"unknown scenario {name!r}; known scenarios: {known}")
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; accepted: {', '.join(BACKENDS)}")
    if pp_schedule not in PP_SCHEDULES:
        raise UsageError(f"unknown pp schedule {pp_schedule!r}; accepted: {', '.join(PP_SCHEDULES)}")
    if gate is not None and gate not in GATES:
        raise UsageError(f"unknown gate {gate!r}; accepted: {', '.join(GATES)}")
    if gate is not None and name not in GATED_SCENARIOS:
        raise UsageError(f"--gate applies to {', '.join(GATED_SCENARIOS)}; scenario {name!r} fixes its own gate")
    if gate is not None and backend == "inprocess":      # the in-process group has no CpuCommunicator
        raise UsageError("--gate needs real PP groups: --backend processes or hosts (inprocess has no communicator)")
    if backend == "hosts":
        if name not in HOSTS_SCENARIOS:
            raise UsageError(f"scenario {name!r} runs on one node; --backend hosts accepts {', '.join(HOSTS_SCENARIOS)}")
        from explainer.distributed.hosts import check_available
        check_available()                       # one line why not (not root, not Linux, no ip), exit 2
    fn = _REGISTRY[name][0]
    kwargs = {} if gate is None else {"gate": gate}
    if "pp_schedule" in inspect.signature(fn).parameters:
        kwargs["pp_schedule"] = pp_schedule
    return fn(backend, **kwargs)
