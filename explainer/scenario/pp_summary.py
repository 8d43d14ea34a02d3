"""The readable per-rank summary of a PP scenario (what ``python -m explainer scenario NAME`` prints without
``--json``): outcome, error, the text beside PP=1's, the first divergence, what each rank saw, bytes per step."""

from __future__ import annotations

from explainer.scenario.result import ScenarioResult
from explainer.trace import Trace


def summarize(res: ScenarioResult) -> str:
    t, d = res.trace, res.details
    mode = d.get("pp_mode") or t.meta.get("pp_mode", "")
    lines = [f"{res.scenario}: model {t.meta.get('model', '-')}, PP={res.pp_size}"
             + (f" ({mode})" if mode else "") + f", backend {res.backend} -> outcome: {res.outcome}"]
    if res.error:
        lines.append(f"  error: {res.error['type']}: {res.error['message']}")
    if res.outcome == "warmup-crash":
        lines.append("  (the toy's crash. vLLM's own PP crash, issue #45719, is this assert by inference from vLLM's "
                     "code: no traceback of it was found)")
    if res.outcome == "startup-rejected":
        lines.append(f"  rejected by the startup check (EngineConfig.__post_init__) in {d['startup_check_ms']} ms: "
                     f"no rank, runner, group or process was created")
        wg = d.get("without_gate") or {}
        if wg.get("rank") is not None:
            lines.append(f"  without the gate: rank {wg['rank']} would fail in {wg['phase']}: "
                         f"{wg['type']}: {wg['message']}")
    for r in d.get("ranks", []):
        lines.append(f"  rank {r['rank']} stopped in {r['phase']}: {r['type']}: {r['message']}")
    if res.output_text is not None:
        lines.append(f"  prompt {t.meta.get('prompt')!r} -> {res.output_text!r}"
                     + (f"   (PP=1: {d['pp1_text']!r})" if "pp1_text" in d else ""))
    div = res.first_divergence
    if div:
        vals = ", ".join(f"{f} (rank {div['rank']}: {v['rank']}, owner: {v['owner']})"
                         for f, v in div["values"].items())
        lines.append(f"  first divergence: engine step {div['step']}, rank {div['rank']} {div['phase']} reads {vals}")
    if d.get("output_divergence_step") is not None:
        lines.append(f"  output tokens first differ from PP=1 at engine step {d['output_divergence_step']}")
    for rank, (start, end) in sorted(t.meta.get("layers", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"  rank {rank} (layers {start}..{end - 1}"
                     + (", sampler" if int(rank) == res.pp_size - 1 else "") + "): " + _rank_story(t, int(rank)))
    if res.bytes_per_step:
        lines.append("  bytes per step: " + ", ".join(f"{k} {v}" for k, v in sorted(res.bytes_per_step.items())))
    return "\n".join(lines)


def _rank_story(trace: Trace, rank: int) -> str:
    reads = [e for e in trace.select(rank=rank, phase="prepare")]
    if not reads:
        return "no user step run" + (" (stopped in warmup)" if trace.select(rank=rank, warmup=True) else "")
    causal = sum(v["is_encoder_phase"] for e in reads for v in _batch_views(e))
    sc = sum(v["self_conditioning_embeds"] > 0 for e in reads for v in _batch_views(e))
    total = sum(len(e.reads) for e in reads)
    return (f"{len(reads)} steps; saw is_encoder_phase=True (causal) in {causal}/{total} request-steps, "
            f"non-zero self-conditioning in {sc}")


def _batch_views(e):
    view = e.views.get(e.rank, {})
    return [view[r] for r in e.reads if r in view]
