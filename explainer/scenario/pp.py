"""The pipeline-parallel scenarios: one demo prompt, five stories (``stories.py`` names them).

=====================  ===================================  ==================  ==========================
scenario               model                                 PP / mode           expected outcome
=====================  ===================================  ==================  ==========================
``pp1``                ``diffusion-gemma-tiny`` (post-fix)   1                   ok
``pp2-pre-fix``        ``...@pre-45828`` (SupportsPP)        2 / generic         warmup-crash (int64 assert)
``pp2-pre-fix-int64``  ``...@pre-45828``                     2 / generic-int64   diverged (stale rank 0)
``pp2-gated``          ``diffusion-gemma-tiny`` (post-fix)   2                   startup-rejected
``pp2-state-sync``     ``...@pre-45828``                     2 / state-sync      ok, equal to pp1
=====================  ===================================  ==================  ==========================

Each runs on either PP back-channel schedule (``pp_schedule``: ``sync``, vLLM #33960; ``async``, #42187)
with the same outcomes. Everything reported (text, errors, divergence, bytes) comes from the run's trace.

``pp2-gated`` also shows what the gate prevents (``load_without_gate``): with the check skipped, rank 1's
``load_model`` calls ``make_empty_intermediate_tensors``, which the post-#45828 class no longer has, so
the run would fail at model load on rank 1 (an ``AttributeError``) instead of with vLLM's message.
"""

from __future__ import annotations

from explainer.config import EngineConfig, PipelineParallelNotSupportedError
from explainer.distributed.hosts import describe
from explainer.distributed.inprocess import InProcessWorld
from explainer.engine.errors import RankFailure, error_summary
from explainer.engine.llm_engine import LLMEngine
from explainer.model import task
from explainer.model.registry import DEFAULT_MODEL, PRE_FIX_MODEL
from explainer.scenario.pp_summary import summarize
from explainer.scenario.result import ScenarioResult
from explainer.scenario.stories import PP1, PP2_GATED, PP2_PRE_FIX, PP2_PRE_FIX_INT64, PP2_STATE_SYNC, tells
from explainer.trace import Trace
from explainer.worker.model_runner import ModelRunner

DEMO_PROMPT = "451"            # the demo prompt: under the generic PP path its text visibly diverges
DEMO_SEED = 0
DEMO_MAX_TOKENS = task.MAX_CANVASES * task.CANVAS_LENGTH


def run_demo(name: str, backend: str, *, model: str, pp: int, mode: str = "generic",
             prompt: str = DEMO_PROMPT, seed: int = DEMO_SEED, pp_schedule: str = "sync",
             gate: str | None = None, sync_fields: tuple[str, ...] | None = None) -> ScenarioResult:
    """Start an engine and generate ``prompt``; classify what happened (without comparing to PP=1)."""
    trace = Trace(meta={"scenario": name, "prompt": prompt, "model": model, "pp_size": pp, "pp_mode": mode,
                        "backend": backend, "pp_schedule": pp_schedule})
    res = ScenarioResult(scenario=name, pp_size=pp, backend=backend, outcome="ok", trace=trace)
    gate_arg = {} if gate is None else {"comm_gate": gate}
    if sync_fields is not None:                        # state-sync: exactly these fields (EngineConfig.sync_fields)
        gate_arg["sync_fields"] = tuple(sync_fields)
    engine = None
    try:
        engine = LLMEngine.from_engine_args(trace, model=model, pipeline_parallel_size=pp, pp_mode=mode,
                                            distributed_executor_backend=backend, seed=seed,
                                            pp_schedule=pp_schedule, **gate_arg)
    except PipelineParallelNotSupportedError as exc:
        res.outcome, res.error = "startup-rejected", error_summary(exc)      # type: vLLM's NotImplementedError
        res.details = {"pp_schedule": pp_schedule, "toy_exception_class": type(exc).__name__,
                       "is_NotImplementedError": isinstance(exc, NotImplementedError),
                       "is_ValueError": isinstance(exc, ValueError),
                       "startup_check_ms": round(trace.events[-1].data["ms"], 3),
                       "without_gate": load_without_gate(model, pp)}
        return res
    except RankFailure as exc:
        return _crashed(res, exc)
    try:
        out = engine.generate([task.encode(prompt)], max_tokens=DEMO_MAX_TOKENS, seeds=[seed])[0]
    except RankFailure as exc:
        return _with_hosts(_crashed(res, exc), engine, gate)

    res.processes_started = engine.processes_started
    res.output_text = task.decode(out.output_token_ids)
    res.bytes_per_step = trace.bytes_per_step()
    res.details = {"output_token_ids": out.output_token_ids, "engine_steps": out.num_steps, "pp_mode": mode,
                   "model": model, "pp_schedule": pp_schedule}
    return _with_hosts(res, engine, gate)


def _with_hosts(res: ScenarioResult, engine, gate: str | None) -> ScenarioResult:
    """Name the communicator gate (when chosen) and, on the hosts backend, what ran on each host."""
    if gate is not None:
        res.details["comm_gate"] = gate
    runs = getattr(engine.executor, "hosts_runs", None) if engine is not None else None
    if runs:
        res.details["hosts"] = describe(runs[-1])
    return res


def load_without_gate(model: str, pp: int) -> dict:
    """What the config-time gate prevents: build the config as if the check were absent (a PP=1 config
    whose ``pipeline_parallel_size`` is then set to ``pp`` without re-running ``__post_init__``) and
    load each rank's runner over an in-process group. Returns ``{rank, phase, type, message}`` of the
    first rank whose ``load_model`` fails, or ``{"rank": None}`` when every rank loads."""
    config = EngineConfig(model=model, pipeline_parallel_size=1, warmup=False)
    config.pipeline_parallel_size = pp                 # the gate skipped
    for group in InProcessWorld(pp).groups():
        try:
            ModelRunner(config, group)
        except AttributeError as exc:
            return {"rank": group.rank_in_group, "phase": "load_model", **error_summary(exc)}
    return {"rank": None}


def _crashed(res: ScenarioResult, exc: RankFailure) -> ScenarioResult:
    res.outcome = "warmup-crash" if exc.warmup else "runtime-error"
    res.error = error_summary(exc.cause)
    res.processes_started = exc.processes_started
    res.bytes_per_step = res.trace.bytes_per_step(include_warmup=True)
    res.details = {"failed_rank": exc.rank, "failed_phase": exc.phase,
                   "ranks": [{"rank": r, "phase": p, **error_summary(e)} for r, p, e in exc.failures]}
    return res


def _compare_to_pp1(res: ScenarioResult, backend: str) -> ScenarioResult:
    """Name the first internal divergence and the first engine step whose tokens differ from PP=1."""
    if res.outcome != "ok":
        return res
    # PP=1 runs on one node: the hosts backend takes its reference from the in-process engine (same output)
    ref = run_demo(PP1.name, "inprocess" if backend == "hosts" else backend, model=DEFAULT_MODEL, pp=1)
    div = res.trace.first_divergence()
    res.first_divergence = div
    fields = sorted({f for d in res.trace.divergences() for f in d["fields"]})
    res.details.update(pp1_text=ref.output_text, identical_to_pp1=res.details["output_token_ids"] ==
                       ref.details["output_token_ids"],
                       output_divergence_step=(res.trace.first_output_divergence(ref.trace)
                                               if res.details.get("pp_schedule", "sync") == "sync"
                                               else _first_emission_divergence(res.trace, ref.trace)),
                       fields_diverged_during_run=fields)
    if div is not None or not res.details["identical_to_pp1"]:
        res.outcome = "diverged"
    return res


def _first_emission_divergence(trace: Trace, reference: Trace) -> int | None:
    """Async runs number their steps differently (empty steps in between): align the k-th emission of
    each run instead and return this run's engine step of the first one that differs."""
    def emissions(t):
        return [(step, rid, toks) for step, d in sorted(t.step_outputs().items()) for rid, toks in sorted(d.items())]
    mine, ref = emissions(trace), emissions(reference)
    for i, (step, rid, toks) in enumerate(mine):
        if i >= len(ref) or ref[i][1:] != (rid, toks):
            return step
    return None if len(mine) == len(ref) else (mine[-1][0] if mine else None)


def _finish(res: ScenarioResult) -> ScenarioResult:
    res.summary = summarize(res)
    return res


# ---- the scenarios ---------------------------------------------------------------------------------------
@tells(PP1)
def pp1(backend: str = "inprocess", pp_schedule: str = "sync") -> ScenarioResult:
    return _finish(run_demo(PP1.name, backend, model=DEFAULT_MODEL, pp=1, pp_schedule=pp_schedule))


@tells(PP2_PRE_FIX)
def pp2_pre_fix(backend: str = "inprocess", pp_schedule: str = "sync", gate: str | None = None) -> ScenarioResult:
    return _finish(run_demo(PP2_PRE_FIX.name, backend, model=PRE_FIX_MODEL, pp=2, pp_schedule=pp_schedule, gate=gate))


@tells(PP2_PRE_FIX_INT64)
def pp2_pre_fix_int64(backend: str = "inprocess", pp_schedule: str = "sync", gate: str | None = None) -> ScenarioResult:
    res = run_demo(PP2_PRE_FIX_INT64.name, backend, model=PRE_FIX_MODEL, pp=2, mode="generic-int64",
                   pp_schedule=pp_schedule, gate=gate)
    return _finish(_compare_to_pp1(res, backend))


@tells(PP2_GATED)
def pp2_gated(backend: str = "inprocess", pp_schedule: str = "sync") -> ScenarioResult:
    return _finish(run_demo(PP2_GATED.name, backend, model=DEFAULT_MODEL, pp=2, pp_schedule=pp_schedule))


@tells(PP2_STATE_SYNC)
def pp2_state_sync(backend: str = "inprocess", pp_schedule: str = "sync", gate: str | None = None) -> ScenarioResult:
    res = run_demo(PP2_STATE_SYNC.name, backend, model=PRE_FIX_MODEL, pp=2, mode="state-sync",
                   pp_schedule=pp_schedule, gate=gate)
    return _finish(_compare_to_pp1(res, backend))
