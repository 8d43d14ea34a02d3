"""Conformance rows of the PP startup gate (vLLM PR #45828): the toy's check beside the real vLLM's.

vLLM side (``explainer.vllm_side.probe``, one process): ``supports_pp`` of the real class; the real
``vllm.LLM(model=<tiny random DiffusionGemma>, pipeline_parallel_size=2)``; the same after registering the real
class with ``SupportsPP`` declared again (the model before #45828). Toy side: ``supports_pp`` of the toy's class and
the scenarios ``pp2-gated`` and ``pp2-pre-fix`` (in-process).
"""

from __future__ import annotations

from explainer import vllm_env, vllm_release
from explainer.conformance.rows import Row, compare, failed
from explainer.model.interfaces import supports_pp
from explainer.model.registry import DEFAULT_MODEL, ModelRegistry
from explainer.scenario import registry
from explainer.scenario.stories import PP2_GATED, PP2_PRE_FIX

PP_MESSAGE_START = "Pipeline parallelism is not supported for this model"
WHATS = ("supports-pp", "llm-pp2", "llm-pp2-pre-fix", "sampler")


def vllm_probe() -> dict:
    """The real vLLM's answers (one ``.venv-vllm`` process); ``{"error": why}`` if it could not run."""
    try:
        return vllm_env.run_module("probe", *WHATS, timeout=400)
    except vllm_env.VllmRunError as exc:
        return {"error": str(exc)}


def toy_side() -> dict:
    gated = registry.run(PP2_GATED.name).to_json()
    pre_fix = registry.run(PP2_PRE_FIX.name).to_json()
    return {"supports_pp": supports_pp(ModelRegistry.resolve_model_cls(DEFAULT_MODEL)), "gated": gated,
            "pre_fix": pre_fix}


def llm_values(report: dict) -> dict:
    err = report.get("error") or {}
    return {"exception": err.get("type"), "message": err.get("message"), "raised_in": (err.get("where") or [None])[-1],
            "worker_processes": len(report.get("children_alive", [])), "seconds": report.get("seconds_to_reject")}


def next_step(err: dict | None) -> str | None:
    return None if not err else f"{err.get('type')}: {' '.join(str(err.get('message')).split())[:160]}"


def rows(probe: dict | None = None, toy: dict | None = None) -> list[Row]:
    probe = vllm_probe() if probe is None else probe
    toy = toy_side() if toy is None else toy
    how_pp = ("vLLM: supports_pp of vLLM's DiffusionGemmaForConditionalGeneration, imported in .venv-vllm; toy: "
              "supports_pp of the toy's class of the same name")
    how_llm = ("vLLM: vllm.LLM(model=<tiny random DiffusionGemma saved with transformers>, pipeline_parallel_size=2, "
               "skip_tokenizer_init, enforce_eager, dtype float32) in .venv-vllm; toy: scenario pp2-gated")
    how_pre = ("vLLM: the real class subclassed with SupportsPP declared again (composed), registered under the "
               "checkpoint's architecture, then the same LLM(...); toy: scenario pp2-pre-fix. Compared: the PP gate "
               f"lets it through; what each does next is shown, not compared (vLLM {vllm_release.RUNS} stops at Model Runner V1; "
               "the toy goes on to its warmup)")
    names = ("PP gate: supports_pp(DiffusionGemmaForConditionalGeneration)", "PP gate: LLM(pipeline_parallel_size=2)",
             "PP gate: the pre-#45828 model (SupportsPP declared again)")
    toy_llm = {"exception": toy["gated"]["error"]["type"], "message": toy["gated"]["error"]["message"],
               "raised_in": "explainer/config.py EngineConfig.verify_with_parallel_config",
               "worker_processes": toy["gated"]["processes_started"],
               "seconds": round(toy["gated"]["details"]["startup_check_ms"] / 1000, 4)}
    toy_pre = {"passes_pp_gate": toy["pre_fix"]["outcome"] != "startup-rejected",
               "next": f"{toy['pre_fix']['outcome']}: {next_step(toy['pre_fix']['error'])}"}
    if "error" in probe and isinstance(probe["error"], str):
        return [failed(names[0], {"supports_pp": toy["supports_pp"]}, probe["error"], how_pp),
                failed(names[1], toy_llm, probe["error"], how_llm), failed(names[2], toy_pre, probe["error"], how_pre)]
    pre = probe["llm-pp2-pre-fix"]
    pre_err = pre.get("error") or {}
    vllm_pre = {"passes_pp_gate": not str(pre_err.get("message", "")).startswith(PP_MESSAGE_START),
                "next": next_step(pre_err), "registered_as": pre.get("registered_as")}
    return [compare(names[0], {"supports_pp": toy["supports_pp"]},
                    {"supports_pp": probe["supports-pp"]["supports_pp"], "bases": probe["supports-pp"]["bases"],
                     "kernels": probe.get("kernels")},
                    ["supports_pp"], how_pp),
            compare(names[1], toy_llm, llm_values(probe["llm-pp2"]), ["exception", "message", "worker_processes"],
                    how_llm),
            compare(names[2], toy_pre, vllm_pre, ["passes_pp_gate"], how_pre),
            sampler_row(toy["pre_fix"], probe["sampler"])]


def sampler_row(pre_fix: dict, real: dict) -> Row:
    """The pre-#45828 warmup crash: int32 sampled ids meeting the int64 assert of ``PPHandler.broadcast``."""
    how = ("vLLM: the real DiffusionSampler's _sampled buffer (int32) handed to the real PPHandler.broadcast, the "
           "runner's surroundings composed (stand-ins; Model Runner V2 cannot be built on a CPU); toy: scenario "
           "pp2-pre-fix's warmup")
    err = pre_fix.get("error") or {}
    toy = {"sampled_dtype": "int32", "exception": err.get("type"), "assert": err.get("message")}
    verr = real.get("error") or {}
    vllm = {"sampled_dtype": real.get("sampled_dtype"), "exception": verr.get("type"), "assert": verr.get("line"),
            "message": verr.get("message"), "where": verr.get("where")}
    return compare("PP gate: the pre-#45828 warmup (DiffusionSampler meets PPHandler.broadcast)", toy, vllm,
                   ["sampled_dtype", "exception", "assert"], how)
