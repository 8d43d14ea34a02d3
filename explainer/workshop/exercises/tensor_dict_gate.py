"""Exercise ``tensor-dict-gate``: the learner's ``use_cpu_custom_send_recv(device_communicator) -> bool`` is
the gate ``GroupCoordinator`` asks (``gate_fn``), in real rank processes (vLLM PR #40150).

Two launches of two rank processes each (gloo on 127.0.0.1), each building vLLM's PP group and handing one
PP intermediate-tensor dict from rank 0 to rank 1, as the ``comm-*`` scenarios do:

* one node: both ranks share ``EXPLAINER_DIST_IDENT``, the communicator takes shared memory, and the gate
  must say True: the dict must go the custom (shared-memory) path;
* two simulated nodes: the SHM group names disagree, the communicator falls back to torch.distributed,
  and the gate must say False: the generic path must deliver the dict.

The learner's function never runs in a rank: it is a pure function of the communicator's facts, so the
check first asks it in the jail (``answer``, handing it a ``Communicator`` that carries those facts) for each
communicator the launches build, per rank (``facts_table``), and the ranks' gate looks the answer up by their
real communicator's facts (a rank whose facts are not in the table fails, so the table cannot drift from the
communicator).

The communicator is the post-#40150 one, so a custom path after the fallback ends in its guard
(``NotImplementedError``); before #40150 the same call was the ``AttributeError`` of issue #37933.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from explainer.distributed.device_communicators.comm_config import CommConfig
from explainer.distributed.launch import free_ports, launch
from explainer.distributed.parallel_state import GroupCoordinator
from explainer.scenario.comm import pp_dict
from explainer.workshop.catalog import About, Example
from explainer.workshop.learner import LearnerLimit, budget
from explainer.workshop.panel import text_html
from explainer.workshop.process_group import shm_ident
from explainer.workshop.progress import learner_phase
from explainer.workshop.report import Check, verdict

ABOUT = About(id="tensor-dict-gate", function="use_cpu_custom_send_recv",
              signature="use_cpu_custom_send_recv(device_communicator) -> bool",
              notebook="notebooks/workshop/exercises.ipynb", minutes=12, follows="03_cpu_communicator",
              section="the #40150 gate",
              summary="the GroupCoordinator's tensor-dict gate: its answers used by real rank processes on one node "
                      "and on two",
              checks=("two nodes: delivers", "one node: shared-memory fast path", "returns a bool"))
PRELOAD = ()
ANSWER_WORDS = ("supports_tensor_dict",)


def _answer(body: str) -> str:
    return f"def use_cpu_custom_send_recv(device_communicator):\n    {body}\n"


# name -> an answer and the words of the reason a wrong one must give
EXAMPLES = {
    "stub": Example(_answer("return True"), ("two nodes", "fell back to torch.distributed", "NotImplementedError")),
    "solution": Example(_answer('return bool(getattr(device_communicator, "supports_tensor_dict", False))')),
    "always_false": Example(_answer("return False"),
                            ("correct but slow: lost the shared-memory fast path on one node",)),
    "not_none": Example(_answer("return device_communicator is not None"),
                        ("two nodes", "your gate said True", "fell back")),
    "int_flag": Example(_answer('return 1 if device_communicator.backend == "shm" else 0'),
                        ("returns a bool", "returned int")),
}


FACT_NAMES = ("backend", "supports_tensor_dict", "rank", "rank_in_group", "world_size", "ranks", "unique_name", "gate")


def comm_facts(comm) -> dict:
    """What the gate may read of a real ``CpuCommunicator`` (the jail's stand-in carries the same facts)."""
    facts = {k: getattr(comm, k) for k in FACT_NAMES}
    facts["ranks"] = list(facts["ranks"])
    facts["dist_module"] = "torch.distributed" if comm.dist_module is dist else "shm"
    return facts


def facts_table() -> list[dict]:
    """The communicators the two launches build, per rank: one node (shared memory), two nodes (fallback).
    Each rank checks that its real communicator's facts are one of these rows (else: an internal error)."""
    return [{"backend": backend, "supports_tensor_dict": backend == "shm", "rank": r, "rank_in_group": r,
             "world_size": 2, "ranks": [0, 1], "unique_name": "pp:0", "gate": "post-40150",
             "dist_module": backend} for backend in ("shm", "torch.distributed") for r in (0, 1)]


class Communicator:
    """Inside the jail: what the ranks know about their ``CpuCommunicator`` (the gate's input), as facts."""

    def __init__(self, **facts):
        self.__dict__.update({k: v for k, v in facts.items() if k != "dist_module"})
        self._dist = facts.get("dist_module")

    @property
    def dist_module(self):
        return dist if self._dist == "torch.distributed" else SharedMemoryDistributed()

    @property
    def device(self):
        return torch.device("cpu")

    def __repr__(self) -> str:
        return f"<CpuCommunicator backend={self.backend!r} supports_tensor_dict={self.supports_tensor_dict}>"


class SharedMemoryDistributed:
    """Stands for the communicator's shared-memory module (it has the whole-dict methods)."""

    def send_tensor_dict(self, tensor_dict, dst):
        raise RuntimeError("the check asks the gate only; it sends nothing from here")

    recv_tensor_dict = send_tensor_dict


def reference() -> None:
    """Nothing to prepare: the verdict compares what real rank processes did with the rule itself."""


def answer(fn, args: dict) -> dict:
    """Inside the jail: the learner's gate on one communicator's facts; out, as data only: the value itself when
    it is plain (a bool, a number, text, None), what it means in an ``if`` (``truth``), its type's name and repr.
    Whether it is a bool is judged by the check from the value, never from what this process says."""
    facts = args.get("facts")
    value = fn(None if facts is None else Communicator(**facts))
    plain = value if type(value) in (bool, int, float, type(None)) else value[:60] if type(value) is str else None
    return {"value": plain, "truth": bool(value), "type": type(value).__name__, "repr": repr(value)[:60]}


def returned(value: dict) -> tuple[bool, str]:
    """(what the gate's answer means, its type) from the learner's process's data: a bool only when the value
    that crossed is one; the name it gives its type is shown only for a value that is not plain."""
    v, truth = value.get("value"), value.get("truth")
    if isinstance(v, bool):
        return v, "bool"
    if not isinstance(truth, bool):
        raise ValueError("no truth value")
    if v is not None:
        return truth, type(v).__name__
    said = str(value.get("type"))[:40]
    return truth, said if said not in ("bool", "") else "an object that is not a bool"


def ask_table(learner, code) -> list[dict]:
    """The learner's gate on every row of ``facts_table()``, in its jail: a pure function of the facts, so
    the rank processes can consult this table instead of running the learner's code."""
    table = []
    for facts in facts_table():
        what = (f"{code.function}(device_communicator) for a communicator with backend {facts['backend']}, "
                f"rank {facts['rank_in_group']}")
        with learner_phase(what):
            value = learner.call(ABOUT.id, {"facts": facts}, what)
        try:
            meaning, kind = returned(value)
        except ValueError:
            raise LearnerLimit(f"{what}: the learner's process answered with malformed data", "malformed answer") from None
        table.append({"facts": facts, "bool": meaning, "type": kind, "returned": str(value.get("repr"))[:60]})
    return table


def gate_rank(table: list[dict]) -> dict:
    """One rank: vLLM's PP group asking its gate (the learner's answers, looked up by the real communicator's
    facts), then one tensor dict 0 -> 1. No learner code runs in a rank."""
    asked: list[dict] = []

    def gate(comm) -> bool:                               # what GroupCoordinator calls
        facts = comm_facts(comm)
        row = next((r for r in table if r["facts"] == facts), None)
        if row is None:
            raise RuntimeError(f"the check asked the gate for no communicator like this one: {facts}")
        asked.append({"backend": facts["backend"], "returned": row["returned"], "type": row["type"]})
        return row["bool"]

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


def _launch(table: list[dict], nodes: int) -> dict:
    idents = [shm_ident(port) for port in free_ports(nodes)]       # one ident per node, all different
    node_of = [0, 0] if nodes == 1 else [0, 1]
    seconds = budget()
    env = [{"EXPLAINER_DIST_IDENT": idents[node_of[r]], "EXPLAINER_COMM_TIMEOUT": str(seconds + 2)} for r in range(2)]
    results = launch(gate_rank, 2, args=(table,), env_per_rank=env,
                     timeout=seconds + 8, grace=2.0, start_method="fork")
    ranks = []
    for res in results:
        info = dict(res.value) if res.ok else {"rank": res.rank, "asked": [], "backend": None, "custom": None,
                                               "error": res.error, "ended": res.ended_by_launcher}
        info.update(node=node_of[res.rank], exitcode=res.exitcode)
        ranks.append(info)
    return {"nodes": nodes, "ranks": ranks}


def _hung(run: dict, label: str, code) -> None:
    hung = [r for r in run["ranks"] if r.get("ended")]
    if hung:
        r = hung[0]
        raise LearnerLimit(f"rank {r['rank']} of the {label} run did not finish within its bound "
                           f"(your gate's answers: {_said(run)}; {r['error']['message']})", "time limit")


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


def grade(learner, code):
    """The verdict: the learner's answers asked in the jail, then used by real rank processes on one node and on two."""
    table = ask_table(learner, code)
    with learner_phase("one-node run: rank processes ask your gate's answers", seconds=budget() + 12):
        one = _launch(table, 1)
    _hung(one, "one-node", code)
    with learner_phase("two-node run: rank processes ask your gate's answers", seconds=budget() + 12):
        two = _launch(table, 2)
    _hung(two, "two-node", code)
    checks = []
    ok2, what2 = _outcome(two)
    backend2 = two["ranks"][0].get("backend")
    if ok2:
        checks.append(Check("two nodes: delivers", True, f"backend {backend2}, your gate said {_said(two)}, the "
                                                         f"generic path delivered the dict"))
    else:
        checks.append(Check("two nodes: delivers", False, (
            f"your gate said {_said(two)} on a communicator that fell back to {backend2}: {what2}"
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
            f"communicator with backend {backend1}, which can take the whole dict; it went the generic "
            f"path: metadata, then one gloo send per tensor)")))
    else:
        checks.append(Check("one node: shared-memory fast path", False, f"your gate said {_said(one)}: {what1}"))
    types = {a["type"] for run_ in (one, two) for r in run_["ranks"] for a in r["asked"]}
    checks.append(Check("returns a bool", types <= {"bool"},
                        "yes" if types <= {"bool"} else f"returned {', '.join(sorted(types - {'bool'}))}; "
                                                          f"GroupCoordinator stores it as a bool flag"))
    return verdict(ABOUT.id, checks, figures={"one node": what1 if not (ok1 and custom1) else "shm fast path",
                                              "two nodes": what2},
                   picture={"runs": [one, two]})



def picture(report) -> str:
    """The panel's picture of a failure: per run and rank, the node, the communicator's backend, what the gate
    said and the path taken (never the attribute the gate should read: the picture is a hint, not the answer)."""
    runs = report.picture.get("runs") or []
    rows = []
    for run in runs:
        label = "one node" if run["nodes"] == 1 else "two nodes"
        for r in run["ranks"]:
            said = ", ".join(a["returned"] for a in r.get("asked", [])) or "-"
            path = {True: "custom (shared memory)" if r.get("backend") == "shm" else "custom",
                    False: "generic (gloo)", None: "-"}[r.get("custom")]
            err = r.get("error")
            outcome = (f"✗ {err['type']}" if err else "✓ received intact" if r.get("received_equal") else
                       "✓ sent" if r.get("rank") == 0 and r.get("agree", True) else "✗ not delivered")
            rows.append(f"<tr><td>{label}</td><td>{r['rank']}</td><td>{text_html(outcome)}</td><td>{path}</td>"
                        f"<td>{text_html(said)}</td><td>{text_html(str(r.get('backend')))}</td>"
                        f"<td>{r['node']}</td></tr>")
    return ('<div class="xp-ws-note"><b>what each rank saw</b> (real rank processes; the same PP dict '
            'hidden_states + residual [2, 8, 64] fp32, rank 0 → rank 1)</div><div class="xp-ws-scroll">'
            '<table class="xp-ws-runs"><tr><th>run</th>'
            '<th>rank</th><th>outcome</th><th>path taken</th><th>your gate said</th><th>backend</th>'
            '<th>node</th></tr>' + "".join(rows) + "</table></div>")
