"""``comm-shared-ident-two-hosts``: two hosts that share one init method, so one ident, and no ``/dev/shm``.

vLLM's CPU worker takes its ``VLLM_DIST_IDENT`` from its ``distributed_init_method``: the file name of a
``file://`` method, else the port (0.32.0 ``0.32.0 v1/worker/cpu_worker.py:147-151 init_method.split(":")[-1]``). When every node's
executor picks its own method (the multiproc executor on each node: 0.32.0 gives ``file://…/vllm_dist_<uuid>``;
the set-up of #37933), the idents differ and the SHM group names disagree across nodes, so #40150's gate falls
back. When one init method is shared by all nodes (Ray's executor: one ``tcp://`` address for every rank,
``0.32.0 v1/executor/ray_executor.py:354-356 get_distributed_init_method(``), every rank computes the same SHM group name:
the name agreement passes, the communicator picks shared memory, and each rank then opens its peer's segment in a ``/dev/shm`` that is not
there. (Issue #33628 met the same ``errno: 2`` on two nodes of the multiproc executor, before PR #34169 added the
name agreement at all.) #40150's gate reads
``supports_tensor_dict``, which is decided by that same name agreement, so it cannot catch this. Open vLLM PR
#46716 proposes the hostname in the SHM group name (this package's own default ident, ``hostname:MASTER_PORT``,
already has it; here both hosts are given the shared port, as vLLM's CPU worker would).

Run on ``--backend hosts`` (two network + mount namespaces, each with a private tmpfs on ``/dev/shm``), with
``engine="toy"`` (this package's ranks) or ``"vllm"`` (the real vLLM's ranks from ``.venv-vllm``).
With the shared-memory ops (vLLM's ``_C`` or ``_C_AVX512``; the toy by default on x86-64) the outcome is
``runtime-error`` on both: neither engine can cross hosts through shared memory. On vLLM's ``_C_AVX2`` build (an
AVX2-only CPU; the toy with ``shm_ops=False``) there are no shared-memory ops: both ranks fall back, the dict
arrives, and vLLM still logs that the ranks "do not share the same SHM group name", though the names agree. The
result names vLLM's kernel library (``details["kernels"]``) and what really failed per rank.
"""

from __future__ import annotations

from explainer import vllm_env
from explainer.distributed import hosts
from explainer.distributed.device_communicators.comm_config import env_timeout, validate_env
from explainer.distributed.launch import free_port
from explainer.errors import UsageError
from explainer.distributed.device_communicators.shm_conditions import judge_ranks
from explainer.scenario.comm import exchange_rank, shm_ops_env
from explainer.scenario.result import ScenarioResult
from explainer.scenario.stories import COMM_SHARED_IDENT_TWO_HOSTS, tells

NAME = COMM_SHARED_IDENT_TWO_HOSTS.name
WHY_GATE_MISSES = ("#40150's gate (use_cpu_custom_send_recv = is_cpu() and supports_tensor_dict) is read after the "
                   "communicator is built, and supports_tensor_dict only says whether the shared-memory backend was "
                   "chosen, which the name agreement decides; with one ident the names agree, so the shared-memory "
                   "backend is chosen and fails while it is built, before the gate is ever read")
PROPOSAL = "open vLLM PR #46716: put the hostname in the SHM group name, so ranks on different hosts disagree"


def launch_engine(engine: str, ident: str, comm_timeout: float, run: hosts.HostsRun, shm_ops: bool | None = None):
    """Both hosts' ranks, given one ident: this package's (``exchange_rank``, ``shm_ops`` as in ``comm.py``) or the
    real vLLM's."""
    if engine == "toy":
        return hosts.launch(exchange_rank, args=("post-40150",), timeout=4 * comm_timeout + 30,
                            comm_timeout=comm_timeout, record=run,
                            node=hosts.NodeProgram(ident=ident, env=shm_ops_env(shm_ops)))
    prog = hosts.NodeProgram(python=str(vllm_env.require()), rank_module="explainer.vllm_side.hosts_rank",
                             ident=ident, env={"VLLM_LOGGING_LEVEL": "INFO", "OMP_NUM_THREADS": "1",
                                               **vllm_env.same_code()})
    return hosts.launch(None, args=("post-40150",), timeout=240, comm_timeout=comm_timeout, record=run, node=prog)


def rank_view(res, facts: dict, engine: str, ident: str) -> dict:
    """One rank: its error (the launcher's view for the toy, vLLM's own report for vLLM), its SHM group name, what
    its host's /dev/shm held, the log lines of its communicator and (vLLM) the kernel library it loaded."""
    value = res.value if res.ok and isinstance(res.value, dict) else {}
    if engine == "vllm" and res.ok:
        error, phase = value.get("error"), value.get("error_phase")
        name = facts.get("shm_group_name")
    else:
        error = None if res.ok else res.error
        phase = res.phase
        name = f"{ident}-pp:0-[0-1]-cpushm"          # the toy's make_group_name (a failed rank reports nothing)
    decision = value.get("decision") or {}
    return {"rank": res.rank, "host": facts.get("hostname"), "ident": facts.get("ident"), "shm_group_name": name,
            "dev_shm": facts.get("dev_shm", []), "error": error, "phase": phase, "pid": res.pid,
            "log_lines": [ln.removeprefix("INFO ") for ln in value.get("log_lines", [])],
            "fallback_cause": decision.get("fallback_cause"), "really_failed": decision.get("really_failed"),
            "shm_ops_built": value.get("shm_ops_built"), "kernels": value.get("kernels"),
            "conditions": value.get("conditions")}


def judge_vllm(per_rank: list[dict]) -> None:
    """vLLM's ranks report their conditions, not their verdict: fill in what really failed (``judge_ranks``)."""
    if all(p.get("conditions") for p in per_rank):
        for p, j in zip(per_rank, judge_ranks([p["conditions"] for p in per_rank])):
            p.update(fallback_cause=j["fallback_cause"], really_failed=j["really_failed"],
                     shm_ops_built=p["conditions"]["shm_ops_built"])


@tells(COMM_SHARED_IDENT_TWO_HOSTS)
def comm_shared_ident_two_hosts(backend: str = "hosts", engine: str = "toy", shm_ops: bool | None = None
                                ) -> ScenarioResult:
    """``shm_ops`` configures the toy (None: this machine's build; False: like vLLM's ``_C_AVX2``); vLLM's own
    build is what its CPU loads (or ``EXPLAINER_VLLM_ISA``)."""
    if backend != "hosts":
        raise UsageError(f"scenario {NAME} runs on two hosts only: --backend hosts")
    if engine == "vllm" and shm_ops is not None:
        raise UsageError("shm_ops configures the toy; the real vLLM has the ops its kernel library has")
    validate_env()
    comm_timeout = env_timeout(default=10.0)
    ident = str(free_port())                         # one init method for the cluster: its port, on every host
    run = hosts.HostsRun([], "")
    results = launch_engine(engine, ident, comm_timeout, run, shm_ops)
    per_rank = [rank_view(r, run.facts.get(r.rank, {}), engine, ident) for r in results]
    if engine == "vllm":
        judge_vllm(per_rank)
    errors = [p["error"] for p in per_rank if p["error"]]
    names = [p["shm_group_name"] for p in per_rank]
    kernels = next((p["kernels"] for p in per_rank if p.get("kernels")), None)
    label = vllm_env.ENGINE_LABEL if engine == "vllm" else "toy"
    build = vllm_env.build_text(kernels) if engine == "vllm" else (
        "shared-memory ops " + ("as this machine's build" if shm_ops is None else "built" if shm_ops else
                                "not built (like vLLM's _C_AVX2)"))
    lines = [f"scenario {NAME} ({label}): 2 hosts, one ident {ident} (one shared init method), private /dev/shm each",
             f"  build: {build}", f"  SHM group names: {names} -> agree: {len(set(names)) == 1}"]
    for p in per_rank:
        what = f"{p['error']['type']}: {p['error']['message']}" if p["error"] else "no error, the dict went over gloo"
        lines.append(f"  rank {p['rank']} on {p['host']} (its /dev/shm: {', '.join(p['dev_shm'])}): {what}")
        lines += [f"    log: {ln}" for ln in p["log_lines"]]
        lines += [f"    what really failed: {p['really_failed']}"] if p["log_lines"] and p["really_failed"] else []
    lines += [f"  why #40150's gate does not catch it: {WHY_GATE_MISSES}", f"  {PROPOSAL}"]
    return ScenarioResult(
        scenario=NAME, pp_size=2, backend="hosts", outcome="runtime-error" if errors else "ok",
        error=errors[-1] if errors else None, processes_started=len(results),
        details={"engine": engine, "engine_label": label, "ident": ident, "shm_group_names": names,
                 "names_agree": len(set(names)) == 1, "per_rank": per_rank, "why_the_gate_misses": WHY_GATE_MISSES,
                 "proposal": PROPOSAL, "comm_timeout": comm_timeout, "hosts": hosts.describe(run),
                 "kernels": kernels, "shm_ops_built": [p.get("shm_ops_built") for p in per_rank]},
        summary="\n".join(lines))
