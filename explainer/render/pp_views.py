"""One event of a PP run as HTML and DOT (pure; everything is read from a ``Trace``).

* ``rank_views_html``: every rank's view side by side at one event. A field is ``xp-diverged`` (badge
  "≠ READ", solid outline) when this event reads it on a non-owner rank and its value differs from the
  owner's (the definition of ``Trace.divergences``), ``xp-stale`` (badge "STALE", dashed) when it differs but
  is not read here. Colours are Okabe-Ito and never the only cue.
* ``event_dot``: one event as a small graph.
"""

from __future__ import annotations

from html import escape

from explainer.model import task
from explainer.render.dot import quote
from explainer.render.pp_style import CSS, GLYPHS, STATE_FIELDS, VIEW_ROWS
from explainer.render.pp_trace import diverged_fields, received
from explainer.trace import Trace

__all__ = ["rank_views_html", "event_dot"]


def _toks(ids) -> str:
    return "".join(f'<span class="xp-tok">{escape(GLYPHS(t))}</span>' for t in ids)


def _value(name: str, v) -> str:
    if name in ("canvas", "draft_tokens"):
        return _toks(v)
    if name == "self_conditioning_embeds":
        return f"‖·‖ = {v:.3f}" + (" (zero)" if not v else "")
    if name == "is_encoder_phase":
        return f"{v} ({'causal' if v else 'bidirectional'})"
    return escape(str(v))


def _tensor(t) -> str:
    return f"{escape(t.name)} {t.dtype} {list(t.shape)} {t.bytes:,} B"


def _texts(trace: Trace, i: int, reference: Trace | None) -> str:
    e = trace.events[i]
    done = [s for s in trace.events[: i + 1] if s.phase == "sample" and not s.warmup]
    ours: dict[str, list[int]] = {}
    for s in done:
        for rid, ids in s.data.get("emitted", {}).items():
            ours.setdefault(rid, []).extend(ids)
    last_step = done[-1].step if done else 0
    if e.warmup:
        return '<div class="xp-io" data-role="text"><b>output</b> (warmup: no user request yet)</div>'
    # the text is what this frame is about when the event emitted some, and on the run's last event
    changed = " data-changed" if any(e.data.get("emitted", {}).values()) or i == len(trace.events) - 1 else ""
    rows = []
    ref_out = reference.step_outputs() if reference is not None else {}
    for rid in sorted(set(ours) | {r for s, d in ref_out.items() if s <= last_step for r in d}) or ["req-0"]:
        mine = task.decode(ours.get(rid, []))
        line = f'<b>output so far</b> {escape(rid)}: <span class="xp-text">{escape(mine) or "&nbsp;"}</span>'
        if reference is not None:
            ref = task.decode([t for s in sorted(ref_out) if s <= last_step for t in ref_out[s].get(rid, [])])
            marked = "".join(f'<span class="xp-bad">{escape(c)}</span>' if k >= len(ref) or c != ref[k] else escape(c)
                             for k, c in enumerate(mine))
            line = (f'<b>output so far</b> {escape(rid)}: <span class="xp-text">{marked or "&nbsp;"}</span> '
                    f'vs PP=1 <span class="xp-text">{escape(ref) or "&nbsp;"}</span>'
                    + (' <span class="xp-red" data-role="text-differs">≠ differs from PP=1</span>' if mine != ref
                       else ' <span data-role="text-same">✓ same as PP=1</span>'))
        rows.append(line)
    return f'<div class="xp-io" data-role="text"{changed}>' + "<br>".join(rows) + "</div>"


def _flow(trace: Trace, i: int, stale: dict[int, list[str]]) -> str:
    """The event as a small HTML diagram: ranks as boxes, the transfer as an arrow, stale state in red."""
    e, pp = trace.events[i], int(trace.meta.get("pp_size", 1))
    layers = trace.meta.get("layers", {})
    moved = e.transfers or received(trace, i)
    boxes = []
    for r in range(pp):
        start, end = layers.get(str(r), [0, 0])
        role = " · sampler" if r == pp - 1 else ""
        bad = (f'<br><span class="xp-red">STALE: {escape(", ".join(stale[r]))}</span>' if stale.get(r) else "")
        boxes.append(f'<div class="xp-node{" xp-acting" if r == e.rank else ""}" data-rank="{r}">'
                     f'<b>rank {r}</b> · layers {start}..{end - 1}{role}{bad}</div>')
    if pp == 1:
        return f'<div class="xp-flow" id="xp-pp-flow-{i}">{boxes[0]}</div>'
    error = e.data.get("error")
    if moved:
        src, dst = moved[0].sender, moved[0].receiver
        arrow = ("→" if dst > src else "←") + " " + ", ".join(escape(t.name) for t in moved)
        cls = ""
    elif error:
        arrow, cls = "✗ " + escape(error["type"]), " xp-err"
    else:
        arrow, cls = "no transfer in this event", " xp-none"
    mid = f'<div class="xp-arrow{cls}">{arrow}</div>'
    return f'<div class="xp-flow" id="xp-pp-flow-{i}">{boxes[0]}{mid}{"".join(boxes[1:])}</div>'


LEGEND = ('<div class="xp-legend" id="{fid}-legend"><b>key</b> '
          '<span class="xp-diverged"><span class="xp-badge">≠ READ</span>solid</span> read here, differs from the owner '
          '(last rank) · <span class="xp-stale"><span class="xp-badge">STALE</span>dashed</span> differs, not read here · '
          'thick box ▶ = acting rank · arrow = tensors sent · wavy underline = text differs from PP=1 · '
          '<span class="xp-text">␣</span> space · ⏎ end · ‖·‖ = L2 norm</div>')


def _rank_column(e, r: int, owner: int, red: list[str], stale: dict, amber_all: set, fid: str) -> str:
    """Rank ``r``'s view at event ``e``: each request's fields, the divergent ones badged."""
    owner_view = e.views.get(owner, {})
    rows = []
    reqs = {rid: v for rid, v in e.views[r].items() if e.warmup or not rid.startswith("_warmup_")}
    left = len(e.views[r]) - len(reqs)
    if left:
        rows.append(f'<tr><td colspan="2" class="xp-aside" data-role="warmup-left">{left} <code>_warmup_</code> '
                    f"request{'s' if left != 1 else ''} from warmup_kernels in this rank's last snapshot, "
                    "hidden (gone once the rank next acts)</td></tr>")
    if not reqs:
        rows.append('<tr><td colspan="2" class="xp-aside" data-role="no-request">no user request on this rank '
                    "yet: it adds <code>req-0</code> when it first runs a step</td></tr>")
    for rid, view in sorted(reqs.items()):
        theirs = owner_view.get(rid, {})
        rows.append(f'<tr><th colspan="2" style="text-align:left">{escape(rid)}</th></tr>')
        for name in VIEW_ROWS:
            differs = r != owner and name in theirs and view.get(name) != theirs.get(name)
            cls = ("xp-diverged" if differs and r == e.rank and name in red else
                   "xp-stale" if differs and name in STATE_FIELDS else "")
            if differs and name in STATE_FIELDS and name not in stale.setdefault(r, []):
                stale[r].append(name)                   # once per rank, however many requests differ
            if cls == "xp-stale":
                amber_all.add(name)
            badge = {"xp-diverged": '<span class="xp-badge">≠ READ</span>',
                     "xp-stale": '<span class="xp-badge">STALE</span>'}.get(cls, "")
            aside = ('<span class="xp-aside">differs: own copy, not read by this rank</span>'
                     if differs and not cls and name == "canvas" else "")
            rows.append(f'<tr><th>{name}</th><td class="{cls}" data-field="{name}"'
                        f'{" data-changed" if cls == "xp-diverged" else ""}>{badge}'
                        f"{_value(name, view.get(name))}{aside}</td></tr>")
    role = (" (owner: sampler)" if r == owner else "") + (" ▶ acting" if r == e.rank else "")
    return (f'<div class="xp-rank{" xp-acting" if r == e.rank else ""}" data-rank="{r}" '
            f'id="{fid}-rank{r}"><h4>rank {r}{role}</h4><table class="xp-view">{"".join(rows)}</table></div>')


def _event_io(trace: Trace, event_index: int, red: list[str], note: str) -> list[str]:
    """The event's header lines: what it did, what it read, sent and received, its error, its divergence."""
    e, owner = trace.events[event_index], trace.owner_rank
    io = [f"<b>what</b> {escape(e.detail)}"]
    if e.reads:
        io.append("<b>reads</b> " + "; ".join(f"{escape(q)}: {', '.join(fs)}" for q, fs in e.reads.items()))
    if e.transfers:
        io.append("<b>sends</b> " + "; ".join(f"{_tensor(t)} → rank {t.receiver} ({t.op})" for t in e.transfers))
    got = received(trace, event_index)
    if got:
        io.append("<b>receives</b> " + "; ".join(f"{_tensor(t)} ← rank {t.sender}" for t in got))
    if e.data.get("error"):
        io.append(f'<span data-changed><b class="xp-red">✗ error</b> {escape(e.data["error"]["type"])}: '
                  f'{escape(e.data["error"]["message"])}</span>')
    if red:
        io.append(f'<b class="xp-red">≠ diverged</b> rank {e.rank} reads {", ".join(red)} that differ from rank '
                  f"{owner}'s")
    if note:
        io.append(f"<i>{escape(note)}</i>")
    return io


def rank_views_html(trace: Trace, event_index: int, *, reference: Trace | None = None, frame: int | None = None,
                    css: bool = True, note: str = "") -> str:
    """Every rank's view at ``event_index`` side by side, divergent fields highlighted, the event header
    (step, rank, phase, reads / sent / received), a small diagram, and the output text so far vs ``reference``."""
    if not 0 <= event_index < len(trace.events):
        raise ValueError(f"event_index={event_index} is outside the trace's events 0..{len(trace.events) - 1}")
    e, owner = trace.events[event_index], trace.owner_rank
    fid = f"xp-pp-frame-{frame}" if frame is not None else f"xp-pp-event-{event_index}"
    red = diverged_fields(trace, event_index)
    stale, amber_all = {}, set()
    cols = [_rank_column(e, r, owner, red, stale, amber_all, fid) for r in sorted(e.views)]
    who = "engine" if e.rank is None else f"rank {e.rank}"
    head = (f"{'warmup ' if e.warmup else ''}engine step {e.step} · {who} · {e.phase}"
            f" <span style='font-weight:400'>(event {event_index})</span>")
    io = _event_io(trace, event_index, red, note)
    body = (f'<div class="xp-pp" id="{fid}" data-event="{event_index}" data-step="{e.step}" '
            f'data-rank="{"" if e.rank is None else e.rank}" data-phase="{e.phase}" data-diverged="{",".join(red)}" '
            f'data-stale="{",".join(f for f in VIEW_ROWS if f in amber_all)}">'
            f'<div class="xp-head" id="{fid}-head">{head}</div>'
            + "".join(f'<div class="xp-io">{x}</div>' for x in io)
            # the output text before the rank columns: on a narrow page they wrap, and a commit is what it shows
            + _texts(trace, event_index, reference)
            + _flow(trace, event_index, stale) + f'<div class="xp-cols">{"".join(cols)}</div>'
            + LEGEND.format(fid=fid) + "</div>")
    return (CSS if css else "") + body


def event_dot(trace: Trace, event_index: int) -> str:
    """DOT of one event: ranks as nodes, its transfers as edges, stale read state in red."""
    e, pp, owner = trace.events[event_index], int(trace.meta.get("pp_size", 1)), trace.owner_rank
    out = ["digraph pp_event {", "  rankdir=LR;",
           '  graph [fontname="Helvetica", fontsize=11, label='
           + quote(f"{'warmup ' if e.warmup else ''}engine step {e.step}, "
                      f"{'engine' if e.rank is None else 'rank ' + str(e.rank)}, {e.phase}\n"
                      "legend: STALE = state differs from the owner; ✗ = error; thick outline = acting rank; "
                      "edge = tensors of this event") + "];",
           '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica", fontsize=10];',
           '  edge [fontname="Helvetica", fontsize=9];']
    red = set(diverged_fields(trace, event_index))
    for r in range(pp):
        mine, theirs = e.views.get(r, {}), e.views.get(owner, {})
        lines = [f"rank {r}" + (" (owner)" if r == owner else "")]
        bad = []
        for rid, v in sorted(mine.items()):
            for f in STATE_FIELDS:
                if r != owner and v.get(f) != theirs.get(rid, {}).get(f):
                    label = f"{f}{' (read here)' if f in red and r == e.rank else ''}"
                    bad += [label] if label not in bad else []
        if e.rank == r and e.data.get("error"):
            lines.append(f"✗ {e.data['error']['type']}")
        attrs = 'color="#D55E00", fontcolor="#B54D00"' if bad or (e.rank == r and e.data.get("error")) else ""
        if e.rank == r:
            attrs += (", " if attrs else "") + 'penwidth=2, fillcolor="#e3f2fd"'
        label = "\n".join(lines + (["STALE: " + ", ".join(bad)] if bad else []))
        out.append(f"  rank{r} [label={quote(label)}{', ' + attrs if attrs else ''}];")
    for t in e.transfers or received(trace, event_index):
        out.append(f"  rank{t.sender} -> rank{t.receiver} [label={quote(_tensor(t))}"
                   + (', color="#0072B2"' if t.op == "broadcast" else "") + "];")
    out.append("}")
    return "\n".join(out) + "\n"
