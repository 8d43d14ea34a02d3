"""The real vLLM's PP startup gate on the real DiffusionGemma class (PR #45828), run in ``.venv-vllm``.

* ``supports_pp_report()``: ``vllm.model_executor.models.interfaces.supports_pp`` of vLLM's
  ``DiffusionGemmaForConditionalGeneration`` (and its bases).
* ``llm_report(model_dir, pre_fix)``: ``vllm.LLM(model=DIR, pipeline_parallel_size=2, ...)`` on a tiny random
  DiffusionGemma checkpoint made here; what it raised, where, after how long, and which processes it left alive.
  ``pre_fix=True`` first registers, under the same architecture name, a subclass of the real class that declares
  ``SupportsPP`` again (the model before #45828), so the same ``LLM(...)`` call shows what vLLM does next.
"""

from __future__ import annotations

import json
import os
import time
import traceback

import psutil
import torch
import vllm
from vllm import ModelRegistry
from vllm.model_executor.models.diffusion_gemma import DiffusionGemmaForConditionalGeneration as Cls
from vllm.model_executor.models.interfaces import SupportsPP, supports_pp

from explainer.model.hf_tiny import tiny_hf_model

LLM_KWARGS = dict(skip_tokenizer_init=True, pipeline_parallel_size=2, enforce_eager=True, max_model_len=256,
                  dtype="float32")


def write_tiny_checkpoint(model_dir: str) -> str:
    """A tiny random DiffusionGemma (the toy's transformers test config) saved with this venv's transformers."""
    tiny_hf_model(seed=0).save_pretrained(model_dir)
    return model_dir


def where_in_vllm(exc: BaseException) -> list[str]:
    """The last vLLM frames of the traceback, as ``vllm/...py:LINE function``."""
    out = []
    for f in traceback.extract_tb(exc.__traceback__):
        if "site-packages/vllm/" in f.filename:
            out.append(f"vllm/{f.filename.rsplit('site-packages/vllm/', 1)[1]}:{f.lineno} {f.name}")
    return out[-3:]


def supports_pp_report() -> dict:
    return {"class": Cls.__name__, "supports_pp": bool(supports_pp(Cls)),
            "bases": [b.__name__ for b in Cls.__bases__]}


def register_pre_fix_model(model_dir: str) -> str:
    """The real class with ``SupportsPP`` declared again, registered under the checkpoint's architecture name."""
    class PreFixDiffusionGemma(Cls, SupportsPP):
        """DiffusionGemma as it was before vLLM PR #45828: it declares ``SupportsPP``."""

    with open(os.path.join(model_dir, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    ModelRegistry.register_model(arch, PreFixDiffusionGemma)
    return arch


def llm_report(model_dir: str, pre_fix: bool = False) -> dict:
    """The real ``LLM(...)`` at PP=2: exception, message, where, seconds, live child processes when it raised."""
    me = psutil.Process()
    out = {"kwargs": LLM_KWARGS, "pre_fix_model": pre_fix, "error": None}
    if pre_fix:
        out["registered_as"] = register_pre_fix_model(model_dir)
    t0 = time.monotonic()
    try:
        vllm.LLM(model=model_dir, **LLM_KWARGS)
        out["error"] = None
    except Exception as exc:                                  # noqa: BLE001 - the rejection is the result
        out["error"] = {"type": type(exc).__name__, "message": str(exc), "mro": [c.__name__ for c in type(exc).__mro__
                                                                                 if c not in (object, BaseException)],
                        "where": where_in_vllm(exc)}
    out["seconds_to_reject"] = round(time.monotonic() - t0, 2)
    out["children_alive"] = [{"pid": c.pid, "name": c.name()} for c in me.children(recursive=True) if c.is_running()]
    out["torch_threads"] = torch.get_num_threads()
    out["pid"] = os.getpid()
    return out
