"""Conformance rows of the CPU communicator (vLLM PR #40150): the toy's ranks beside the real vLLM's own.

vLLM side: ``explainer.vllm_side.comm_pair`` (two real vLLM rank processes on this machine, gloo on 127.0.0.1,
``VLLM_DIST_IDENT`` one value or one per rank) and ``explainer.vllm_side.hosts_rank`` under each host's torchrun
(``--backend hosts``). Toy side: the scenarios ``comm-same-node``, ``comm-inter-node-fixed``,
``comm-inter-node-pre-fix`` and ``comm-shared-ident-two-hosts``. Compared per rank: the backend chosen, the two
flags, vLLM's log line, the condition that really failed, whether the dict arrived, and each rank's error.

Every answer here depends on the build: vLLM runs first and names the kernel library it loaded
(``_C``/``_C_AVX512`` have the shared-memory ops, ``_C_AVX2`` has none), then the toy runs configured like that build
(``shm_ops``), so the rows agree on AVX-512 and AVX2-only machines alike and say which one this was.
"""

from __future__ import annotations

from explainer import vllm_env
from explainer.conformance.rows import Row, compare, failed, skipped
from explainer.distributed import hosts
from explainer.distributed.device_communicators.shm_conditions import judge_ranks
from explainer.distributed.host_namespaces import unavailable_reason
from explainer.scenario import comm, comm_shared

SHM_BACKEND = "_CPUSHMDistributed"          # vLLM's shared-memory dist module; the toy calls its backend "shm"
COMPARED = ["backend", "supports_tensor_dict", "use_cpu_custom_send_recv", "log_lines", "fallback_cause", "delivered",
            "errors"]
SHARED_COMPARED = ["names_agree", "outcome", "errors", "log_lines", "fallback_cause"]


def short_error(err: dict | None) -> str | None:
    """``Type: message``, without the toy's parenthesised detail (the segment it could not open)."""
    return None if not err else f"{err.get('type')}: {str(err.get('message')).split(' (segment')[0]}"


def toy_values(result) -> dict:
    per_rank = result.details["per_rank"]
    return {"backend": [SHM_BACKEND if p.get("backend") == "shm" else p.get("backend") for p in per_rank],
            "supports_tensor_dict": [bool((p.get("decision") or {}).get("supports_tensor_dict")) for p in per_rank],
            "use_cpu_custom_send_recv": [bool(p.get("use_cpu_custom_send_recv")) for p in per_rank],
            "log_lines": sorted({ln.removeprefix("INFO ") for p in per_rank for ln in p.get("log_lines", [])}),
            "fallback_cause": [(p.get("decision") or {}).get("fallback_cause") for p in per_rank],
            "really_failed": [(p.get("decision") or {}).get("really_failed") for p in per_rank],
            "delivered": result.outcome == "ok", "errors": [short_error(p.get("error")) for p in per_rank],
            "idents": [p.get("ident") for p in per_rank], "shm_ops_built": result.details.get("shm_ops_built")}


def build_of(ranks: list[dict]) -> dict | None:
    """The kernel library vLLM's ranks loaded (every rank the same one, or the row says they differ)."""
    seen = {(r.get("kernels") or {}).get("library") for r in ranks}
    first = next((r["kernels"] for r in ranks if r.get("kernels")), None)
    return None if first is None else {**first, "same_on_every_rank": len(seen) == 1}


def vllm_values(ranks: list[dict]) -> dict:
    choice = [r.get("choice") or {} for r in ranks]
    errors = [short_error(r.get("error")) for r in ranks]
    judged = judge_ranks([r["conditions"] for r in ranks]) if all(r.get("conditions") for r in ranks) else []
    return {"backend": [c.get("dist_module") for c in choice],
            "supports_tensor_dict": [bool(c.get("supports_tensor_dict")) for c in choice],
            "use_cpu_custom_send_recv": [bool(c.get("use_cpu_custom_send_recv")) for c in choice],
            "log_lines": sorted({ln.removeprefix("INFO ") for r in ranks for ln in r.get("log_lines", [])}),
            "fallback_cause": [j["fallback_cause"] for j in judged], "really_failed": [j["really_failed"] for j in judged],
            "delivered": not any(errors) and ranks[-1].get("received_equal") is True, "errors": errors,
            "idents": [r.get("ident") for r in ranks], "build": build_of(ranks)}


def build_note(build: dict | None, shm_ops: bool | None) -> str:
    return (f"; build: vLLM loaded {vllm_env.build_text(build)}; the toy ran configured like it "
            f"(shm ops built: {shm_ops})")


def vllm_pair(idents: str, case: str) -> list[dict]:
    return vllm_env.run_module("comm_pair", "--idents", idents, "--case", case, timeout=300)["ranks"]


def vllm_on_hosts(ident: str | None = None) -> list[dict]:
    """vLLM's ranks on the two hosts, each host's launcher picking its ident (or one ``ident`` for both)."""
    prog = hosts.NodeProgram(python=str(vllm_env.require()), rank_module="explainer.vllm_side.hosts_rank", ident=ident,
                             env=vllm_env.same_code())
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


def built_row(name: str, toy: dict, vllm: dict, keys: list[str], how: str) -> Row:
    """A row whose answer depends on the build: compared against the toy configured like it."""
    row = compare(name, toy, vllm, keys, how + build_note(vllm.get("build"), toy.get("shm_ops_built")))
    row.build = vllm.get("build")
    return row


def local_rows() -> list[Row]:
    out = []
    for name, story, idents, case, how in LOCAL:
        try:
            ranks = vllm_pair(idents, case)
        except vllm_env.VllmRunError as exc:
            out.append(failed(name, toy_values(story("processes")), str(exc), how))
            continue
        vllm = vllm_values(ranks)
        toy = toy_values(story("processes", shm_ops=(vllm["build"] or {}).get("has_shm_ops")))
        out.append(built_row(name, toy, vllm, COMPARED, how))
    return out


def shared_values(result) -> dict:
    per_rank = result.details["per_rank"]
    return {"names_agree": result.details["names_agree"], "outcome": result.outcome,
            "errors": [short_error(p["error"]) for p in per_rank], "shm_group_names": result.details["shm_group_names"],
            "log_lines": sorted({ln for p in per_rank for ln in p.get("log_lines", [])}),
            "fallback_cause": [p.get("fallback_cause") for p in per_rank],
            "really_failed": [p.get("really_failed") for p in per_rank],
            "build": result.details.get("kernels"), "shm_ops_built": result.details.get("shm_ops_built")}


def hosts_rows() -> list[Row]:
    """The two rows on two network-namespace hosts: own idents, and one shared ident (skipped without hosts)."""
    why = unavailable_reason()
    if why:
        return [skipped(n, why) for n in ("communicator: two hosts (own idents)",
                                          "communicator: two hosts sharing one ident")]
    how = "torchrun on each of two network-namespace hosts (private /dev/shm each), gloo over their veth link"
    vllm = vllm_values(vllm_on_hosts())
    shm_ops = (vllm["build"] or {}).get("has_shm_ops")
    own = built_row("communicator: two hosts (own idents)", toy_values(comm.comm_inter_node_fixed("hosts", shm_ops)),
                    vllm, COMPARED, how)
    real = shared_values(comm_shared.comm_shared_ident_two_hosts("hosts", engine="vllm"))
    shm_ops = (real["build"] or {}).get("has_shm_ops")
    toy = shared_values(comm_shared.comm_shared_ident_two_hosts("hosts", engine="toy", shm_ops=shm_ops))
    toy["shm_ops_built"] = shm_ops
    row = built_row("communicator: two hosts sharing one ident", toy, real, SHARED_COMPARED,
                    how + "; both hosts given one ident (one shared init method): scenario comm-shared-ident-two-hosts "
                    "with --engine vllm, then --engine toy")
    return [own, row]
