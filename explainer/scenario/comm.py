"""Communicator scenarios: vLLM PR #40150 on real rank processes (``stories.py`` names them).

Two PP ranks (real processes, gloo on 127.0.0.1, shared memory in /dev/shm) hand over one PP
intermediate-tensor dict, rank 0 -> rank 1. "Nodes" are simulated as vLLM's executors make them, one per node,
each with its own init method: here each node picks its own free port, which becomes its ``EXPLAINER_DIST_IDENT``
(vLLM's ``VLLM_DIST_IDENT``; in 0.32.0 a ``vllm_dist_<uuid>`` file name), so the SHM group names of ranks on
different nodes disagree.

* ``comm-same-node``           one node: SHM backend, custom path, the dict arrives.
* ``comm-inter-node-pre-fix``  two nodes, pre-#40150 gate: fallback to torch.distributed, but the
                               build-based gate still takes the custom path -> both ranks raise
                               ``AttributeError: module 'torch.distributed' has no attribute ...``.
* ``comm-inter-node-fixed``    two nodes, post-#40150 gate: fallback logged, generic path delivers.

Each takes ``shm_ops``: None runs the toy as this machine's build would be (``EXPLAINER_SHM_OPS``, else built on
x86-64); False runs it like vLLM's ``_C_AVX2`` build (an AVX2-only CPU), which has no shared-memory ops: then every
rank falls back, logs vLLM's line about the SHM group name, and ``really_failed`` says what failed instead.
"""

from __future__ import annotations

import os
import traceback

import torch

from explainer.distributed import hosts, phases
from explainer.distributed.device_communicators.comm_config import env_timeout, validate_env
from explainer.distributed.launch import free_ports, launch
from explainer.distributed.parallel_state import GroupCoordinator, destroy_model_parallel, initialize_pp_group
from explainer.errors import UsageError
from explainer.scenario.result import ScenarioResult
from explainer.scenario.stories import COMM_INTER_NODE_FIXED, COMM_INTER_NODE_PRE_FIX, COMM_SAME_NODE, tells

NOTE = ("a communicator is multi-process by nature: these scenarios always run real rank processes (gloo over "
        "127.0.0.1, shared memory in /dev/shm) and report backend 'processes', whichever backend is asked for")


HOSTS_NOTE = ("two real hosts: network + mount namespaces joined by a veth link, one torchrun per host, gloo "
              "over the hosts' private addresses; each host's own launcher picked its ident")


def hosts_details(run) -> dict:
    return hosts.describe(run)


def pp_dict():
    """The hand-off of a PP stage: hidden_states and residual [batch 2, tokens 8, hidden 64] fp32."""
    g = torch.Generator().manual_seed(0)
    return {"hidden_states": torch.randn(2, 8, 64, generator=g), "residual": torch.randn(2, 8, 64, generator=g)}


def _describe(d: dict) -> list[dict]:
    return [{"sender": 0, "receiver": 1, "name": k, "dtype": str(v.dtype).removeprefix("torch."),
             "shape": list(v.shape), "bytes": v.numel() * v.element_size()} for k, v in d.items()]


def exchange_rank(gate: str, group_prefix: str = "pp") -> dict:
    """One rank of a 2-rank group: build it (vLLM's PP group for "pp"), then send (rank 0) or receive (rank 1)."""
    if group_prefix == "pp":
        group = initialize_pp_group(gate=gate)
    else:                                               # tp/dp: same machinery under another group name
        group = GroupCoordinator([[0, 1]], group_name=group_prefix, gate=gate)
    comm = group.device_communicator
    info = {"rank": group.rank_in_group, "ident": os.environ.get("EXPLAINER_DIST_IDENT"), "gate": gate,
            "backend": comm.backend, "decision": comm.decision.to_json(), "log_lines": list(comm.decision.log_lines),
            "use_cpu_custom_send_recv": group.use_cpu_custom_send_recv, "gate_inputs": group.gate_inputs,
            "shm_ops_built": comm.config.shm_ops_built,
            "path": "custom (CpuCommunicator)" if group.use_cpu_custom_send_recv else "generic (metadata + gloo sends)",
            "error": None, "transfers": [], "received_equal": None}
    expected = pp_dict()
    try:
        if group.is_first_rank:
            group.send_tensor_dict(expected, 1)
            info["transfers"] = _describe(expected)
        else:
            got = group.recv_tensor_dict(0)
            info["received_equal"] = got.keys() == expected.keys() and all(
                torch.equal(got[k], v) and got[k].dtype == v.dtype for k, v in expected.items())
            info["transfers"] = _describe(got)
    except Exception as exc:                              # noqa: BLE001 - the story is the error
        info["error"] = {"type": type(exc).__name__, "message": str(exc)}
        info["traceback"] = "".join(traceback.format_exception(exc)[-3:])
        phases.report_failure(exc)                        # the launcher starts its grace for the peer now
    finally:
        if group_prefix == "pp":
            destroy_model_parallel()
        else:
            group.destroy()
    return info


def shm_ops_env(shm_ops: bool | None) -> dict[str, str]:
    """The rank processes' ``EXPLAINER_SHM_OPS`` for ``shm_ops`` (None: leave the machine's own answer)."""
    return {} if shm_ops is None else {"EXPLAINER_SHM_OPS": "1" if shm_ops else "0"}


def _run(name: str, backend: str, nodes: int, gate: str, shm_ops: bool | None = None) -> ScenarioResult:
    validate_env()                                        # bad EXPLAINER_* values: exit 2 before any process
    comm_timeout = env_timeout(default=20.0)              # the user's EXPLAINER_COMM_TIMEOUT wins
    node_of = [0, 0] if nodes == 1 else [0, 1]
    results, hosts_run, overridden = _launch_pair(name, backend, nodes, node_of, gate, comm_timeout, shm_ops)
    per_rank = _per_rank(results, node_of)
    errors = [i for i in per_rank if i.get("error")]
    delivered = not errors and per_rank[1].get("received_equal") is True
    error = None
    gone = [res.error for res in results if not res.ok]   # the launcher names a dead or stopped rank
    if gone:
        error = next((e for e in gone if e["type"] in ("ProcessDied", "PeerTimeoutError")), gone[0])
    elif errors:                                          # report PP1's error, as issue #37933 does
        error = next((i["error"] for i in errors if i["rank"] == 1), errors[0]["error"])
    sent = per_rank[0].get("transfers") or []
    return ScenarioResult(
        scenario=name, pp_size=2, backend="hosts" if hosts_run else "processes",
        outcome="ok" if delivered else "runtime-error",
        error=error, processes_started=len(results),
        bytes_per_step={t["name"]: t["bytes"] for t in sent} if delivered else {},
        details={"note": NOTE if not hosts_run else HOSTS_NOTE, "transport": backend if hosts_run else "processes",
                 "gate": gate, "simulated_nodes": 0 if hosts_run else nodes,
                 "shm_ops_built": [i.get("shm_ops_built") for i in per_rank],
                 **({"hosts": hosts_details(hosts_run)} if hosts_run else {}),
                 "comm_timeout": comm_timeout, "env_not_used": overridden,
                 "backend_per_rank": [i.get("backend") for i in per_rank],
                 "decision_path_per_rank": [i.get("decision", {}).get("path") for i in per_rank],
                 "log_lines": [f"rank {i['rank']}: {line}" for i in per_rank for line in i.get("log_lines", [])],
                 "processes_exited": all(i["exitcode"] is not None for i in per_rank),
                 "transfers": sent if delivered else [], "per_rank": per_rank},
        summary=_summary(name, gate, nodes, hosts_run, overridden, per_rank))


def _launch_pair(name: str, backend: str, nodes: int, node_of: list[int], gate: str, comm_timeout: float,
                 shm_ops: bool | None = None):
    """Two rank processes running ``exchange_rank``: on two hosts, or on ``nodes`` simulated nodes (each its own
    ident). Returns (the launcher's results, the hosts run or None, environment values not used)."""
    overridden = {}
    if backend == "hosts":                                # two real hosts: each host's launcher picks its ident
        if nodes == 1:
            raise UsageError(f"scenario {name} runs on one node; --backend hosts runs the inter-node scenarios")
        hosts_run = hosts.HostsRun([], "")
        results = hosts.launch(exchange_rank, args=(gate,), timeout=4 * comm_timeout + 30,
                               comm_timeout=comm_timeout, record=hosts_run,
                               node=hosts.NodeProgram(env=shm_ops_env(shm_ops)))
        return results, hosts_run, overridden
    ports = free_ports(nodes)                             # each node's executor picks its own port
    env = [{"EXPLAINER_DIST_IDENT": str(ports[node_of[r]]), "EXPLAINER_COMM_TIMEOUT": str(comm_timeout),
            **shm_ops_env(shm_ops)} for r in range(2)]
    if os.environ.get("EXPLAINER_DIST_IDENT"):            # the simulated nodes ARE the idents: say so
        overridden["EXPLAINER_DIST_IDENT"] = (f"{os.environ['EXPLAINER_DIST_IDENT']!r} not used: each simulated "
                                              f"node sets its own ({', '.join(str(p) for p in ports)})")
    results = launch(exchange_rank, 2, args=(gate,), env_per_rank=env, timeout=4 * comm_timeout + 30)
    return results, None, overridden


def _per_rank(results, node_of: list[int]) -> list[dict]:
    """Each rank's report, with the launcher's view added (node, pid, exit code, last phase, its error)."""
    per_rank = []
    for res in results:
        info = dict(res.value) if isinstance(res.value, dict) else {"rank": res.rank, "backend": None,
                                                                    "log_lines": [], "transfers": []}
        if not res.ok:                                    # the launcher's view names the failing peer
            info["error"] = res.error
        info.update(node=node_of[res.rank], pid=res.pid, exitcode=res.exitcode, phase=res.phase)
        per_rank.append(info)
    return per_rank


def _summary(name: str, gate: str, nodes: int, hosts_run, overridden: dict, per_rank: list[dict]) -> str:
    where = "2 hosts (network namespaces, torchrun)" if hosts_run else f"{nodes} simulated node(s)"
    summary = [f"scenario {name}: {where}, gate {gate}"]
    summary += [f"  note: {k}={v}" for k, v in overridden.items()]
    for i in per_rank:
        summary.append(f"  rank {i['rank']} (node {i['node']}, pid {i['pid']}): backend {i.get('backend')}, "
                       f"path {i.get('path')}")
        summary += [f"    log: {line}" for line in i.get("log_lines", [])]
        if i.get("log_lines") and (i.get("decision") or {}).get("really_failed"):
            summary.append(f"    what really failed: {i['decision']['really_failed']}")
        summary.append("    " + (f"{i['error']['type']}: {i['error']['message']}" if i.get("error") else
                                 ("received the dict intact" if i.get("received_equal") else "sent the dict")))
    return "\n".join(summary)


@tells(COMM_SAME_NODE)
def comm_same_node(backend: str = "processes", shm_ops: bool | None = None) -> ScenarioResult:
    return _run(COMM_SAME_NODE.name, backend, nodes=1, gate="post-40150", shm_ops=shm_ops)


@tells(COMM_INTER_NODE_PRE_FIX)
def comm_inter_node_pre_fix(backend: str = "processes", shm_ops: bool | None = None) -> ScenarioResult:
    return _run(COMM_INTER_NODE_PRE_FIX.name, backend, nodes=2, gate="pre-40150", shm_ops=shm_ops)


@tells(COMM_INTER_NODE_FIXED)
def comm_inter_node_fixed(backend: str = "processes", shm_ops: bool | None = None) -> ScenarioResult:
    return _run(COMM_INTER_NODE_FIXED.name, backend, nodes=2, gate="post-40150", shm_ops=shm_ops)
