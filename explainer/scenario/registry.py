"""Named scenarios: every story a notebook tells, runnable by anyone.

``python -m explainer scenario NAME [--backend inprocess|processes|hosts] [--pp-schedule sync|async]
[--gate pre-40150|post-40150] [--json]``

``SCENARIOS`` (``stories.py``) names each story once, with its summary, where it runs and the options it takes;
``story_function`` finds the function that tells it (``@tells`` in ``pp.py``, the PP stories; ``comm.py``, the
communicator ones; ``comm_shared.py``, the shared-ident story, toy or real vLLM). Each takes ``backend`` and the options its
story declares (``pp_schedule``, ``gate``, ``engine``) and returns a ``ScenarioResult``. This module stays light
(no torch): the command line lists the scenarios without loading a model, and ``story_function`` imports the
stories when one runs.
"""

from __future__ import annotations

from typing import Callable

from explainer import vllm_env
from explainer.distributed.host_namespaces import check_available
from explainer.errors import UsageError
from explainer.scenario.result import ScenarioResult
from explainer.scenario.stories import SCENARIOS, TOLD
from explainer.vocab import COMM_GATES, ENGINES, EXECUTOR_BACKENDS, PP_SCHEDULES


SCENARIO_NAMES = tuple(SCENARIOS)
HOSTS_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if s.hosts)
ENGINE_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if "engine" in s.options)
GATED_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if "gate" in s.options)


def available() -> dict[str, str]:
    """Scenario name -> one-line description, in the order of ``SCENARIO_NAMES``."""
    return {name: s.summary for name, s in SCENARIOS.items()}


def story_function(name: str) -> Callable[..., ScenarioResult]:
    """The function that tells scenario ``name`` (its ``@tells``; the stories load torch and the model, so they
    are imported here, when one runs)."""
    from explainer.scenario import comm, comm_shared, pp  # noqa: F401 - importing them runs their @tells
    return TOLD[SCENARIOS[name].name]


def run(name: str, backend: str = "inprocess", pp_schedule: str = "sync",
        gate: str | None = None, engine: str | None = None) -> ScenarioResult:
    """Run the named scenario (``pp1``, ``pp2-gated``, ``comm-same-node``, ...) on ``backend``.

    ``pp_schedule`` (PP scenarios) picks the back-channel schedule; ``gate`` (PP scenarios on real groups) picks
    the communicator's tensor-dict gate; ``engine`` (``toy`` default, or ``vllm``) who runs the ranks, for the
    scenarios that take it."""
    if name not in SCENARIOS:
        raise UsageError(f"unknown scenario {name!r}; known scenarios: {', '.join(available())}")
    if backend not in EXECUTOR_BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; accepted: {', '.join(EXECUTOR_BACKENDS)}")
    if pp_schedule not in PP_SCHEDULES:
        raise UsageError(f"unknown pp schedule {pp_schedule!r}; accepted: {', '.join(PP_SCHEDULES)}")
    if gate is not None and gate not in COMM_GATES:
        raise UsageError(f"unknown gate {gate!r}; accepted: {', '.join(COMM_GATES)}")
    if gate is not None and name not in GATED_SCENARIOS:
        raise UsageError(f"--gate applies to {', '.join(GATED_SCENARIOS)}; scenario {name!r} fixes its own gate")
    if gate is not None and backend == "inprocess":      # the in-process group has no CpuCommunicator
        raise UsageError("--gate needs real PP groups: --backend processes or hosts (inprocess has no communicator)")
    if engine is not None and engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; accepted: {', '.join(ENGINES)}")
    if engine is not None and name not in ENGINE_SCENARIOS:
        raise UsageError(f"--engine applies to {', '.join(ENGINE_SCENARIOS)}; scenario {name!r} runs the toy")
    if SCENARIOS[name].hosts_only and backend != "hosts":
        raise UsageError(f"scenario {name!r} runs on two hosts only: add --backend hosts")
    if engine == "vllm":
        vllm_env.require()                      # one line how to build .venv-vllm, exit 2
    if backend == "hosts":
        if name not in HOSTS_SCENARIOS:
            raise UsageError(f"scenario {name!r} runs on one node; --backend hosts accepts {', '.join(HOSTS_SCENARIOS)}")
        check_available()                       # one line why not (not root, not Linux, no ip), exit 2
    given = {"pp_schedule": pp_schedule, "gate": gate, "engine": engine}
    return story_function(name)(backend, **{k: v for k, v in given.items() if k in SCENARIOS[name].options
                                            and v is not None})
