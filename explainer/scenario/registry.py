"""Named scenarios: every story a notebook tells, runnable by anyone.

``python -m explainer scenario NAME [--backend inprocess|processes|hosts] [--pp-schedule sync|async]
[--gate pre-40150|post-40150] [--json]``

``SCENARIOS`` names each story once, with its one-line summary and where it runs; ``story_function`` names the
function that tells it (in ``pp.py``, the PP stories; ``comm.py``, the communicator ones, which have no PP
schedule and ignore it; ``comm_shared.py``, the shared-ident story, toy or real vLLM).
Each takes ``backend`` (and, for the PP stories,
``pp_schedule`` and ``gate``) and returns a ``ScenarioResult``. This module stays light (no torch): the command
line lists the scenarios without loading a model, and ``story_function`` imports the stories when one runs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from explainer import vllm_env
from explainer.distributed.host_namespaces import check_available
from explainer.errors import UsageError
from explainer.scenario.result import ScenarioResult
from explainer.vocab import COMM_GATES, ENGINES, EXECUTOR_BACKENDS, PP_SCHEDULES


@dataclass(frozen=True)
class Story:
    module: str                 # "pp" | "comm" | "comm_shared": the module that tells it (story_function names it)
    summary: str                # one line (``python -m explainer scenario`` lists them)
    hosts: bool = False         # runs with one rank per host on ``--backend hosts``
    gated: bool = False         # a PP run whose real group takes ``--gate``
    hosts_only: bool = False    # runs on ``--backend hosts`` only
    engines: bool = False       # takes ``--engine toy|vllm`` (vllm: the real vLLM 0.32.0's ranks)


SCENARIOS = {
    "pp1": Story("pp", "PP=1 on the post-#45828 model: the reference output"),
    "pp2-pre-fix": Story("pp", "PP=2 on the pre-#45828 model: the int32 sampled ids trip the int64 assert in warmup",
                         hosts=True, gated=True),
    "pp2-pre-fix-int64": Story("pp", "PP=2 pre-#45828 with the ids cast to int64: rank 0 reads stale state, text "
                               "diverges", hosts=True, gated=True),
    "pp2-gated": Story("pp", "PP=2 on the post-#45828 model: rejected by the startup check before any rank exists",
                       hosts=True),
    "pp2-state-sync": Story("pp", "PP=2 with the sampler-owned state broadcast (open PR #52015): equal to PP=1",
                            hosts=True, gated=True),
    "comm-same-node": Story("comm", "2 PP ranks on one node: shared-memory backend, custom tensor-dict path, dict "
                            "arrives"),
    "comm-inter-node-pre-fix": Story("comm", "2 PP ranks on 2 simulated nodes, pre-#40150 gate: AttributeError on "
                                     "both ranks", hosts=True),
    "comm-inter-node-fixed": Story("comm", "2 PP ranks on 2 simulated nodes, post-#40150 gate: fallback, generic "
                                   "path delivers", hosts=True),
    "comm-shared-ident-two-hosts": Story("comm_shared", "2 PP ranks on 2 hosts sharing one ident (one init method): "
                                         "names agree, shared memory chosen, both ranks fail", hosts=True,
                                         hosts_only=True, engines=True),
}
SCENARIO_NAMES = tuple(SCENARIOS)
HOSTS_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if s.hosts)
ENGINE_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if s.engines)
GATED_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if s.gated)


def available() -> dict[str, str]:
    """Scenario name -> one-line description, in the order of ``SCENARIO_NAMES``."""
    return {name: s.summary for name, s in SCENARIOS.items()}


def story_function(name: str) -> Callable[..., ScenarioResult]:
    """The function that runs scenario ``name``, named in full so grep finds it (imported here: the stories load
    torch and the model)."""
    from explainer.scenario import comm, comm_shared, pp
    return {"pp1": pp.pp1, "pp2-pre-fix": pp.pp2_pre_fix, "pp2-pre-fix-int64": pp.pp2_pre_fix_int64,
            "pp2-gated": pp.pp2_gated, "pp2-state-sync": pp.pp2_state_sync, "comm-same-node": comm.comm_same_node,
            "comm-inter-node-pre-fix": comm.comm_inter_node_pre_fix,
            "comm-inter-node-fixed": comm.comm_inter_node_fixed,
            "comm-shared-ident-two-hosts": comm_shared.comm_shared_ident_two_hosts}[name]


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
    fn = story_function(name)
    kwargs = {} if gate is None else {"gate": gate}
    if engine is not None:
        kwargs["engine"] = engine
    if "pp_schedule" in inspect.signature(fn).parameters:
        kwargs["pp_schedule"] = pp_schedule
    return fn(backend, **kwargs)
