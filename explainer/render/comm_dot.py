"""CPU communicator runs -> DOT sources: vLLM's backend choice (``CpuCommunicator.__init__``) and the tensor-dict
routing (``GroupCoordinator.send/recv_tensor_dict``), with the path each rank took highlighted.

DOT conventions: every node and edge has ``class="taken"`` or ``class="not-taken"`` (kept in the SVG, and what
tests assert); taken nodes are filled and bold, taken edges thick and coloured, the rest grey and dashed. Node
ids (``id=``) name the vLLM step they stand for. Run-specific values that change every run (the per-node ident,
i.e. a free port, and pids) are masked by ``masked()`` so outputs stay comparable: node k's ident is shown as
``PORT@nodek``.
"""

from __future__ import annotations

import textwrap
from typing import Any, Mapping, Sequence

from explainer.distributed.device_communicators.cpu_communicator import FALLBACK_LOG, NO_DICT_FASTPATH
from explainer.render.dot import quote

__all__ = ["masked", "selection_dot", "run_selection_dot", "tensor_dict_dot"]

# Okabe-Ito based: blue = taken; light bluish green / vermillion / orange fills; every state also has a word or
# a badge (✓ held, ✗ failed, ▶ taken), so nothing depends on telling the fills apart
TAKEN, OFF = "#0072B2", "#9e9e9e"
GOOD, BAD, WARN = "#d3efe5", "#fbe3d2", "#fdf0d0"


def masked(per_rank: Sequence[Mapping]) -> list[dict]:
    """Copy of the per-rank records with each node's ident shown as ``PORT@node<k>`` and pids dropped."""
    subs = {}
    for info in per_rank:
        if info.get("ident"):
            subs[str(info["ident"])] = f"PORT@node{info.get('node', 0)}"
    order = sorted(subs, key=len, reverse=True)

    def fix(x: Any) -> Any:
        if isinstance(x, str):
            for raw in order:
                x = x.replace(raw, subs[raw])
            return x
        if isinstance(x, list):
            return [fix(i) for i in x]
        if isinstance(x, dict):
            return {k: fix(v) for k, v in x.items() if k not in ("pid", "traceback")}
        return x
    return [fix(dict(i)) for i in per_rank]


def _node(nid: str, label: str, taken: bool, fill: str = GOOD, shape: str = "box") -> str:
    if taken:
        style = f'style="filled,bold", fillcolor="{fill}", color="{TAKEN}", penwidth=2.5, fontcolor="#111111"'
    else:
        style = f'style="dashed", color="{OFF}", fontcolor="#757575"'
    return f'  {nid} [id={quote(nid)}, class="{"taken" if taken else "not-taken"}", shape={shape}, {style}, label={quote(label)}];'


def _edge(a: str, b: str, label: str, taken: bool) -> str:
    cls = "taken" if taken else "not-taken"
    label = {"yes": "✓ yes", "no": "✗ no", "True": "✓ True", "False": "✗ False"}.get(label, label)
    if taken and label:
        label = "▶ " + label
    style = (f'color="{TAKEN}", penwidth=3, fontcolor="{TAKEN}"' if taken
             else f'color="{OFF}", style=dashed, fontcolor="{OFF}"')
    return f'  {a} -> {b} [id={quote(f"{a}->{b}")}, class="{cls}", label={quote(label)}, {style}];'


def _legend(lines: Sequence[str], beside: str) -> str:
    """The key, on the top row beside node ``beside`` (one box there): the picture gets no extra row for it."""
    return ('  legend [id="legend", shape=note, style=filled, fillcolor="#fffde7", color="#bdbdbd", fontsize=10, '
            f"label={quote(chr(10).join(lines))}];\n  {{ rank=same; {beside}; legend; }}")


def _decision(decision: Any) -> dict:
    return decision.to_json() if hasattr(decision, "to_json") else dict(decision)


# --- backend selection tree (CpuCommunicator.__init__) ----------------------------------------
STEPS = (("arch_allowed", "c_arch", "a. architecture in the allow-list?"),
         ("shm_ops_built", "c_ops", "b. shm ops built?\nhasattr(torch.ops._C, \"init_shm_manager\")"),
         ("group_kind_tp_pp", "c_kind", "c. group prefix tp or pp?\nunique_name.startswith((\"tp\", \"pp\"))"),
         ("names_agree", "c_names", "d. all ranks computed the same\nSHM group name? (all_gather_object)\n"
                                    "<ident>-<unique_name>-[<ranks>]-cpushm"))


def _observed(c: Mapping | None) -> str:
    if c is None or c.get("value") is None:
        return "not evaluated (short-circuit)"
    detail = "" if c["name"] == "names_agree" else c.get("detail")   # the names are listed per rank
    return ("✓ yes" if c["value"] else "✗ NO") + (f" ({detail})" if detail else "")


def _wrap(text: str, width: int = 36) -> str:
    return "\n".join(textwrap.fill(part, width) for part in text.split("\n"))


def selection_dot(decision: Any) -> str:
    """DOT of vLLM's backend choice with the path this rank took highlighted and observed values on the nodes."""
    d = _decision(decision)
    conds = {c["name"]: c for c in d["conditions"]}
    shm = d["backend"] == "shm"
    failed = next((n for n, _, _ in STEPS if conds.get(n, {}).get("value") is False), None)
    logged = bool(d.get("log_lines"))
    out = ["digraph cpu_backend_selection {", "  rankdir=TB; nodesep=0.3; ranksep=0.2;",
           '  node [fontname="Helvetica", fontsize=10, margin="0.12,0.05"];',
           '  edge [fontname="Helvetica", fontsize=9];',
           _node("start", f"CpuCommunicator.__init__\ngroup {d['unique_name']}, global ranks {d['global_ranks']}\n"
                          "dist_module = torch.distributed", True, "#e1eef8")]
    reached = True
    for name, nid, text in STEPS:
        c = conds.get(name)
        value = None if c is None else c.get("value")
        label = f"{text}\nobserved: {_observed(c)}"
        if name == "names_agree" and d.get("names_seen"):
            label += "".join(f"\n  rank {i}: {n}" for i, n in enumerate(d["names_seen"]))
        out.append(_node(nid, label, reached and value is not None, GOOD if value else BAD))
        reached = reached and bool(value)
    out.append(_node("shm", "dist_module =\n_CPUSHMDistributed(self)\n(own segment, barrier, join)\n"
                            "supports_tensor_dict = True", shm, GOOD))     # what this branch sets
    out.append(_node("elif_kind", "elif unique_name.startswith(\n(\"tp\", \"pp\"))?\n(checks only the prefix)",
                     not shm, WARN, "diamond"))
    out.append(_node("fb_log", _wrap("INFO " + FALLBACK_LOG % d["unique_name"], 52) + "\nstays on torch.distributed"
                     "\nsupports_tensor_dict = False", not shm and logged, WARN))
    out.append(_node("fb_silent", "stays on torch.distributed,\nno log line\nsupports_tensor_dict = False",
                     not shm and not logged, WARN))
    prev = "start"
    for i, (name, nid, _) in enumerate(STEPS):
        out.append(_edge(prev, nid, "" if i == 0 else "yes", _on_path(conds, STEPS[:i])))
        out.append(_edge(nid, "elif_kind", "no", failed == name))
        prev = nid
    out.append(_edge(prev, "shm", "yes", shm))
    out.append(_edge("elif_kind", "fb_log", "yes: log", not shm and logged))
    out.append(_edge("elif_kind", "fb_silent", "no", not shm and not logged))
    out.append(_legend(["legend", "thick outline, filled, ▶ on the edge: the path this rank took",
                        "✓ yes: condition held   ✗ NO: condition failed",
                        "diamond: vLLM's elif (prefix only)", "dashed, grey text: not taken or not evaluated"], "start"))
    out.append("}")
    return "\n".join(out)


def run_selection_dot(per_rank: Sequence[Mapping], rank: int = 0) -> str:
    """``selection_dot`` of one rank of a run, with the per-node idents masked."""
    return selection_dot(masked(per_rank)[rank]["decision"])


def _on_path(conds: Mapping, steps: Sequence) -> bool:
    return all(conds.get(n, {}).get("value") is True for n, _, _ in steps)


# --- tensor-dict routing (GroupCoordinator.send/recv_tensor_dict) ------------------------------
def _gate_label(info: Mapping) -> str:
    gi = info.get("gate_inputs") or {}
    flag = info.get("use_cpu_custom_send_recv")
    if info.get("gate") == "pre-40150":
        return ("gate (pre-#40150): does the build have the op?\nuse_cpu_custom_send_recv = is_cpu() and\n"
                "  hasattr(torch.ops._C, \"init_shm_manager\")\n"
                f"observed: is_cpu={gi.get('is_cpu')},\n  shm_ops_built={gi.get('shm_ops_built')} -> {flag}")
    return ("gate (post-#40150): ask the communicator\nuse_cpu_custom_send_recv = is_cpu() and\n"
            "  device_communicator and\n  getattr(device_communicator,\n    \"supports_tensor_dict\", False)\n"
            f"observed: is_cpu={gi.get('is_cpu')},\n  device_communicator={gi.get('device_communicator')},\n"
            f"  supports_tensor_dict={gi.get('supports_tensor_dict')} -> {flag}")


def tensor_dict_dot(per_rank: Sequence[Mapping]) -> str:
    """DOT of the tensor-dict call routing with the route both ranks took highlighted (and its end)."""
    ranks = masked(per_rank)
    r0 = next((i for i in ranks if "use_cpu_custom_send_recv" in i), None)   # a rank that reached the gate
    known = r0 is not None
    r0 = r0 or {}
    custom, generic = known and bool(r0["use_cpu_custom_send_recv"]), known and not r0["use_cpu_custom_send_recv"]
    backend = r0.get("backend")
    errors = [(i["rank"], i["error"]) for i in ranks if i.get("error")]
    etypes = {e["type"] for _, e in errors}
    recv = ranks[-1]
    delivered = not errors and recv.get("received_equal") is True
    out = ["digraph tensor_dict_routing {", "  rankdir=TB; nodesep=0.3; ranksep=0.2;",
           '  node [fontname="Helvetica", fontsize=10, margin="0.12,0.05"];', '  edge [fontname="Helvetica", fontsize=9];',
           _node("call", "rank 0: GroupCoordinator\n  .send_tensor_dict(d, dst=1)\n"
                         "rank 1: GroupCoordinator\n  .recv_tensor_dict(src=0)", True, "#e1eef8"),
           _node("gate", _gate_label(r0) if known else "gate: no rank reached it", known, WARN, "box"),
           _node("custom", "custom path:\ndevice_communicator\n  .send/recv_tensor_dict\n"
                           f"(backend observed:\n{backend})", custom, GOOD if backend == "shm" else BAD),
           _node("shm_stream", "_CPUSHMDistributed:\nthe whole dict as one\nshared-memory stream\n(header, then the bytes)",
                 custom and backend == "shm", GOOD),
           _node("attr_error", "✗ dist_module is the torch.distributed\nmodule:\n" + (
               "\n".join(_wrap(f"rank {r}: {e['type']}: {e['message']}", 30) for r, e in errors
                         if e["type"] == "AttributeError")
               or _wrap("AttributeError: module 'torch.distributed' has no attribute 'send_tensor_dict'", 30)),
                 custom and "AttributeError" in etypes, BAD),
           _node("nie", "✗ post-#40150 guard (only on a\ndirect call):\n" + _wrap("NotImplementedError: " + NO_DICT_FASTPATH, 30),
                 "NotImplementedError" in etypes, BAD),
           _node("generic", "generic path:\nisend_object(metadata),\nthen one torch.distributed.isend\n"
                 "per non-empty tensor (gloo),\nall waited\n(metadata: JSON here,\npickle in vLLM)",
                 generic, GOOD),
           _node("delivered", "✓ rank 1 received:\n"
                 + ("\n".join(f"{t['name']} {t['dtype']} {t['shape']}" for t in recv.get("transfers") or []) or "-")
                              + "\nequal to what rank 0 sent:\n"
                              f"{recv.get('received_equal')}", delivered, GOOD)]
    other = [(r, e) for r, e in errors if e["type"] not in ("AttributeError", "NotImplementedError")]
    if other:
        out.append(_node("other_error", "\n".join(_wrap(f"✗ rank {r}: {e['type']}: {e['message']}", 50)
                                                  for r, e in other), True, BAD))
        out.append(_edge("generic" if generic else ("shm_stream" if backend == "shm" else "custom") if custom else "call",
                         "other_error", "fails", True))
    out += [_edge("call", "gate", "", known),
            _edge("gate", "custom", "True", custom),
            _edge("gate", "generic", "False", generic),
            _edge("custom", "shm_stream", "shm", custom and backend == "shm"),
            _edge("custom", "attr_error", "torch.distributed,\npre-#40150", custom and "AttributeError" in etypes),
            _edge("custom", "nie", "torch.distributed,\npost-#40150", "NotImplementedError" in etypes),
            _edge("shm_stream", "delivered", "", delivered and custom),
            _edge("generic", "delivered", "", delivered and generic)]
    out.append(_legend(["legend", "thick outline, filled, ▶ on the edge: the route taken",
                        "✓ delivered: works   ✗ error: the call fails", "dashed, grey text: not taken"], "call"))
    out.append("}")
    return "\n".join(out)
