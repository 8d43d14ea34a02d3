"""``stages_dot``: the PP stages and what really crossed between them (forward ``IntermediateTensors``, the
back-channel broadcast), plus, dashed and marked ✗, the state a non-last rank reads but no transfer carried.
Read from a run's trace, or drawn from an ``EngineConfig`` before anything runs (symbolic shapes, no bytes)."""

from __future__ import annotations

from typing import Mapping

from explainer.model.stages import get_pp_indices
from explainer.render.dot import quote
from explainer.render.pp_style import FIELD_SHAPE, READER, STATE_FIELDS
from explainer.render.pp_trace import crossing, never_sent, reads_by_rank
from explainer.trace import Trace
from explainer.vocab import STATE_SYNC_FIELDS

__all__ = ["stages_dot"]


def _label(name: str, c: Mapping) -> str:
    return f"{name}\n  {c['dtype']} {c['shape']}  {c['bytes']:,} B/step"        # two short lines: fits 1000 px


def _plan(source):
    """(pp, layers, crossing, never sent, reads per rank, mode, title) of a run's trace or of a config."""
    trace = getattr(source, "trace", source)
    if isinstance(trace, Trace):
        pp = int(trace.meta.get("pp_size", 1))
        layers = {int(r): tuple(v) for r, v in trace.meta.get("layers", {}).items()}
        return (pp, layers, crossing(trace), never_sent(trace), reads_by_rank(trace), trace.meta.get("pp_mode", ""),
                trace.meta.get("scenario", "run"))
    pp, mode = source.pipeline_parallel_size, source.pp_mode       # an EngineConfig: the plan, not a run
    layers = {r: get_pp_indices(source.num_hidden_layers, r, pp) for r in range(pp)}
    sym = {"hidden_states": "float32 [1, T, H]", "residual": "float32 [1, T, H]",
           "sampled_token_ids": "int64 [n, CL+1]", "num_sampled_num_rejected": "int32 [2, n]"}
    if mode == "state-sync":
        sym.update({f: FIELD_SHAPE[f] for f in STATE_SYNC_FIELDS})
    cross = {k: {"symbolic": v, "op": "send" if k in ("hidden_states", "residual", "self_conditioning_embeds")
                 else "broadcast"} for k, v in sym.items()} if pp > 1 else {}
    missing = [] if mode == "state-sync" or pp == 1 else list(STATE_FIELDS)
    reads = {0: set(STATE_FIELDS), **{r: {"is_encoder_phase"} for r in range(1, pp)}}
    return pp, layers, cross, missing, reads, mode, f"config: PP={pp} ({mode}), not run"


def _rank_cluster(r: int, pp: int, layers: dict, reads: dict, fields: bool) -> list[str]:
    """One rank as a cluster: its stage's boxes in order, its copy of the state, the fields it reads (written in the
    box, "reads draft_tokens", never on the dotted edge: graphviz may place an edge label across the outline)."""
    last = pp - 1
    start, end = layers.get(r, (0, 0))
    role = ("first + last rank" if pp == 1 else "first rank" if r == 0 else "last rank" if r == last else "rank")
    boxes = ({f"r{r}_embed": "embed_input_ids\n(x sqrt(H))", f"r{r}_sc": "self-conditioning MLP"} if r == 0 else {})
    boxes[f"r{r}_layers"] = f"layers {start}..{end - 1}"
    chain = list(boxes) + ([f"r{r}_head", f"r{r}_sampler"] if r == last else [])
    reader = {f: (f"r{r}_{READER[f]}" if f"r{r}_{READER[f]}" in boxes else f"r{r}_layers") for f in sorted(reads.get(r, ()))}
    for f, node in reader.items():
        boxes[node] += f"\nreads {f}" if fields else "" if "reads" in boxes[node] else "\nreads the state"
    out = [f"  subgraph cluster_rank{r} {{", f'    label={quote(f"rank {r} ({role})")}; style=rounded;']
    out += [f"    {node} [label={quote(label)}];" for node, label in boxes.items()]
    if r == last:
        out += [f'    r{r}_head [label="norm + tied head\\n(softcap logits)"];',
                f'    r{r}_sampler [label="DiffusionSampler\\n(advances the state)", fillcolor="#e3f2fd"];']
    held = "is_encoder_phase, self_conditioning_embeds,\ndraft_tokens (RequestState)" if fields else "the per-request state"
    label = quote(f"DiffusionGemmaRequestStates ({'owner' if r == last else 'copy'})\n{held}")
    out.append(f'    r{r}_state [shape=cylinder, fillcolor="#ede7f6", label={label}];')
    out.append("  }")
    out += [f"  {a} -> {b};" for a, b in zip(chain, chain[1:])]
    out += [f'  r{r}_state -> {node} [style=dotted, color="#CC79A7"];' for node in dict.fromkeys(reader.values())]
    return out


def _crossings(pp: int, cross: dict, missing: list, reads: dict, lab, fields: bool) -> list[str]:
    """What crossed (forward, back-channel, state sync) and what a rank reads that nothing carried."""
    last, out = pp - 1, []
    for r in range(last):                                           # forward: IntermediateTensors
        names = [n for n in ("hidden_states", "residual") if n in cross]
        if names:
            out.append(f"  r{r}_layers -> r{r + 1}_layers [penwidth=2, label="
                       + quote("IntermediateTensors\n" + "\n".join(lab(n) for n in names)) + "];")
    back = [n for n in ("sampled_token_ids", "num_sampled_num_rejected") if n in cross]
    for r in range(last):
        if back:
            out.append(f'  r{last}_sampler -> r{r}_state [penwidth=2, color="#0072B2", label='
                       + quote("back-channel broadcast\n" + "\n".join(lab(n) for n in back)) + "];")
        wanted = [f for f in STATE_FIELDS if f in reads.get(r, ())]
        stale = [f for f in wanted if f in missing]
        synced = [f for f in wanted if f not in missing and f in cross
                  and (cross[f].get("receiver", r) == r or cross[f]["op"] == "broadcast")]
        if stale:          # read on this rank, carried by no transfer of the run
            out.append(f'  r{last}_state -> r{r}_state [style=dashed, penwidth=2, color="#D55E00", fontcolor="#B54D00", '
                       "label=" + quote(f"✗ never sent (STALE on rank {r}):\n" + ("\n".join(f"{f}  {FIELD_SHAPE[f]}" for f in stale)
                                                                                   if fields else f"the state rank {r} reads")) + "];")
        if synced:
            out.append(f'  r{last}_state -> r{r}_state [penwidth=2, color="#009E73", fontcolor="#00704f", label='
                       + quote("✓ state sync (#52015):\n" + "\n".join(lab(f) for f in synced)) + "];")
    return out


def stages_dot(source, fields: bool = True) -> str:
    """DOT source of the PP stages and what crosses them. ``source``: a Trace, a ScenarioResult, or an EngineConfig
    (then nothing was run: shapes are symbolic and no bytes are shown). ``fields=False``: which fields a box reads
    and which were never sent go unnamed (notebook 2 before its workshop stop: they are ``sync-fields``' answer)."""
    pp, layers, cross, missing, reads, mode, title = _plan(source)
    last = pp - 1
    lab = (lambda n: f"{n}  {cross[n]['symbolic']}") if cross and "symbolic" in next(iter(cross.values())) \
        else (lambda n: _label(n, cross[n]))
    out = ["digraph pp_stages {", "  rankdir=TB; compound=true; newrank=true;",
           '  graph [fontname="Helvetica", fontsize=11, label=' + quote(f"{title}: PP={pp}"
                                                                       + (f", {mode}" if pp > 1 else "")) + "];",
           '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica", fontsize=10];',
           '  edge [fontname="Helvetica", fontsize=9];']
    for r in range(pp):
        out += _rank_cluster(r, pp, layers, reads, fields)
    out.append(f'  r{last}_sampler -> r{last}_state [color="#0072B2", label="writes every step"];')
    out += _crossings(pp, cross, missing, reads, lab, fields)
    keys = ["legend", "dotted: a box reads its rank's", "  own copy of the state",
            "'writes every step': the sampler"]
    if pp > 1:
        keys += ["thick 'IntermediateTensors': forward", "thick 'back-channel broadcast'", "dashed ✗: read, not carried (STALE)",
                 "thick ✓: sent by state sync"]
    out.append('  legend [shape=note, fillcolor="#fffde7", label=' + quote("\n".join(keys)) + "];")
    out.append("  { rank=sink; legend; }")
    out.append("}")
    return "\n".join(out) + "\n"
