"""A check's result as an HTML panel for a notebook cell: the verdict, one row per check, what to fix, and
on failure the picture of the failure (pure functions of a ``report.Report``, which draws itself with them in
a notebook; the panel runs no learner code and imports nothing of the workshop).

Colour-blind safe: every state is a symbol and a word (✓ PASS / ✗ FAIL / · info); colours (Okabe-Ito blue
and vermillion) only repeat it.

* ``accept``: the first differing case as a table: per position the entropy, its place in ascending
  order, the sum of the smaller entropies (what the rule compares with the bound), expected and got.
* ``sync-fields``: every rank's view at the first divergence (``render.pp_views.rank_views_html``), next to PP=1.
* ``tensor-dict-gate``: per run and rank: node, communicator backend, what the gate said, the path taken.
"""

from __future__ import annotations

from html import escape as html_escape

import torch

from explainer.render.pp_views import rank_views_html
from explainer.trace import Trace
from explainer.workshop.shown import inert


CSS = """<style>
.xp-ws{font:13px/1.4 system-ui,sans-serif;color:#222;max-width:980px;border:2px solid #888;border-radius:6px;
 padding:8px 10px;margin:4px 0}
.xp-ws.xp-ws-pass{border-color:#0072b2;background:#f3f8fc}.xp-ws.xp-ws-fail,.xp-ws.xp-ws-error{border-color:#d55e00;
 background:#fdf5ef}
.xp-ws .xp-ws-head{font-size:15px;font-weight:700;margin-bottom:4px}
.xp-ws .xp-ws-ok{color:#005a8c}.xp-ws .xp-ws-bad{color:#a33f00}
.xp-ws table{border-collapse:collapse;margin:4px 0}
.xp-ws .xp-ws-scroll{overflow-x:auto;max-width:100%}
.xp-ws.xp-ws table td,.xp-ws.xp-ws table th,.xp-ws.xp-ws table tr{padding:2px 8px;vertical-align:top;text-align:left}
.xp-ws.xp-ws table tbody tr:nth-child(odd),.xp-ws.xp-ws table tbody tr:hover{background:transparent}
.xp-ws table.xp-ws-checks td.xp-ws-word{font-weight:700;white-space:nowrap}
.xp-ws table.xp-ws-checks td:nth-child(2){white-space:nowrap}
.xp-ws.xp-ws table.xp-ws-case td,.xp-ws.xp-ws table.xp-ws-case th,.xp-ws.xp-ws table.xp-ws-runs td,.xp-ws.xp-ws table.xp-ws-runs th{
 border:1px solid #ccc;text-align:center;font-variant-numeric:tabular-nums}
.xp-ws.xp-ws table.xp-ws-case tr th:first-child{text-align:right}
.xp-ws.xp-ws table.xp-ws-runs td,.xp-ws.xp-ws table.xp-ws-runs th{padding:2px 5px}
.xp-ws.xp-ws table td.xp-ws-diff{outline:3px solid #d55e00;font-weight:700;background:#fff}
.xp-ws .xp-ws-fix{margin:6px 0;padding:4px 6px;background:#fff;border-left:4px solid #d55e00}
.xp-ws .xp-ws-fig{color:#444;font-size:12px}
.xp-ws .xp-ws-note{color:#444;font-size:12px;margin:4px 0}
</style>"""

def text_html(text) -> str:
    """Any text a learner may have shaped, for the panel: inert (``shown.inert``), then HTML-escaped."""
    return html_escape(inert(text))


WORD = {"pass": ("✓", "PASS", "xp-ws-ok"), "fail": ("✗", "FAIL", "xp-ws-bad"), "error": ("✗", "ERROR", "xp-ws-bad")}


def panel_html(report, css: bool = True) -> str:
    mark, word, cls = WORD[report.status]
    head = (f'<div class="xp-ws-head {cls}">{mark} {word} · {text_html(report.exercise)}: '
            f'<code>{text_html(report.function)}</code> <span style="font-weight:400">({text_html(report.source)})</span></div>')
    rows = []
    for c in report.checks:
        m, w, k = ("✓", "PASS", "xp-ws-ok") if c.passed else (("✗", "FAIL", "xp-ws-bad") if c.required
                                                              else ("·", "NOTE", ""))
        rows.append(f'<tr data-check="{text_html(c.name)}" data-passed="{str(c.passed).lower()}">'
                    f'<td class="xp-ws-word {k}">{m} {w}</td><td>{text_html(c.name)}</td><td>{text_html(c.detail)}</td></tr>')
    body = [head]
    if rows:
        body.append(f'<table class="xp-ws-checks">{"".join(rows)}</table>')
    if report.status != "pass":
        what = "error in your code or input" if report.status == "error" else "what to fix"
        body.append(f'<div class="xp-ws-fix"><b>{what}:</b> {text_html(report.reason)}</div>')
    figs = {k: v for k, v in report.figures.items() if k not in ("prompts",)}
    if figs:
        body.append('<div class="xp-ws-fig">' + " · ".join(f"{text_html(k)}: {text_html(_fig(v))}" for k, v in figs.items())
                    + "</div>")
    if report.output.strip():
        printed = inert(report.output.rstrip(), newlines=True)
        lines = printed.split("\n")
        body.append(f'<details class="xp-ws-note"><summary>printed during the check ({len(lines)} line'
                    f'{"s" * (len(lines) != 1)}, last 2000 characters)</summary><pre>{html_escape(printed)}'
                    f'</pre></details>')
    if report.status == "fail":
        body.append(PICTURES.get(report.exercise, lambda r: "")(report))
    return (CSS if css else "") + (f'<div class="xp-ws xp-ws-{report.status}" data-exercise="{text_html(report.exercise)}" '
                                   f'data-status="{report.status}">' + "".join(body) + "</div>")


def _fig(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {x}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) or "none"
    return str(v)


def accept_picture(report) -> str:
    case = report.picture.get("case")
    if not case:
        return ""
    h = torch.tensor(case["entropy"], dtype=torch.float32)
    row = case.get("row", 0)
    sorted_h, order = torch.sort(h[row])
    before = torch.empty_like(sorted_h).scatter_(0, order, torch.cumsum(sorted_h, 0) - sorted_h)
    place = torch.empty_like(order).scatter_(0, order, torch.arange(len(order)))
    L = h.shape[1]
    show = range(L) if L <= 16 else range(max(0, case.get("col", 0) - 8), min(L, case.get("col", 0) + 8))
    exp, got = case["expected"][row], (case["got"][row] if case.get("got") else None)
    yes = lambda b: "✓ accept" if b else "· reject"               # noqa: E731

    def cells(values, diff=lambda j: False):
        return "".join(f'<td class="{"xp-ws-diff" if diff(j) else ""}">{values(j)}</td>' for j in show)
    def differs(j):
        return got is not None and got[j] != exp[j]
    rows = [f"<tr><th>position</th>{cells(lambda j: j)}</tr>",
            f"<tr><th>entropy</th>{cells(lambda j: f'{float(h[row, j]):.4g}')}</tr>",
            f"<tr><th>place in ascending order</th>{cells(lambda j: int(place[j]))}</tr>",
            f"<tr><th>sum of the entropies sorted before it</th>{cells(lambda j: f'{float(before[j]):.4g}')}</tr>",
            f"<tr><th>expected (sum before ≤ bound)</th>{cells(lambda j: yes(exp[j]), differs)}</tr>"]
    if got is not None:
        rows.append(f"<tr><th>your function</th>{cells(lambda j: yes(got[j]) + (' ≠' if differs(j) else ''), differs)}</tr>")
    title = (f'<div class="xp-ws-note"><b>case {text_html(case["label"])}</b>: entropy of shape {list(h.shape)}, '
             f'bound {case["bound"]:g}; row {row}' + (f" of {h.shape[0]}" if h.shape[0] > 1 else "")
             + (f", positions {show.start}..{show.stop - 1} of {L}" if L > 16 else "") + "</div>")
    return title + f'<div class="xp-ws-scroll"><table class="xp-ws-case" data-row="{row}">{"".join(rows)}</table></div>'


def sync_picture(report) -> str:
    pic = report.picture
    if not pic.get("trace") or pic.get("event") is None:
        return ""
    trace, ref = Trace.from_json(pic["trace"]), Trace.from_json(pic["reference"])
    note = (f"prompt {pic['prompt']!r} (seed {pic['seed']}) alone: PP=2 with your fields writes {pic['text']!r}, "
            f"PP=1 {pic['pp1_text']!r}")
    return ('<div class="xp-ws-note"><b>the first divergence</b>: every rank\'s view of the state at the event '
            'where a rank first reads a field that differs from the owner\'s</div>'
            + rank_views_html(trace, pic["event"], reference=ref, note=note))


def gate_picture(report) -> str:
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
                        f"<td>{r.get('asked', [{}])[0].get('supports_tensor_dict', '-') if r.get('asked') else '-'}"
                        f"</td><td>{r['node']}</td></tr>")
    return ('<div class="xp-ws-note"><b>what each rank saw</b> (real rank processes; the same PP dict '
            'hidden_states + residual [2, 8, 64] fp32, rank 0 → rank 1)</div><div class="xp-ws-scroll">'
            '<table class="xp-ws-runs"><tr><th>run</th>'
            '<th>rank</th><th>outcome</th><th>path taken</th><th>your gate said</th><th>backend</th>'
            '<th>supports_<wbr>tensor_<wbr>dict</th><th>node</th></tr>' + "".join(rows) + "</table></div>")


PICTURES = {"accept": accept_picture, "sync-fields": sync_picture, "tensor-dict-gate": gate_picture}
