"""CPU communicator runs -> DOT sources, HTML tables and a benchmark figure (vLLM PR #40150).

Pure functions over the per-rank records a real run returns (``comm_scenarios.exchange_rank``, which both the
scenarios and the lab run: backend, decision, gate inputs, path, transfers, error). Run-specific
values that change every run (the per-node ident, i.e. a free port, and pids) are masked by
``masked()`` so outputs stay comparable: node k's ident is shown as ``PORT@nodek``.

DOT conventions: every node and edge has ``class="taken"`` or ``class="not-taken"`` (kept in the
SVG, and what tests assert); taken nodes are filled and bold, taken edges thick and coloured, the
rest grey and dashed. Node ids (``id=``) name the vLLM step they stand for.
"""

from __future__ import annotations

from html import escape
from typing import Any, Mapping, Sequence

from explainer.distributed.device_communicators.cpu_communicator import FALLBACK_LOG, NO_DICT_FASTPATH

__all__ = ["masked", "selection_dot", "run_selection_dot", "tensor_dict_dot", "ranks_table_html", "describe_run", "frame_html",
           "bench_figure", "CSS"]

# Okabe-Ito based: blue = taken; light bluish green / vermillion / orange fills; every state also has a word or
# a badge (✓ held, ✗ failed, ▶ taken), so nothing depends on telling the fills apart
TAKEN, OFF = "#0072B2", "#9e9e9e"
GOOD, BAD, WARN = "#d3efe5", "#fbe3d2", "#fdf0d0"

CSS = """<style>
.xp-comm{font:13px/1.35 system-ui,sans-serif;color:#222;max-width:980px}
.xp-comm .xp-head{font-weight:600;margin:2px 0 6px}
.xp-comm table.xp-ranks{border-collapse:collapse;margin:4px 0}
.xp-comm table.xp-ranks th,.xp-comm table.xp-ranks td{border:1px solid #ddd;padding:3px 6px;text-align:left;
 vertical-align:top}
.xp-comm table.xp-ranks th{background:#f5f5f5;font-weight:600}
.xp-comm code{font:12px ui-monospace,monospace}
.xp-comm .xp-shm{background:#d3efe5}.xp-comm .xp-tdist{background:#fdf0d0}
.xp-comm .xp-error{background:#fbe3d2;color:#7a3600}.xp-comm .xp-ok{background:#d3efe5}
.xp-comm .xp-log{font:11px ui-monospace,monospace;color:#5d4037}
.xp-comm .xp-legend{font-size:12px;color:#555;margin-top:6px}
.xp-comm .xp-legend span{display:inline-block;padding:0 5px;margin-right:6px;border:1px solid #ccc}
.xp-comm table.xp-ranks{font-size:13px}
.xp-comm .xp-graphs{display:flex;flex-direction:column;gap:8px;align-items:flex-start}
.xp-comm .xp-graphs svg{max-width:100%;height:auto}
.xp-comm .xp-scroll{max-width:100%;overflow-x:auto}
</style>"""


# --- masking --------------------------------------------------------------------------------
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


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _node(nid: str, label: str, taken: bool, fill: str = GOOD, shape: str = "box") -> str:
    if taken:
        style = f'style="filled,bold", fillcolor="{fill}", color="{TAKEN}", penwidth=2.5, fontcolor="#111111"'
    else:
        style = f'style="dashed", color="{OFF}", fontcolor="#757575"'
    return f'  {nid} [id={_q(nid)}, class="{"taken" if taken else "not-taken"}", shape={shape}, {style}, label={_q(label)}];'


def _edge(a: str, b: str, label: str, taken: bool) -> str:
    cls = "taken" if taken else "not-taken"
    label = {"yes": "✓ yes", "no": "✗ no", "True": "✓ True", "False": "✗ False"}.get(label, label)
    if taken and label:
        label = "▶ " + label
    style = (f'color="{TAKEN}", penwidth=3, fontcolor="{TAKEN}"' if taken
             else f'color="{OFF}", style=dashed, fontcolor="{OFF}"')
    return f'  {a} -> {b} [id={_q(f"{a}->{b}")}, class="{cls}", label={_q(label)}, {style}];'


def _legend(lines: Sequence[str]) -> str:
    return ('  legend [id="legend", shape=note, style=filled, fillcolor="#fffde7", color="#bdbdbd", fontsize=10, '
            f"label={_q(chr(10).join(lines))}];\n  {{ rank=sink; legend; }}")


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
    import textwrap
    return "\n".join(textwrap.fill(part, width) for part in text.split("\n"))


def selection_dot(decision: Any) -> str:
    """DOT of vLLM's backend choice with the path this rank took highlighted and observed values on the nodes."""
    d = _decision(decision)
    conds = {c["name"]: c for c in d["conditions"]}
    shm = d["backend"] == "shm"
    failed = next((n for n, _, _ in STEPS if conds.get(n, {}).get("value") is False), None)
    logged = bool(d.get("log_lines"))
    out = ["digraph cpu_backend_selection {", "  rankdir=TB; nodesep=0.3; ranksep=0.32;",
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
                        "diamond: vLLM's elif (prefix only)", "dashed, grey text: not taken or not evaluated"]))
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


def _arrived(info: Mapping) -> str:
    return ", ".join(f"{t['name']} {t['dtype']} {t['shape']}" for t in info.get("transfers") or [])


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
    out = ["digraph tensor_dict_routing {", "  rankdir=TB; nodesep=0.3; ranksep=0.32;",
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
           _node("generic", "generic path:\nsend_object(metadata),\nthen one torch.distributed.send\n"
                 "per non-empty tensor (gloo)\n(metadata: JSON here,\npickle in vLLM)",
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
                        "✓ delivered: works   ✗ error: the call fails", "dashed, grey text: not taken"]))
    out.append("}")
    return "\n".join(out)


# --- per-rank table ---------------------------------------------------------------------------
def _outcome(info: Mapping) -> tuple[str, str]:
    if info.get("error"):
        e = info["error"]
        return "xp-error", f"✗ {e['type']}: {e['message']}"
    if info.get("received_equal") is not None:
        return "xp-ok", f"✓ received {_arrived(info)}; equal to what was sent: {info['received_equal']}"
    return "xp-ok", f"✓ sent {_arrived(info)}"


def ranks_table_html(per_rank: Sequence[Mapping], *, css: bool = True) -> str:
    """One column per rank: backend, supports_tensor_dict, path, SHM group name seen, log lines, outcome."""
    ranks = masked(per_rank)
    rows = [("node", lambda i: escape(str(i.get("node", 0))), None),
            ("backend", lambda i: f"<code>{escape(str(i.get('backend')))}</code>",
             lambda i: "xp-shm" if i.get("backend") == "shm" else "xp-tdist"),
            ("supports_tensor_dict", lambda i: escape(str((i.get("decision") or {}).get("supports_tensor_dict"))), None),
            ("gate", lambda i: escape(str(i.get("gate"))), None),
            ("use_cpu_custom_send_recv", lambda i: escape(str(i.get("use_cpu_custom_send_recv"))), None),
            ("tensor-dict path", lambda i: escape(str(i.get("path"))), None),
            ("SHM group name (own / all seen)", lambda i: _names(i.get("decision") or {}), None),
            ("log lines", lambda i: "<br>".join(f'<span class="xp-log">{escape(s)}</span>'
                                                for s in i.get("log_lines") or []) or "(none)", None),
            ("outcome", lambda i: escape(_outcome(i)[1]), lambda i: _outcome(i)[0])]
    head = "<tr><th></th>" + "".join(f'<th id="xp-comm-rank-{i["rank"]}">rank {i["rank"]}</th>' for i in ranks) + "</tr>"
    body = []
    for title, cell, klass in rows:
        tds = "".join(f'<td{" class=" + chr(34) + klass(i) + chr(34) if klass else ""} '
                      f'data-rank="{i["rank"]}" data-row="{escape(title)}">{cell(i)}</td>' for i in ranks)
        body.append(f"<tr><th>{escape(title)}</th>{tds}</tr>")
    legend = ('<div class="xp-legend">backend and outcome are written in each cell; fills repeat them: '
              '<span class="xp-shm">shm</span><span class="xp-tdist">torch.distributed (gloo)</span>'
              '<span class="xp-ok">✓ worked</span><span class="xp-error">✗ failed</span>'
              ' PORT@nodeK = the free port node K\'s executor picked (vLLM\'s VLLM_DIST_IDENT)</div>')
    return (CSS if css else "") + ('<div class="xp-comm"><table class="xp-ranks" id="xp-comm-ranks">' + head
                                   + "".join(body) + "</table>" + legend + "</div>")


def _names(d: Mapping) -> str:
    own = d.get("group_name")
    seen = d.get("names_seen")
    if own is None:
        return "(not computed: an earlier condition failed)"
    return f"<code>{escape(own)}</code><br>seen: " + ", ".join(f"<code>{escape(n)}</code>" for n in seen or [])


def describe_run(per_rank: Sequence[Mapping]) -> str:
    """Plain-text, run-independent summary: per rank backend, path, log lines and outcome."""
    lines = []
    for i in masked(per_rank):
        lines.append(f"rank {i['rank']} (node {i.get('node', 0)}): backend {i.get('backend')}, "
                     f"supports_tensor_dict={(i.get('decision') or {}).get('supports_tensor_dict')}, "
                     f"path {i.get('path')}")
        lines += [f"  log: {s}" for s in i.get("log_lines") or []]
        lines.append("  " + _outcome(i)[1])
    return "\n".join(lines)


def frame_html(title: str, per_rank: Sequence[Mapping], svgs: Sequence[str] = ()) -> str:
    """A self-contained frame: title, diagrams (already rendered SVG) and the per-rank table."""
    graphs = "".join(_strip_svg(s) for s in svgs)
    return (CSS + f'<div class="xp-comm"><div class="xp-head">{escape(title)}</div>'
            f'<div class="xp-graphs">{graphs}</div></div>' + ranks_table_html(per_rank, css=False))


def _strip_svg(svg: str) -> str:
    """Drop the XML prolog and comments (graphviz version, titles) so frames are smaller and stable."""
    import re
    svg = svg[svg.find("<svg"):] if "<svg" in svg else svg
    return re.sub(r"<!--.*?-->", "", svg, flags=re.S)


# --- benchmark figure -------------------------------------------------------------------------
def bench_figure(m: Mapping):
    """``explainer.bench.comm.measure()`` -> matplotlib figure: throughput and time per dict vs size."""
    from matplotlib.figure import Figure                  # not pyplot: no global state, shown once
    sizes = sorted(int(s) for s in m["throughput"]["shm"])
    fig = Figure(figsize=(7, 9))                         # stacked: legible at a 700 px column
    a, b = fig.subplots(2, 1)
    styles = {"shm": ("shared memory (custom path)", "#009E73", "o"),          # Okabe-Ito; shapes differ too
              "generic": ("torch.distributed gloo (generic path)", "#D55E00", "s")}
    for path, (label, color, mk) in styles.items():
        tput = [m["throughput"][path][_key(m["throughput"][path], s)] for s in sizes]
        a.plot(sizes, [t / 1e9 for t in tput], marker=mk, color=color, label=label)
        b.plot(sizes, [s / t * 1e6 for s, t in zip(sizes, tput)], marker=mk, color=color, label=label)
        lat = m["latency"][path] * 1e6
        b.scatter([sizes[0]], [lat], marker="*", s=140, color=color, edgecolor="black", linewidth=0.5, zorder=3,
                  label=f"{path}: 4 KiB ping-pong one-way")
    if "floor" in m["latency"]:                           # the raw hand-off: flip a flag, copy 4 KiB, flip back
        b.scatter([sizes[0]], [m["latency"]["floor"] * 1e6], marker="X", s=90, color="black", zorder=4,
                  label="raw shared-memory floor: 4 KiB one-way")
    a.axhline(m["memcpy"] / 1e9, color="#0072B2", ls="--", label="1-thread memcpy 16 MiB")
    a.axhline(0.4 * m["memcpy"] / 1e9, color="#0072B2", ls=":", label="goal: 40 % of memcpy")
    for ax, title, unit in ((a, "throughput (streamed dicts)", "GB/s"), (b, "time per dict (streamed; ★ ✖ ping-pong one-way)", "µs")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [_size(s) for s in sizes])
        ax.set_xlabel("dict payload (hidden_states + residual)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, frameon=False)   # below: no point hidden
    fig.tight_layout()
    return fig


def _key(d: Mapping, s: int):
    return s if s in d else str(s)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
