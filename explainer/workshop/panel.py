"""A check's result as an HTML panel for a notebook cell: the verdict, one row per check, what to fix, and
on failure the picture of the failure, which the exercise's module draws (``picture(report)``; pure functions of
a ``report.Report``, which draws itself with them in a notebook; the panel runs no learner code).

Colour-blind safe: every state is a symbol and a word (✓ PASS / ✗ FAIL / · info); colours (Okabe-Ito blue
and vermillion) only repeat it.
"""

from __future__ import annotations

from html import escape as html_escape

from explainer.workshop import catalog
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
    if report.status == "fail" and report.exercise in catalog.EXERCISES:
        body.append(catalog.load(report.exercise).picture(report))    # the exercise draws its own failure
    return (CSS if css else "") + (f'<div class="xp-ws xp-ws-{report.status}" data-exercise="{text_html(report.exercise)}" '
                                   f'data-status="{report.status}">' + "".join(body) + "</div>")


def _fig(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {x}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) or "none"
    return str(v)

