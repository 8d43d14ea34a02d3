"""Checker ``tensor-dict-gate``: the learner's ``use_cpu_custom_send_recv(device_communicator) -> bool`` is
the gate ``GroupCoordinator`` asks (``gate_fn``), inside real rank processes (vLLM PR #40150).

Two launches of two rank processes each (gloo on 127.0.0.1), each building vLLM's PP group and handing one
PP intermediate-tensor dict from rank 0 to rank 1, as the ``comm-*`` scenarios do:

* one node: both ranks share ``EXPLAINER_DIST_IDENT``, the communicator takes shared memory, and the gate
  must say True: the dict must go the custom (shared-memory) path;
* two simulated nodes: the SHM group names disagree, the communicator falls back to torch.distributed,
  and the gate must say False: the generic path must deliver the dict.

The communicator is the post-#40150 one, so a custom path after the fallback ends in its guard
(``NotImplementedError``); before #40150 the same call was the ``AttributeError`` of issue #37933.
"""

from __future__ import annotations

import linecache
import os

import torch
import torch.distributed as dist

from explainer.distributed.device_communicators.comm_config import CommConfig
from explainer.distributed.launch import free_port, launch
from explainer.distributed.parallel_state import GroupCoordinator
from explainer.scenario.comm import pp_dict
from explainer.workshop import learner
from explainer.workshop.progress import learner_phase
from explainer.workshop.report import Check, LearnerError, verdict


EXERCISE = "tensor-dict-gate"
IDENT_PREFIX = "workshop"       # SHM group names start with it + the check process's pid (swept by the sandbox)


def gate_rank(source: str, filename: str, function: str) -> dict:
    """One rank: the learner's module, vLLM's PP group asking its gate, then one tensor dict 0 -> 1."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"__name__": "learner_solution", "__file__": filename}
    exec(compile(source, filename, "exec"), ns)
    fn = ns[function]
    asked: list[dict] = []

    def gate(comm) -> bool:                               # what GroupCoordinator calls
        rec = {"backend": getattr(comm, "backend", None),
               "supports_tensor_dict": getattr(comm, "supports_tensor_dict", None)}
        try:
            value = fn(comm)
        except Exception as exc:                          # noqa: BLE001 - reported as the learner's exception
            rec["error"] = learner.describe(exc, filename)
            value = False
        rec.update(returned=repr(value)[:60], type=type(value).__name__)
        asked.append(rec)
        return bool(value)

    group = GroupCoordinator([[0, 1]], group_name="pp", config=CommConfig(gate="post-40150"), gate_fn=gate)
    info = {"rank": group.rank_in_group, "ident": os.environ.get("EXPLAINER_DIST_IDENT"),
            "backend": group.device_communicator.backend, "asked": asked,
            "custom": group.use_cpu_custom_send_recv, "error": None, "received_equal": None, "agree": True}
    try:
        mine = torch.tensor([int(group.use_cpu_custom_send_recv), int(any("error" in a for a in asked))])
        both = [torch.zeros_like(mine) for _ in range(2)]
        dist.all_gather(both, mine, group=group.cpu_group)
        info["agree"] = both[0][0].item() == both[1][0].item()
        if not info["agree"] or any(b[1].item() for b in both):
            return info                                   # no hand-off: it would only wait for the other path
        expected = pp_dict()
        if group.is_first_rank:
            group.send_tensor_dict(expected, 1)
        else:
            got = group.recv_tensor_dict(0)
            info["received_equal"] = got.keys() == expected.keys() and all(
                torch.equal(got[k], v) for k, v in expected.items())
    except Exception as exc:                              # noqa: BLE001 - the story is the error
        info["error"] = {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300]}
    finally:
        group.destroy()
    return info


def _launch(code, nodes: int) -> dict:
    idents = [f"{IDENT_PREFIX}{os.getpid()}n{free_port()}" for _ in range(nodes)]   # vLLM: the node's port
    node_of = [0, 0] if nodes == 1 else [0, 1]
    budget = learner.budget()
    env = [{"EXPLAINER_DIST_IDENT": idents[node_of[r]], "EXPLAINER_COMM_TIMEOUT": str(budget + 2)} for r in range(2)]
    results = launch(gate_rank, 2, args=(code.source, code.filename, code.function), env_per_rank=env,
                     timeout=budget + 8, grace=2.0, start_method="fork")
    ranks = []
    for res in results:
        info = dict(res.value) if res.ok else {"rank": res.rank, "asked": [], "backend": None, "custom": None,
                                               "error": res.error, "ended": res.ended_by_launcher}
        info.update(node=node_of[res.rank], exitcode=res.exitcode)
        ranks.append(info)
    return {"nodes": nodes, "ranks": ranks}


def _learner_problem(run: dict, label: str, code) -> None:
    for r in run["ranks"]:
        for a in r["asked"]:
            if "error" in a:
                raise LearnerError("exception", f"{code.function}(device_communicator) raised {a['error']} "
                                                f"in rank {r['rank']} of the {label} run")
    hung = [r for r in run["ranks"] if r.get("ended")]
    if hung:
        r = hung[0]
        raise learner.LearnerTimeout(f"rank {r['rank']} of the {label} run did not finish within its bound: "
                                     f"{code.function} hangs? ({r['error']['message']})")


def _outcome(run: dict) -> tuple[bool, str]:
    """(delivered, what happened) for one launch."""
    r0, r1 = run["ranks"]
    errors = [r for r in run["ranks"] if r.get("error")]
    if "agree" in r0 and not r0["agree"]:
        return False, (f"the ranks disagree: rank 0's gate said {r0['custom']}, rank 1's {r1['custom']}; both ends "
                       f"of a send must take the same path")
    if errors:
        e = next((r for r in errors if r["rank"] == 0), errors[0])
        return False, f"rank {e['rank']} {e['error']['type']}: {e['error']['message']}"
    return bool(r1.get("received_equal")), "delivered" if r1.get("received_equal") else "not delivered"


def _said(run: dict) -> str:
    vals = {a["returned"] for r in run["ranks"] for a in r["asked"]}
    return " / ".join(sorted(vals)) or "nothing"


def run(fn, code):
    with learner_phase("one-node run: rank processes ask your gate", seconds=learner.budget() + 12):
        one = _launch(code, 1)
    _learner_problem(one, "one-node", code)
    with learner_phase("two-node run: rank processes ask your gate", seconds=learner.budget() + 12):
        two = _launch(code, 2)
    _learner_problem(two, "two-node", code)
    checks = []
    ok2, what2 = _outcome(two)
    backend2 = two["ranks"][0].get("backend")
    if ok2:
        checks.append(Check("two nodes: delivers", True, f"backend {backend2}, your gate said {_said(two)}, the "
                                                         f"generic path delivered the dict"))
    else:
        checks.append(Check("two nodes: delivers", False, (
            f"your gate said {_said(two)} on a communicator that fell back to {backend2} "
            f"(supports_tensor_dict False): {what2}"
            + (" (before #40150 this was AttributeError: module 'torch.distributed' has no attribute "
               "'send_tensor_dict')" if "NotImplementedError" in what2 else ""))))
    ok1, what1 = _outcome(one)
    custom1 = all(r.get("custom") for r in one["ranks"])
    backend1 = one["ranks"][0].get("backend")
    if ok1 and custom1 and backend1 == "shm":
        checks.append(Check("one node: shared-memory fast path", True, f"backend shm, your gate said "
                                                                       f"{_said(one)}, the dict went through "
                                                                       f"shared memory"))
    elif ok1:
        checks.append(Check("one node: shared-memory fast path", False, (
            f"correct but slow: lost the shared-memory fast path on one node (your gate said {_said(one)} for a "
            f"communicator with backend {backend1} and supports_tensor_dict True; the dict went the generic "
            f"path: metadata, then one gloo send per tensor)")))
    else:
        checks.append(Check("one node: shared-memory fast path", False, f"your gate said {_said(one)}: {what1}"))
    types = {a["type"] for run_ in (one, two) for r in run_["ranks"] for a in r["asked"]}
    checks.append(Check("returns a bool", types <= {"bool"},
                        "yes" if types <= {"bool"} else f"returned {', '.join(sorted(types - {'bool'}))}; "
                                                          f"GroupCoordinator stores it as a bool flag"))
    return verdict(EXERCISE, checks, figures={"one node": what1 if not (ok1 and custom1) else "shm fast path",
                                              "two nodes": what2},
                   picture={"runs": [one, two]})
