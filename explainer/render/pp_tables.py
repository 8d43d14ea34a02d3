"""PP runs -> HTML tables: bytes per step per tensor, and held-out accuracy per mode."""

from __future__ import annotations

from html import escape
from typing import Mapping, Sequence

from explainer.render.pp_style import CSS, STATE_FIELDS
from explainer.trace import Trace

__all__ = ["sc_bytes", "bytes_table_html", "accuracy_table_html"]


# ---- tables -------------------------------------------------------------------------------------------
def sc_bytes(num_reqs: int, canvas_length: int, hidden_size: int, element_size: int = 4) -> int:
    """Bytes of ``self_conditioning_embeds`` [num_reqs, CL, H] (fp32): what state sync sends each step."""
    return num_reqs * canvas_length * hidden_size * element_size


def bytes_table_html(traces: Mapping[str, Trace], css: bool = True) -> str:
    """Per tensor name, bytes per engine step (median) in each run, side by side, with totals."""
    per = {label: t.bytes_per_step() for label, t in traces.items()}
    names = sorted({n for b in per.values() for n in b}, key=lambda n: (n in STATE_FIELDS, n))
    head = "<tr><th>tensor</th>" + "".join(f"<th>{escape(k)}</th>" for k in per) + "</tr>"
    rows = [f'<tr data-name="{escape(n)}"><td>{escape(n)}{" (state)" if n in STATE_FIELDS else ""}</td>'
            + "".join(f"<td>{b.get(n, 0):,}</td>" for b in per.values()) + "</tr>" for n in names]
    rows.append("<tr><td><b>total</b></td>" + "".join(f"<td><b>{sum(b.values()):,}</b></td>" for b in per.values())
                + "</tr>")
    return ((CSS if css else "") + '<div class="xp-pp" id="xp-pp-bytes"><table class="xp-tbl">' + head
            + "".join(rows) + '</table><div class="xp-legend">bytes per engine step, median over the run\'s steps '
            "(a tensor absent in a step counts 0); (state) = sampler-owned state, sent only by state sync</div></div>")


def accuracy_table_html(rows: Sequence[Mapping], css: bool = True) -> str:
    """Rows of ``scenario.accuracy.engine_exact_match`` (+ ``identical_to_pp1``) as a table."""
    body = []
    for r in rows:
        acc = f"{r['exact_match']:.0%}" if r.get("exact_match") is not None else escape(str(r.get("outcome")))
        same = r.get("identical_to_pp1")
        same = "-" if same is None else f"{same}/{r['n']}"
        body.append(f'<tr data-label="{escape(r["label"])}"><td>{escape(r["label"])}</td><td>{escape(r["model"])}</td>'
                    f"<td>{acc}</td><td>{same}</td></tr>")
    return ((CSS if css else "") + '<div class="xp-pp" id="xp-pp-accuracy"><table class="xp-tbl"><tr><th>run</th>'
            "<th>model</th><th>held-out exact match</th><th>same text as PP=1</th></tr>" + "".join(body)
            + "</table></div>")
