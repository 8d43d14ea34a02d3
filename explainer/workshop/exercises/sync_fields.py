"""Exercise ``sync-fields``: the learner's ``fields_to_sync() -> set[str]`` runs the real PP=2 engine.

The pre-#45828 model at PP=2 in ``state-sync`` mode syncs exactly the chosen fields
(``EngineConfig.sync_fields``) each step, on held-out prompts with their own seeds, batched as one engine
would serve them, next to PP=1 on the same prompts and seeds. Pass when no rank ever reads a state field
whose value differs from the owner's (the last rank, where the sampler writes it: ``Trace.divergences``)
and every prompt's tokens equal PP=1's. Reported too: the synced bytes per request per step and whether
the set is minimal (each chosen field removed in turn: does the check still pass?). The learner's function
is called once, in its jail (``answer``); its set comes back as a list of strings. The PP=1 tokens of the
held-out prompts are the reference, run once per grading session (``reference``).
"""

from __future__ import annotations

import functools

from explainer.model import task
from explainer.engine.llm_engine import LLMEngine
from explainer.model.registry import PRE_FIX_MODEL
from explainer.trace import Trace
from explainer.vocab import REQUEST_STATE_FIELDS, STATE_SYNC_FIELDS
from explainer.render.pp_views import rank_views_html
from explainer.workshop.catalog import About, Example
from explainer.workshop.progress import learner_phase
from explainer.workshop.report import Check, LearnerError, verdict

ABOUT = About(id="sync-fields", function="fields_to_sync", signature="fields_to_sync() -> set[str]",
              notebook="notebooks/workshop/exercises.ipynb", minutes=18, follows="02_pipeline_parallel",
              section="stale state on rank 0, state sync",
              summary="which per-request state fields the last PP rank must send each step; the real PP=2 engine vs "
                      "PP=1",
              checks=("no stale reads", "equal to PP=1", "minimal"))
PRELOAD = ()
ANSWER_WORDS = ("is_encoder_phase", "draft_tokens", "self_conditioning_embeds")


def _answer(fields: str) -> str:
    return f"def fields_to_sync():\n    return {fields}\n"


# name -> an answer and the words of the reason a wrong one must give
EXAMPLES = {
    "stub": Example(_answer("set()"), ("rank 0 reads", "is_encoder_phase", "draft_tokens", "prompt '", "engine step")),
    "solution": Example(_answer('{"draft_tokens", "is_encoder_phase", "self_conditioning_embeds"}')),
    "no_sc": Example(_answer('{"draft_tokens", "is_encoder_phase"}'),
                     ("rank 0 reads self_conditioning_embeds", "not synced: self_conditioning_embeds")),
    "canvas_not_drafts": Example(_answer('{"canvas", "is_encoder_phase", "self_conditioning_embeds"}'),
                                 ("rank 0 reads draft_tokens", "not synced: draft_tokens")),
    "no_phase": Example(_answer('{"draft_tokens", "self_conditioning_embeds"}'),
                        ("is_encoder_phase", "not synced: is_encoder_phase")),
    "not_minimal": Example(_answer('{"draft_tokens", "is_encoder_phase", "self_conditioning_embeds", "canvas", "step"}')),
}
SEED = 1000                                             # request i uses SEED + i (not the notebooks' seed 0)


def prompts() -> list[str]:
    """Five held-out numbers (never trained on), spread over the range."""
    held = task.held_out_numbers()
    return [str(held[i]) for i in (3, 27, 51, 75, 99)]


def _engine_run(fields, pp: int, texts: list[str], trace: Trace | None = None):
    trace = trace if trace is not None else Trace()
    kw = dict(pipeline_parallel_size=2, pp_mode="state-sync", sync_fields=tuple(fields)) if pp == 2 else {}
    engine = LLMEngine.from_engine_args(trace, model=PRE_FIX_MODEL, **kw)
    outs = engine.generate([task.encode(p) for p in texts], max_tokens=task.MAX_CANVASES * task.CANVAS_LENGTH,
                           seeds=[SEED + i for i in range(len(texts))])
    return [o.output_token_ids for o in outs], trace


def run_with_fields(fields, texts: list[str], reference: list[list[int]]) -> dict:
    """One PP=2 run syncing ``fields``: the first divergence, the first prompt whose tokens differ, bytes."""
    ids, trace = _engine_run(fields, 2, texts)
    div = trace.first_divergence()
    wrong = [i for i in range(len(texts)) if ids[i] != reference[i]]
    per_req = {}
    for e in trace.select(phase="broadcast"):
        for t in e.transfers:
            if t.name in fields and t.shape:
                per_req[t.name] = t.bytes // t.shape[0]
    return {"ids": ids, "trace": trace, "divergence": div, "wrong": wrong, "bytes": per_req,
            "ok": div is None and not wrong}


def still_passes(fields, texts: list[str], reference: list[list[int]]) -> bool:
    """The minimality probe: step the PP=2 engine and stop at the first stale read (most removals are
    caught within a few steps; a stale ``draft_tokens`` would otherwise run every canvas to 48 steps).
    A pure function of the fields on the held-out prompts: kept per set (``_probe``)."""
    if texts == prompts() and reference == [list(i) for i in _reference_ids()]:
        return _probe(tuple(sorted(fields)))
    return _still_passes(fields, texts, reference)


@functools.lru_cache(maxsize=64)
def _probe(fields: tuple[str, ...]) -> bool:
    return _still_passes(fields, prompts(), [list(i) for i in _reference_ids()])


def _still_passes(fields, texts: list[str], reference: list[list[int]]) -> bool:
    trace = Trace()
    engine = LLMEngine.from_engine_args(trace, model=PRE_FIX_MODEL, pipeline_parallel_size=2, pp_mode="state-sync",
                                        sync_fields=tuple(fields))
    ids = [engine.add_request(task.encode(p), task.MAX_CANVASES * task.CANVAS_LENGTH, seed=SEED + i)
           for i, p in enumerate(texts)]
    done = {}
    while engine.scheduler.has_unfinished_requests():
        done.update({o.req_id: o.output_token_ids for o in engine.step()})
        if trace.first_divergence() is not None:
            return False
    return [done[i] for i in ids] == reference


def _fields(learner, code) -> list[str]:
    """The learner's set, asked in the jail and validated here as plain data."""
    with learner_phase(f"calling {code.function}()"):
        got = learner.call(ABOUT.id, {}, f"{code.function}()")
    valid = REQUEST_STATE_FIELDS
    scalar, items = got.get("scalar"), got.get("items")
    if isinstance(scalar, dict) or not isinstance(items, list):
        shown = scalar if isinstance(scalar, dict) else {}
        raise LearnerError("bad-value", f"{code.function}() returned {str(shown.get('repr'))[:200]} "
                                        f"({str(shown.get('type'))[:40]}); expected a set of field names, "
                                        f"e.g. {{'canvas'}}; valid names: {', '.join(valid)}")
    bad = [repr(f) if isinstance(f, str) else str(f.get("repr") if isinstance(f, dict) else f)[:200]
           for f in items if not isinstance(f, str) or f not in valid]
    if bad:
        raise LearnerError("unknown-field", f"{code.function}() returned unknown field name(s) "
                                            f"{', '.join(bad)}; valid names: {', '.join(valid)}")
    return sorted(set(items))


@functools.lru_cache(maxsize=1)
def _reference_ids() -> tuple[tuple[int, ...], ...]:
    ids, _ = _engine_run((), 1, prompts())
    return tuple(tuple(i) for i in ids)


def reference() -> None:
    """PP=1's tokens for the held-out prompts, and the minimality probes of the fields vLLM syncs (#52015's
    three), each without one of them (once per grading session; a learner's other sets are probed live)."""
    _reference_ids()
    for f in STATE_SYNC_FIELDS:
        _probe(tuple(sorted(x for x in STATE_SYNC_FIELDS if x != f)))


def answer(fn, args: dict) -> dict:
    """Inside the jail: the learner's set, as a list of names (or what it returned instead of an iterable)."""
    got = fn()
    if isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
        return {"scalar": {"repr": repr(got)[:200], "type": type(got).__name__}}
    items = []
    for x in got:
        if len(items) >= 1000:
            break
        items.append(x if isinstance(x, str) and len(x) <= 200 else {"repr": repr(x)[:200]})
    return {"items": items}


def grade(learner, code):
    """The verdict: no stale read, PP=1's tokens, and (reported) whether the set is minimal."""
    fields = _fields(learner, code)
    texts = prompts()
    ref_ids = [list(i) for i in _reference_ids()]
    res = run_with_fields(fields, texts, ref_ids)
    checks, picture, figures = [], {}, {"fields": fields, "prompts": texts}
    div = res["divergence"]
    if div:
        p = int(div["request"].split("-")[-1])
        checks.append(Check("no stale reads", False, (
            f"prompt {texts[p]!r} (seed {SEED + p}), engine step {div['step']}: rank {div['rank']} reads "
            f"{', '.join(div['fields'])} that differ from rank 1's (the owner)"
            + _missing_hint(div["fields"], fields))))
        picture.update(_picture(fields, texts[p], SEED + p))
    else:
        checks.append(Check("no stale reads", True, f"no rank read a field that differs from the owner's "
                                                    f"({len(texts)} prompts)"))
    if res["wrong"]:
        i = res["wrong"][0]
        got, want = task.decode(res["ids"][i]), task.decode(ref_ids[i])
        checks.append(Check("equal to PP=1", False, f"prompt {texts[i]!r} (seed {SEED + i}): PP=2 wrote {got!r}, "
                                                    f"PP=1 {want!r}" + (f" ({len(res['wrong'])} of {len(texts)} "
                                                                       f"prompts differ)" if len(res['wrong']) > 1 else "")))
    else:
        checks.append(Check("equal to PP=1", True, f"{len(texts)} prompts token for token"))
    figures["synced bytes per request per step"] = sum(res["bytes"].values())
    figures["bytes per field"] = res["bytes"]
    if res["ok"]:
        needless = [f for f in fields if still_passes([x for x in fields if x != f], texts, ref_ids)]
        checks.append(Check("minimal", not needless, "yes: dropping any field breaks it" if not needless else
                            f"no: the check also passes without {', '.join(needless)} "
                            f"({sum(res['bytes'].get(f, 0) for f in needless)} bytes per request per step "
                            f"no rank needs)", required=False))
        figures["minimal"] = not needless
    return verdict(ABOUT.id, checks, figures=figures, picture=picture)


def _missing_hint(diverged: list[str], fields: list[str]) -> str:
    missing = [f for f in diverged if f not in fields]
    return f"; not synced: {', '.join(missing)}" if missing else ""


def _picture(fields, prompt: str, seed: int) -> dict:
    """A one-prompt run (same seed) for the panel: the rank views at its first divergence, next to PP=1."""
    trace = Trace(meta={"scenario": "sync-fields check", "prompt": prompt})
    ids, trace = _run_one(fields, 2, prompt, seed, trace)
    ref_ids, ref = _run_one((), 1, prompt, seed, Trace(meta={"prompt": prompt}))
    div = trace.first_divergence()
    return {"trace": trace.to_json(), "reference": ref.to_json(), "event": div["event"] if div else None,
            "prompt": prompt, "seed": seed, "text": task.decode(ids), "pp1_text": task.decode(ref_ids)}


def _run_one(fields, pp, prompt, seed, trace):
    kw = dict(pipeline_parallel_size=2, pp_mode="state-sync", sync_fields=tuple(fields)) if pp == 2 else {}
    engine = LLMEngine.from_engine_args(trace, model=PRE_FIX_MODEL, **kw)
    out = engine.generate([task.encode(prompt)], max_tokens=task.MAX_CANVASES * task.CANVAS_LENGTH, seeds=[seed])[0]
    return out.output_token_ids, trace



def picture(report) -> str:
    """The panel's picture of a failure: every rank's view at the first divergence
    (``render.pp_views.rank_views_html``), next to PP=1."""
    pic = report.picture
    if not pic.get("trace") or pic.get("event") is None:
        return ""
    trace, ref = Trace.from_json(pic["trace"]), Trace.from_json(pic["reference"])
    note = (f"prompt {pic['prompt']!r} (seed {pic['seed']}) alone: PP=2 with your fields writes {pic['text']!r}, "
            f"PP=1 {pic['pp1_text']!r}")
    return ('<div class="xp-ws-note"><b>the first divergence</b>: every rank\'s view of the state at the event '
            'where a rank first reads a field that differs from the owner\'s</div>'
            + rank_views_html(trace, pic["event"], reference=ref, note=note))
