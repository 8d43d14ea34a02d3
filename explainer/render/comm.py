"""CPU communicator runs -> DOT sources, HTML tables and a benchmark figure (vLLM PR #40150).

Pure functions over the per-rank records a real run returns (``scenario.comm.exchange_rank``, which both the
scenarios and the lab run: backend, decision, gate inputs, path, transfers, error). The DOT pictures are
``comm_dot``'s (re-exported here: the notebook calls them as ``R.run_selection_dot`` and ``R.tensor_dict_dot``);
this module adds the per-rank table, the one-line description, the lab's frame and the benchmark figure.
"""

from __future__ import annotations

from html import escape
from typing import Mapping, Sequence

from explainer import vllm_release
from explainer.render.comm_dot import (masked, run_selection_dot, selection_dot,  # noqa: F401  (R.<name> in notebook 3)
                                       tensor_dict_dot)
from explainer.render.dot_picture import strip_svg

__all__ = ["masked", "selection_dot", "run_selection_dot", "tensor_dict_dot", "ranks_table_html", "describe_run",
           "frame_html", "summary_html", "bench_figure", "CSS"]


CSS = """<style>
.xp-comm{font:13px/1.35 system-ui,sans-serif;color:#222;max-width:980px}
.xp-comm .xp-head{font-weight:600;margin:2px 0 6px}
.xp-comm table.xp-ranks{border-collapse:collapse;margin:4px 0}
.xp-comm table.xp-ranks th,.xp-comm table.xp-ranks td{border:1px solid #ddd;padding:3px 6px;text-align:left;
 vertical-align:top}
.xp-comm table.xp-ranks th{background:#f5f5f5;font-weight:600}
.xp-comm code{font:12px ui-monospace,monospace}
.xp-comm .xp-shm{background:#d3efe5}.xp-comm .xp-tdist{background:#fdf0d0}
.xp-comm .xp-error{background:#fbe3d2;color:#7a3600}
.xp-comm .xp-err-line{font-weight:600;padding:2px 6px;margin:2px 0;border-left:4px solid #d55e00}.xp-comm .xp-ok{background:#d3efe5}
.xp-comm .xp-log{font:11px ui-monospace,monospace;color:#5d4037}
.xp-comm .xp-legend{font-size:12px;color:#555;margin-top:6px}
.xp-comm .xp-legend span{display:inline-block;padding:0 5px;margin-right:6px;border:1px solid #ccc}
.xp-comm table.xp-ranks{font-size:13px}
.xp-comm .xp-graphs{display:flex;flex-direction:column;gap:8px;align-items:flex-start}
.xp-comm .xp-graphs svg{max-width:100%;height:auto}
.xp-comm .xp-scroll{max-width:100%;overflow-x:auto}
</style>"""










# --- per-rank table ---------------------------------------------------------------------------
def _arrived(info: Mapping) -> str:
    return ", ".join(f"{t['name']} {t['dtype']} {t['shape']}" for t in info.get("transfers") or [])


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
              ' PORT@nodeK = node K\'s ident, the free port its launcher picked (vLLM\'s VLLM_DIST_IDENT; a vllm_dist_&lt;uuid&gt;'
              f' file name in vLLM {vllm_release.RUNS})</div>')
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
        really = (i.get("decision") or {}).get("really_failed")   # vLLM's line blames the names whatever failed
        lines += [f"  what really failed: {really}"] if i.get("log_lines") and really else []
        lines.append("  " + _outcome(i)[1])
    return "\n".join(lines)


def errors_html(per_rank: Sequence[Mapping]) -> str:
    """Each rank's error in words, for the top of a frame: right under the controls that caused it."""
    errs = [i for i in per_rank if i.get("error")]
    return "".join(f'<div class="xp-error xp-err-line">✗ rank {i["rank"]}: {escape(i["error"]["type"])}: '
                   f'{escape(i["error"]["message"])}</div>' for i in errs)


def summary_html(title: str, per_rank: Sequence[Mapping], note: str = "") -> str:
    """A short frame: title, each rank's error (if any), one line per rank (backend, path, outcome), a note."""
    lines = "".join(f'<div data-rank="{i["rank"]}">rank {i["rank"]} (node {escape(str(i.get("node", 0)))}): backend '
                    f'<code>{escape(str(i.get("backend")))}</code>, path {escape(str(i.get("path")))} · '
                    f'{escape(_outcome(i)[1])}</div>' for i in masked(per_rank))
    return (CSS + f'<div class="xp-comm"><div class="xp-head">{escape(title)}</div>{errors_html(per_rank)}{lines}'
            + (f'<div class="xp-legend">{escape(note)}</div>' if note else "") + "</div>")


def frame_html(title: str, per_rank: Sequence[Mapping], svgs: Sequence[str] = (), *, table: bool = True) -> str:
    """A self-contained frame: title, each rank's error (if any), diagrams (already rendered SVG), the table."""
    graphs = "".join(strip_svg(s) for s in svgs)
    return (CSS + f'<div class="xp-comm"><div class="xp-head">{escape(title)}</div>{errors_html(per_rank)}'
            f'<div class="xp-graphs">{graphs}</div></div>' + (ranks_table_html(per_rank, css=False) if table else ""))


# --- benchmark figure -------------------------------------------------------------------------
def bench_figure(m: Mapping):
    """``explainer.bench.comm.measure()`` -> matplotlib figure: time per dict vs size, both paths, in one panel,
    titled with when and under what load it was measured (the figures swing with the load)."""
    from matplotlib.figure import Figure                  # not pyplot: no global state, shown once
    sizes = sorted(int(s) for s in m["throughput"]["shm"])
    fig = Figure(figsize=(7, 4))                          # legible at a 700 px column
    ax = fig.subplots()
    styles = {"shm": ("shared memory (custom path)", "#009E73", "o"),          # Okabe-Ito; shapes differ too
              "generic": ("torch.distributed gloo (generic path)", "#D55E00", "s")}
    for path, (label, color, mk) in styles.items():
        tput = [m["throughput"][path][_key(m["throughput"][path], s)] for s in sizes]
        ax.plot(sizes, [s / t * 1e6 for s, t in zip(sizes, tput)], marker=mk, color=color, label=f"{label}, streamed")
        ax.scatter([sizes[0]], [m["latency"][path] * 1e6], marker="*", s=140, color=color, edgecolor="black",
                   linewidth=0.5, zorder=3, label=f"{path}: 4 KiB ping-pong, one way")
    if "floor" in m["latency"]:                           # the raw hand-off: flip a flag, copy 4 KiB, flip back
        ax.scatter([sizes[0]], [m["latency"]["floor"] * 1e6], marker="X", s=90, color="black", zorder=4,
                   label="raw shared-memory floor: 4 KiB one way")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [_size(s) for s in sizes])
    ax.set_xlabel("dict payload (hidden_states + residual)")
    ax.set_ylabel("µs per dict (lower is faster)")
    before, after = m.get("loadavg", (float("nan"), float("nan")))
    ax.set_title(f"time per dict, measured {m.get('measured_at', '(time not recorded)')}\n"
                 f"{m.get('cpus', '?')} CPUs, load average {before:.1f} → {after:.1f}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)   # below: no point hidden
    fig.tight_layout()
    return fig


def _key(d: Mapping, s: int):
    return s if s in d else str(s)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
