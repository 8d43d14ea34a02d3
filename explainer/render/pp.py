"""Pipeline-parallel runs -> DOT source and HTML strings (pure; everything is read from a ``Trace``).

* ``stages_dot``: the PP stages and what really crossed between them (forward ``IntermediateTensors``,
  the back-channel broadcast), plus, dashed and marked ✗, the state a non-last rank reads but no transfer carried.
* ``rank_views_html``: every rank's view side by side at one event. A field is ``xp-diverged`` (badge
  "≠ READ", solid outline) when this event reads it on a non-owner rank and its value differs from the
  owner's (the definition of ``Trace.divergences``), ``xp-stale`` (badge "STALE", dashed) when it differs but
  is not read here. Colours are Okabe-Ito and never the only cue.
* ``event_dot``: one event as a small graph.
* ``key_events`` / ``frame_caption`` (``render_pp_frames``): the events worth a frame, and what each shows.
* ``bytes_table_html`` / ``accuracy_table_html`` (``render_pp_tables``).
"""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import Mapping

from explainer.model import task
from explainer.render.canvas import Glyphs
from explainer.trace import Trace

__all__ = ["CSS", "crossing", "never_sent", "stages_dot", "diverged_fields", "rank_views_html", "event_dot",
           "key_events", "frame_caption", "bytes_table_html", "accuracy_table_html", "sc_bytes"]

STATE_FIELDS = ("is_encoder_phase", "self_conditioning_embeds", "draft_tokens")   # what non-last ranks read
VIEW_ROWS = ("canvas", "draft_tokens", "is_encoder_phase", "self_conditioning_embeds", "step", "num_computed_tokens")
READER = {"draft_tokens": "embed", "self_conditioning_embeds": "sc", "is_encoder_phase": "layers"}
FIELD_SHAPE = {"is_encoder_phase": "bool [n]", "self_conditioning_embeds": "float32 [n, CL, H]",
               "draft_tokens": "int64 [n, CL]"}
GLYPHS = Glyphs(task.VOCAB, task.PAD_ID, task.EOS_ID)

CSS = """<style>
.xp-pp{font:13px/1.35 system-ui,sans-serif;color:#222;max-width:900px}
.xp-pp .xp-head{font-weight:600;margin:2px 0 4px}
.xp-pp .xp-io{margin:2px 0;color:#333}.xp-pp .xp-io b{color:#555;font-weight:600}
.xp-pp .xp-cols{display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start;margin:4px 0}
.xp-pp .xp-rank{border:1px solid #bbb;border-radius:4px;padding:4px 6px;background:#fff}
.xp-pp .xp-rank.xp-acting{border:3px solid #0072B2}
.xp-pp .xp-rank h4{margin:0 0 3px;font-size:13px}
.xp-pp table.xp-view{border-collapse:collapse}
.xp-pp table.xp-view th{text-align:right;font-weight:400;color:#555;padding:1px 6px 1px 0;white-space:nowrap}
.xp-pp table.xp-view td{padding:1px 4px;border-radius:3px;white-space:nowrap}
.xp-pp table.xp-view td.xp-aside{white-space:normal;min-width:14em;max-width:22em}
.xp-pp .xp-diverged{background:#fbe3d2;outline:3px solid #D55E00;color:#7a3600;font-weight:600}
.xp-pp .xp-stale{background:#fdf0d0;outline:2px dashed #E69F00}
.xp-pp .xp-badge{font:700 10px/1 system-ui,sans-serif;padding:1px 3px;border-radius:2px;margin-right:3px;
 background:#fff;border:1px solid currentColor;white-space:nowrap}
.xp-pp .xp-aside{font-size:11px;color:#666;font-style:italic;white-space:normal}
.xp-pp span.xp-aside{display:block;max-width:16em}
.xp-pp .xp-tok{display:inline-block;min-width:1.1em;text-align:center;font:13px/1.2 ui-monospace,monospace;
 border:1px solid #ccc;border-radius:2px;margin:0 1px;background:#fafafa}
.xp-pp .xp-flow{display:flex;align-items:center;gap:6px;margin:6px 0;font-size:12px}
.xp-pp .xp-node{border:1px solid #999;border-radius:4px;padding:3px 6px;background:#f5f5f5;min-width:9em}
.xp-pp .xp-node.xp-acting{border:3px solid #0072B2;background:#e1eef8}
.xp-pp .xp-arrow{flex:1;text-align:center;color:#0072B2;border-bottom:2px solid #0072B2;padding:0 4px 2px}
.xp-pp .xp-arrow.xp-none{color:#888;border-bottom:1px dotted #bbb}
.xp-pp .xp-arrow.xp-err,.xp-pp .xp-red{color:#B54D00;border-color:#D55E00}
.xp-pp .xp-text{font:13px ui-monospace,monospace;background:#f8f8f8;padding:1px 4px}
.xp-pp .xp-text .xp-bad{background:#fbe3d2;color:#7a3600;text-decoration:underline wavy #D55E00}
.xp-pp .xp-legend{font-size:12px;color:#555;margin-top:6px}
.xp-pp table.xp-tbl{border-collapse:collapse;margin:4px 0}
.xp-pp table.xp-tbl td,.xp-pp table.xp-tbl th{border:1px solid #ddd;padding:2px 8px;text-align:right}
.xp-pp table.xp-tbl td:first-child,.xp-pp table.xp-tbl th:first-child{text-align:left}
</style>"""


# ---- what crossed, derived from the trace ------------------------------------------------------------
def _user_events(trace: Trace) -> list:
    events = [e for e in trace.events if e.rank is not None and not e.warmup]
    return events or [e for e in trace.events if e.rank is not None]       # a warmup crash: warmup only


def crossing(trace: Trace) -> dict[str, dict]:
    """Per tensor name that crossed ranks: dtype, the most common shape, sender/receiver, op, bytes per step."""
    events = _user_events(trace)
    warm = bool(events) and all(e.warmup for e in events)
    per_step = trace.bytes_per_step(include_warmup=warm)
    seen: dict[str, list] = {}
    for e in events:
        for t in e.transfers:
            seen.setdefault(t.name, []).append(t)
    out = {}
    for name, ts in seen.items():
        shape = Counter(tuple(t.shape) for t in ts).most_common(1)[0][0]
        t = ts[0]
        out[name] = {"dtype": t.dtype, "shape": list(shape), "op": t.op, "sender": t.sender, "receiver": t.receiver,
                     "bytes": per_step.get(name, 0)}
    return out


def _reads(trace: Trace) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for e in _user_events(trace):
        for fields in e.reads.values():
            out.setdefault(e.rank, set()).update(fields)
    return out


def never_sent(trace: Trace) -> list[str]:
    """State that a non-owner rank reads but that no transfer of the run carried."""
    owner, sent = trace.owner_rank, set(crossing(trace))
    read = set().union(*[f for r, f in _reads(trace).items() if r != owner] or [set()])
    return [f for f in STATE_FIELDS if f in read and f not in sent]


def _label(name: str, c: Mapping) -> str:
    return f"{name}\n  {c['dtype']} {c['shape']}  {c['bytes']:,} B/step"        # two short lines: fits 1000 px


def _dot_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def stages_dot(source) -> str:
    """DOT source of the PP stages and what crosses them. ``source``: a Trace, a ScenarioResult, or an
    EngineConfig (then nothing was run: shapes are symbolic and no bytes are shown)."""
    trace = getattr(source, "trace", source)
    if isinstance(trace, Trace):
        pp = int(trace.meta.get("pp_size", 1))
        layers = {int(r): tuple(v) for r, v in trace.meta.get("layers", {}).items()}
        cross, missing, reads = crossing(trace), never_sent(trace), _reads(trace)
        mode, title = trace.meta.get("pp_mode", ""), trace.meta.get("scenario", "run")
    else:                                                         # an EngineConfig: the plan, not a run
        from explainer.model.stages import get_pp_indices
        from explainer.vocab import STATE_SYNC_FIELDS
        pp, mode = source.pipeline_parallel_size, source.pp_mode
        layers = {r: get_pp_indices(source.num_hidden_layers, r, pp) for r in range(pp)}
        sym = {"hidden_states": "float32 [1, T, H]", "residual": "float32 [1, T, H]",
               "sampled_token_ids": "int64 [n, CL+1]", "num_sampled_num_rejected": "int32 [2, n]"}
        if mode == "state-sync":
            sym.update({f: FIELD_SHAPE[f] for f in STATE_SYNC_FIELDS})
        cross = {k: {"symbolic": v, "op": "send" if k in ("hidden_states", "residual", "self_conditioning_embeds")
                     else "broadcast"} for k, v in sym.items()} if pp > 1 else {}
        missing = [] if mode == "state-sync" or pp == 1 else list(STATE_FIELDS)
        reads = {0: set(STATE_FIELDS), **{r: {"is_encoder_phase"} for r in range(1, pp)}}
        title = f"config: PP={pp} ({mode}), not run"
    last = pp - 1
    lab = (lambda n: f"{n}  {cross[n]['symbolic']}") if cross and "symbolic" in next(iter(cross.values())) \
        else (lambda n: _label(n, cross[n]))
    out = ["digraph pp_stages {", "  rankdir=TB; compound=true; newrank=true;",
           '  graph [fontname="Helvetica", fontsize=11, label=' + _dot_str(f"{title}: PP={pp}"
                                                                          + (f", {mode}" if pp > 1 else "")) + "];",
           '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica", fontsize=10];',
           '  edge [fontname="Helvetica", fontsize=9];']
    for r in range(pp):
        start, end = layers.get(r, (0, 0))
        role = ("first + last rank" if pp == 1 else "first rank" if r == 0 else "last rank" if r == last else "rank")
        out += [f"  subgraph cluster_rank{r} {{", f'    label={_dot_str(f"rank {r} ({role})")}; style=rounded;']
        if r == 0:
            out += [f'    r{r}_embed [label="embed_input_ids\\n(x sqrt(H))"];',
                    f'    r{r}_sc [label="self-conditioning MLP"];']
        out.append(f'    r{r}_layers [label={_dot_str(f"layers {start}..{end - 1}")}];')
        if r == last:
            out += [f'    r{r}_head [label="norm + tied head\\n(softcap logits)"];',
                    f'    r{r}_sampler [label="DiffusionSampler\\n(only writer of the state)", fillcolor="#e3f2fd"];']
        owner = " (owner)" if r == last else " (copy)"
        out.append(f'    r{r}_state [shape=cylinder, fillcolor="#ede7f6", label='
                   + _dot_str(f"DiffusionGemmaRequestStates{owner}\nis_encoder_phase, self_conditioning_embeds,"
                              "\ndraft_tokens (RequestState)") + "];")
        out.append("  }")
        chain = ([f"r{r}_embed", f"r{r}_sc"] if r == 0 else []) + [f"r{r}_layers"] + (
            [f"r{r}_head", f"r{r}_sampler"] if r == last else [])
        out += [f"  {a} -> {b};" for a, b in zip(chain, chain[1:])]
        for f in sorted(reads.get(r, ())):
            target = f"r{r}_{READER[f]}" if f"r{r}_{READER[f]}" in chain else f"r{r}_layers"
            out.append(f'  r{r}_state -> {target} [style=dotted, color="#CC79A7", label={_dot_str("reads " + f)}];')
    out.append(f'  r{last}_sampler -> r{last}_state [color="#0072B2", label="writes every step"];')
    for r in range(last):                                           # forward: IntermediateTensors
        names = [n for n in ("hidden_states", "residual") if n in cross]
        if names:
            out.append(f"  r{r}_layers -> r{r + 1}_layers [penwidth=2, label="
                       + _dot_str("IntermediateTensors\n" + "\n".join(lab(n) for n in names)) + "];")
    back = [n for n in ("sampled_token_ids", "num_sampled_num_rejected") if n in cross]
    for r in range(last):
        if back:
            out.append(f'  r{last}_sampler -> r{r}_state [penwidth=2, color="#0072B2", label='
                       + _dot_str("back-channel broadcast\n" + "\n".join(lab(n) for n in back)) + "];")
        wanted = [f for f in STATE_FIELDS if f in reads.get(r, ())]
        stale = [f for f in wanted if f in missing]
        synced = [f for f in wanted if f not in missing and f in cross
                  and (cross[f].get("receiver", r) == r or cross[f]["op"] == "broadcast")]
        if stale:          # read on this rank, carried by no transfer of the run
            out.append(f'  r{last}_state -> r{r}_state [style=dashed, penwidth=2, color="#D55E00", fontcolor="#B54D00", '
                       "label=" + _dot_str("✗ never sent (STALE on rank %d):\n" % r
                                           + "\n".join(f"{f}  {FIELD_SHAPE[f]}" for f in stale)) + "];")
        if synced:
            out.append(f'  r{last}_state -> r{r}_state [penwidth=2, color="#009E73", fontcolor="#00704f", label='
                       + _dot_str("✓ state sync (#52015):\n" + "\n".join(lab(f) for f in synced)) + "];")
    keys = ["legend", "dotted 'reads': a rank reads its", "  own copy of the state",
            "'writes every step': the sampler"]
    if pp > 1:
        keys += ["thick 'IntermediateTensors': forward", "thick 'back-channel broadcast'", "dashed ✗: read, not carried (STALE)",
                 "thick ✓: sent by state sync"]
    out.append('  legend [shape=note, fillcolor="#fffde7", label=' + _dot_str("\n".join(keys)) + "];")
    out.append("  { rank=sink; legend; }")
    out.append("}")
    return "\n".join(out) + "\n"


# ---- one event ----------------------------------------------------------------------------------------
def _divergent(trace: Trace) -> dict[int, list[dict]]:
    """Event index -> divergences at it (cached on the trace: frames ask for it many times)."""
    cache = getattr(trace, "_xp_divergent", None)
    if cache is None or cache[0] != len(trace.events):
        by_event: dict[int, list[dict]] = {}
        for d in trace.divergences():                 # user steps, as ``first_divergence``
            by_event.setdefault(d["event"], []).append(d)
        cache = (len(trace.events), by_event)
        trace._xp_divergent = cache
    return cache[1]


def diverged_fields(trace: Trace, event_index: int) -> list[str]:
    """Fields read at this event by a non-owner rank whose value differs from the owner's (view order)."""
    found = [f for d in _divergent(trace).get(event_index, []) for f in d["fields"]]
    return list(dict.fromkeys(found))         # the order ``Trace.divergences`` reports them in


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


def _received(trace: Trace, i: int) -> list:
    """Transfers that reached the acting rank of event ``i`` (recorded on the sender's earlier event)."""
    e = trace.events[i]
    if e.phase not in ("recv", "receive"):
        return []
    for prev in reversed(trace.events[:i]):
        if (prev.step, prev.warmup) != (e.step, e.warmup):
            break
        got = [t for t in prev.transfers if t.receiver == e.rank]
        if got:
            return got
    return []


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
    return '<div class="xp-io" data-role="text">' + "<br>".join(rows) + "</div>"


def _flow(trace: Trace, i: int, stale: dict[int, list[str]]) -> str:
    """The event as a small HTML diagram: ranks as boxes, the transfer as an arrow, stale state in red."""
    e, pp = trace.events[i], int(trace.meta.get("pp_size", 1))
    layers = trace.meta.get("layers", {})
    moved = e.transfers or _received(trace, i)
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


LEGEND = ('<div class="xp-legend" id="{fid}-legend"><b>legend</b> '
          '<span class="xp-diverged"><span class="xp-badge">≠ READ</span>solid outline</span> read by this rank in '
          'this event and different from the owner (last rank, where the sampler writes the state): a divergence · '
          '<span class="xp-stale"><span class="xp-badge">STALE</span>dashed outline</span> state this rank reads when '
          'it prepares a step, different from the owner\'s, not read in this event · canvas and step are the '
          'sampler\'s own bookkeeping, never read by other ranks, so never marked (a differing canvas says so) · '
          'thick box, ▶ acting = the rank acting in this event · arrow = tensors that crossed ranks · '
          'wavy underline = output characters that differ from PP=1 · '
          '<span class="xp-text">␣</span> space, · pad, ⏎ end of text · ‖·‖ = L2 norm of the SC embeddings</div>')


def rank_views_html(trace: Trace, event_index: int, *, reference: Trace | None = None, frame: int | None = None,
                    css: bool = True, note: str = "") -> str:
    """Every rank's view at ``event_index`` side by side, divergent fields highlighted, the event header
    (step, rank, phase, reads / sent / received), a small diagram, and the output text so far vs ``reference``."""
    if not 0 <= event_index < len(trace.events):
        raise ValueError(f"event_index={event_index} is outside the trace's events 0..{len(trace.events) - 1}")
    e, owner = trace.events[event_index], trace.owner_rank
    fid = f"xp-pp-frame-{frame}" if frame is not None else f"xp-pp-event-{event_index}"
    red = diverged_fields(trace, event_index)
    owner_view = e.views.get(owner, {})
    cols, stale, amber_all = [], {}, set()
    for r in sorted(e.views):
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
                rows.append(f'<tr><th>{name}</th><td class="{cls}" data-field="{name}">{badge}'
                            f"{_value(name, view.get(name))}{aside}</td></tr>")
        role = (" (owner: sampler)" if r == owner else "") + (" ▶ acting" if r == e.rank else "")
        cols.append(f'<div class="xp-rank{" xp-acting" if r == e.rank else ""}" data-rank="{r}" '
                    f'id="{fid}-rank{r}"><h4>rank {r}{role}</h4><table class="xp-view">{"".join(rows)}</table></div>')
    who = "engine" if e.rank is None else f"rank {e.rank}"
    head = (f"{'warmup ' if e.warmup else ''}engine step {e.step} · {who} · {e.phase}"
            f" <span style='font-weight:400'>(event {event_index})</span>")
    io = [f"<b>what</b> {escape(e.detail)}"]
    if e.reads:
        io.append("<b>reads</b> " + "; ".join(f"{escape(q)}: {', '.join(fs)}" for q, fs in e.reads.items()))
    if e.transfers:
        io.append("<b>sends</b> " + "; ".join(f"{_tensor(t)} → rank {t.receiver} ({t.op})" for t in e.transfers))
    got = _received(trace, event_index)
    if got:
        io.append("<b>receives</b> " + "; ".join(f"{_tensor(t)} ← rank {t.sender}" for t in got))
    if e.data.get("error"):
        io.append(f'<b class="xp-red">✗ error</b> {escape(e.data["error"]["type"])}: {escape(e.data["error"]["message"])}')
    if red:
        io.append(f'<b class="xp-red">≠ diverged</b> rank {e.rank} reads {", ".join(red)} that differ from rank '
                  f"{owner}'s")
    if note:
        io.append(f"<i>{escape(note)}</i>")
    body = (f'<div class="xp-pp" id="{fid}" data-event="{event_index}" data-step="{e.step}" '
            f'data-rank="{"" if e.rank is None else e.rank}" data-phase="{e.phase}" data-diverged="{",".join(red)}" '
            f'data-stale="{",".join(f for f in VIEW_ROWS if f in amber_all)}">'
            f'<div class="xp-head" id="{fid}-head">{head}</div>'
            + "".join(f'<div class="xp-io">{x}</div>' for x in io)
            + _flow(trace, event_index, stale) + f'<div class="xp-cols">{"".join(cols)}</div>'
            + _texts(trace, event_index, reference) + LEGEND.format(fid=fid) + "</div>")
    return (CSS if css else "") + body


def event_dot(trace: Trace, event_index: int) -> str:
    """DOT of one event: ranks as nodes, its transfers as edges, stale read state in red."""
    e, pp, owner = trace.events[event_index], int(trace.meta.get("pp_size", 1)), trace.owner_rank
    out = ["digraph pp_event {", "  rankdir=LR;",
           '  graph [fontname="Helvetica", fontsize=11, label='
           + _dot_str(f"{'warmup ' if e.warmup else ''}engine step {e.step}, "
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
        out.append(f"  rank{r} [label={_dot_str(label)}{', ' + attrs if attrs else ''}];")
    for t in e.transfers or _received(trace, event_index):
        out.append(f"  rank{t.sender} -> rank{t.receiver} [label={_dot_str(_tensor(t))}"
                   + (', color="#0072B2"' if t.op == "broadcast" else "") + "];")
    out.append("}")
    return "\n".join(out) + "\n"


# ---- captions, frame selection and tables live in their own modules (re-exported: one public face) ----
from explainer.render.pp_frames import frame_caption, key_events  # noqa: E402,F401  (they import the above)
from explainer.render.pp_tables import accuracy_table_html, bytes_table_html, sc_bytes  # noqa: E402,F401
