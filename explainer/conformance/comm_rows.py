"""Conformance rows of the CPU communicator (vLLM PR #40150): the toy's ranks beside vLLM 0.32.0's own.

vLLM side: ``explainer.vllm_side.comm_pair`` (two real vLLM rank processes on this machine, gloo on 127.0.0.1,
``VLLM_DIST_IDENT`` one value or one per rank) and ``explainer.vllm_side.hosts_rank`` under each host's torchrun
(``--backend hosts``). Toy side: the scenarios ``comm-same-node``, ``comm-inter-node-fixed``,
``comm-inter-node-pre-fix`` and ``comm-shared-ident-two-hosts``. Compared per rank: the backend chosen, the two
flags, vLLM's log line, whether the dict arrived, and each rank's error.
"""

from __future__ import annotations

from explainer import vllm_env
from explainer.conformance.rows import Row, compare, failed, skipped
from explainer.distributed import hosts
from explainer.distributed.host_namespaces import unavailable_reason
from explainer.scenario import comm, comm_shared

SHM_BACKEND = "_CPUSHMDistributed"          # vLLM's shared-memory dist module; the toy calls its backend "shm"
COMPARED = ["backend", "supports_tensor_dict", "use_cpu_custom_send_recv", "log_lines", "delivered", "errors"]


def short_error(err: dict | None) -> str | None:
    """``Type: message``, without the toy's parenthesised detail (the segment it could not open)."""
    return None if not err else f"{err.get('type')}: {str(err.get('message')).split(' (segment')[0]}"


def toy_values(result) -> dict:
    per_rank = result.details["per_rank"]
    return {"backend": [SHM_BACKEND if p.get("backend") == "shm" else p.get("backend") for p in per_rank],
            "supports_tensor_dict": [bool((p.get("decision") or {}).get("supports_tensor_dict")) for p in per_rank],
            "use_cpu_custom_send_recv": [bool(p.get("use_cpu_custom_send_recv")) for p in per_rank],
            "log_lines": sorted({ln.removeprefix("INFO ") for p in per_rank for ln in p.get("log_lines", [])}),
            "delivered": result.outcome == "ok", "errors": [short_error(p.get("error")) for p in per_rank],
            "idents": [p.get("ident") for p in per_rank]}


def vllm_values(ranks: list[dict]) -> dict:
    choice = [r.get("choice") or {} for r in ranks]
    errors = [short_error(r.get("error")) for r in ranks]
    return {"backend": [c.get("dist_module") for c in choice],
            "supports_tensor_dict": [bool(c.get("supports_tensor_dict")) for c in choice],
            "use_cpu_custom_send_recv": [bool(c.get("use_cpu_custom_send_recv")) for c in choice],
            "log_lines": sorted({ln.removeprefix("INFO ") for r in ranks for ln in r.get("log_lines", [])}),
            "delivered": not any(errors) and ranks[-1].get("received_equal") is True, "errors": errors,
            "idents": [r.get("ident") for r in ranks]}


def vllm_pair(idents: str, case: str) -> list[dict]:
    return vllm_env.run_module("comm_pair", "--idents", idents, "--case", case, timeout=300)["ranks"]


def vllm_on_hosts(ident: str | None = None) -> list[dict]:
    """vLLM's ranks on the two hosts, each host's launcher picking its ident (or one ``ident`` for both)."""
    prog = hosts.NodeProgram(python=str(vllm_env.require()), rank_module="explainer.vllm_side.hosts_rank", ident=ident)
    results = hosts.launch(None, args=("post-40150",), timeout=240, node=prog)
    return [r.value if r.ok else {"rank": r.rank, "error": r.error} for r in results]


LOCAL = [  # (row name, toy scenario, vLLM idents, vLLM case, what ran)
    ("communicator: one node (one ident)", comm.comm_same_node, "same", "post-40150",
     "two real rank processes each side; vLLM: VLLM_DIST_IDENT one vllm_dist_<uuid> for both (as its multiproc "
     "executor gives)"),
    ("communicator: two nodes (two idents)", comm.comm_inter_node_fixed, "different", "post-40150",
     "two real rank processes each side, one ident per rank (each node's executor its own)"),
    ("communicator: the pre-#40150 gate on two idents", comm.comm_inter_node_pre_fix, "different", "pre-40150",
     "vLLM: the real GroupCoordinator with use_cpu_custom_send_recv set to the pre-#40150 expression and the "
     "communicator's tensor-dict methods without #40150's guard (composed: two one-line bodies); toy: its pre-40150 "
     "gate"),
]


def local_rows() -> list[Row]:
    out = []
    for name, story, idents, case, how in LOCAL:
        toy = toy_values(story("processes"))
        try:
            out.append(compare(name, toy, vllm_values(vllm_pair(idents, case)), COMPARED, how))
        except vllm_env.VllmRunError as exc:
            out.append(failed(name, toy, str(exc), how))
    return out


def hosts_rows() -> list[Row]:
    """The two rows on two network-namespace hosts: own idents, and one shared ident (skipped without hosts)."""
    why = unavailable_reason()
    if why:
        return [skipped(n, why) for n in ("communicator: two hosts (own idents)",
                                          "communicator: two hosts sharing one ident")]
    how = "torchrun on each of two network-namespace hosts (private /dev/shm each), gloo over their veth link"
    toy = toy_values(comm.comm_inter_node_fixed("hosts"))
    own = compare("communicator: two hosts (own idents)", toy, vllm_values(vllm_on_hosts()), COMPARED, how)
    shared = [comm_shared.comm_shared_ident_two_hosts("hosts", engine=e) for e in ("toy", "vllm")]
    vals = [{"names_agree": r.details["names_agree"], "outcome": r.outcome,
             "errors": [short_error(p["error"]) for p in r.details["per_rank"]],
             "shm_group_names": r.details["shm_group_names"]} for r in shared]
    row = compare("communicator: two hosts sharing one ident", vals[0], vals[1], ["names_agree", "outcome", "errors"],
                  how + "; both hosts given one ident (one shared init method): scenario comm-shared-ident-two-hosts "
                  "with --engine toy and --engine vllm")
    return [own, row]
