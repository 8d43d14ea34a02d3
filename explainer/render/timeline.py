"""Pipeline timeline -> SVG / HTML strings (pure; everything comes from ``trace.timeline.PipelineTimeline``).

Rows are PP ranks, columns are ticks (engine time: one stage forward per tick). A filled cell is a
forward micro-step, coloured by request and labelled with its engine step; a hatched grey cell is a
bubble (the rank idles). Thin grey arrows are ``IntermediateTensors`` going to the next rank; black
vertical bars are the back-channel broadcast from the last rank; on the async schedule a dotted line on
the receiving row runs from the tick the back-channel landed to the tick the rank consumed it (a dot).
Colours are the Okabe-Ito set (distinct under the common colour-vision deficiencies); every mark also
differs in shape or line style.
"""

from __future__ import annotations

from html import escape

from explainer.trace.timeline import PipelineTimeline

__all__ = ["timeline_svg", "timelines_html", "cell_width"]

REQUEST_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442")
BACK = "#000000"   # black: unlike every REQUEST_COLORS hue under deuteranopia (vermilion matched orange)
LABEL_W, ROW_H, TOP = 104, 30, 22
SCHEDULE_NAME = {"sync": "sync (vLLM #33960)", "async": "async (vLLM #42187)"}


def cell_width(length: int, max_width: int = 820) -> int:
    """Width of one tick so ``length`` ticks fit ``max_width`` pixels (between 5 and 24)."""
    return max(5, min(24, (max_width - LABEL_W) // max(length, 1)))


def _request_color(req_ids: list[str], order: dict[str, int]) -> str:
    if not req_ids:
        return "#999999"
    return REQUEST_COLORS[order.setdefault(req_ids[0], len(order)) % len(REQUEST_COLORS)]


class _Grid:
    """Where a (rank, tick) cell of one timeline is drawn."""

    def __init__(self, tl: PipelineTimeline, w: int):
        self.start, self.w = tl.start, w

    def x(self, tick: int) -> int:
        return LABEL_W + (tick - self.start) * self.w

    def y(self, rank: int) -> int:
        return TOP + rank * ROW_H


def _cells(tl: PipelineTimeline, g: _Grid) -> list[str]:
    """The bubbles (hatched) and the forwards (a colour and mark per request, the step number if it fits)."""
    x, y, w, out = g.x, g.y, g.w, []
    for r, t in tl.bubbles:
        out.append(f'<rect x="{x(t)}" y="{y(r) + 3}" width="{w - 1}" height="{ROW_H - 6}" fill="url(#xp-hatch)">'
                   f'<title>rank {r}, tick {t}: idle (bubble)</title></rect>')
    order: dict[str, int] = {}
    for c in tl.forwards:
        color = _request_color(c.req_ids, order)
        out.append(f'<rect x="{x(c.tick)}" y="{y(c.rank) + 3}" width="{w - 1}" height="{ROW_H - 6}" fill="{color}">'
                   f'<title>rank {c.rank}, tick {c.tick}: step {c.step} forward ({escape(", ".join(c.req_ids))}): '
                   f'{escape(c.detail)}</title></rect>')
        if c.req_ids and order[c.req_ids[0]] % 2 == 1:      # every other request: a white bar on top, so the
            out.append(f'<rect x="{x(c.tick)}" y="{y(c.rank) + 3}" width="{w - 1}" height="3" fill="#ffffff"/>')
        if w >= 14:                                          # requests differ by shape as well as by colour
            out.append(f'<text x="{x(c.tick) + (w - 1) / 2}" y="{y(c.rank) + ROW_H // 2 + 4}" fill="#ffffff" '
                       f'font-size="9" text-anchor="middle" font-weight="600">{c.step}</text>')
    return out


def _arrows(tl: PipelineTimeline, g: _Grid) -> list[str]:
    """Intermediate tensors (grey), the back-channel (thick), and on the async schedule its consumption (dashed)."""
    x, y, w, out = g.x, g.y, g.w, []
    for a in tl.arrows:
        if a.kind == "intermediate":
            out.append(f'<line x1="{x(a.src_tick) + w - 2}" y1="{y(a.src_rank) + ROW_H - 4}" '
                       f'x2="{x(a.dst_tick) + 1}" y2="{y(a.dst_rank) + 4}" stroke="#616161" stroke-width="1">'
                       f'<title>step {a.step}: IntermediateTensors rank {a.src_rank} -> {a.dst_rank} '
                       f'({a.bytes} B)</title></line>')
        elif a.kind == "back-channel":
            xm = x(a.src_tick) + w - 2
            out.append(f'<line x1="{xm}" y1="{y(a.src_rank) + ROW_H // 2}" x2="{xm}" y2="{y(a.dst_rank) + ROW_H // 2}" '
                       f'stroke="{BACK}" stroke-width="2.5"><title>step {a.step}: back-channel rank {a.src_rank} -> '
                       f'{a.dst_rank}: {escape(", ".join(a.names))} ({a.bytes} B)</title></line>')
        elif a.kind == "consume":
            yc = y(a.dst_rank) + ROW_H - 5
            out.append(f'<line x1="{x(a.src_tick) + w - 2}" y1="{yc}" x2="{x(a.dst_tick) + 2}" y2="{yc}" '
                       f'stroke="{BACK}" stroke-width="1.5" stroke-dasharray="2,2"/>'
                       f'<circle cx="{x(a.dst_tick) + 3}" cy="{yc}" r="3" fill="#ffffff" stroke="{BACK}" '
                       f'stroke-width="1.5"><title>rank {a.dst_rank} consumes step {a.step}\'s back-channel at tick '
                       f'{a.dst_tick} ({escape(", ".join(a.names))})</title></circle>')
    return out


def timeline_svg(tl: PipelineTimeline, *, width: int | None = None, title: str | None = None,
                 length: int | None = None) -> str:
    """One timeline as an SVG string. ``length`` pads the time axis (to draw two runs on one scale)."""
    n = max(tl.length, length or 0)
    w = width or cell_width(n)
    rows = tl.pp_size
    height = TOP + rows * ROW_H + 18
    total_w = LABEL_W + n * w + 10
    g = _Grid(tl, w)
    head = title if title is not None else (
        f"{SCHEDULE_NAME.get(tl.schedule, tl.schedule)}: {tl.length} ticks, {tl.busy} forwards, "
        f"bubbles {len(tl.bubbles)} = {tl.bubble_fraction:.1%}")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" '
           f'viewBox="0 0 {total_w} {height}" role="img" aria-label="{escape(head)}" '
           f'style="font:11px system-ui,sans-serif;max-width:100%;height:auto">',
           '<defs><pattern id="xp-hatch" width="5" height="5" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="5" height="5" fill="#eeeeee"/>'
           '<line x1="0" y1="0" x2="0" y2="5" stroke="#bdbdbd" stroke-width="2"/></pattern></defs>',
           f'<text x="2" y="13" font-weight="600">{escape(head)}</text>']
    for r in range(rows):
        role = " (sampler)" if r == rows - 1 else ""
        out.append(f'<text x="2" y="{g.y(r) + ROW_H // 2 + 4}">rank {r}{role}</text>')
    out += _cells(tl, g) + _arrows(tl, g)
    axis_y = TOP + rows * ROW_H + 12
    for t in range(tl.start, tl.start + n, 5 if w >= 10 else 10):
        out.append(f'<text x="{g.x(t)}" y="{axis_y}" fill="#555" font-size="9">{t - tl.start}</text>')
    out.append("</svg>")
    return "".join(out)


def request_key_html(timelines: dict[str, PipelineTimeline]) -> str:
    """Which colour and mark is which request (in the order each timeline first runs them)."""
    seen: list[str] = []
    for tl in timelines.values():
        for c in tl.forwards:
            if c.req_ids and c.req_ids[0] not in seen:
                seen.append(c.req_ids[0])
    items = []
    for k, req in enumerate(seen):
        bar = '<span style="position:absolute;left:0;top:0;width:14px;height:3px;background:#fff"></span>' if k % 2 else ""
        items.append(f'<span style="display:inline-block;position:relative;width:14px;height:12px;vertical-align:middle;'
                     f'background:{REQUEST_COLORS[k % len(REQUEST_COLORS)]}">{bar}</span> {escape(req)}'
                     f'{" (white bar on top)" if k % 2 else " (plain)"}')
    return ('<div style="font-size:12px;color:#555">Requests: ' + " · ".join(items) + "</div>") if items else ""


def timelines_html(timelines: dict[str, PipelineTimeline], *, max_width: int = 820) -> str:
    """Several timelines stacked on one time scale (same tick width), with one legend."""
    length = max((t.length for t in timelines.values()), default=0)
    w = cell_width(length, max_width)
    parts = [f'<div class="xp-timeline" style="font:12px system-ui,sans-serif;color:#222;max-width:{max_width}px">']
    for label, tl in timelines.items():
        head = (f"{label}: {tl.length} ticks, {tl.busy} forwards, bubbles {len(tl.bubbles)}/"
                f"{tl.pp_size * tl.length} = {tl.bubble_fraction:.1%}")
        parts.append(f'<div style="margin:4px 0">{timeline_svg(tl, width=w, title=head, length=length)}</div>')
    parts.append(request_key_html(timelines))
    parts.append('<div style="font-size:12px;color:#555">Filled cell: a rank runs its layers for one step '
                 '(colour = request, number = engine step). Hatched grey: bubble (idle). Grey line: '
                 'IntermediateTensors to the next rank. Black bar: back-channel broadcast from the last rank. '
                 'Dotted black line ending in a dot: the tick a rank consumes that broadcast (async). '
                 'Time: ticks, one stage forward each.</div></div>')
    return "".join(parts)
