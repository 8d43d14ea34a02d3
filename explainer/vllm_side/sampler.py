"""The real ``DiffusionSampler``'s sampled-ids buffer meeting the real ``PPHandler.broadcast`` (vLLM 0.32.0, composed).

What is real: vLLM's ``DiffusionGemmaRequestStates`` and ``DiffusionSampler.__init__`` (which allocates ``_sampled``),
and the body of ``PPHandler.broadcast`` including ``compute_need_sampled_mask``. What is composed: the runner's
surroundings they read, as plain stand-ins (the sampler's shared states, a last-rank ``self``, an input batch of one
request whose prefill of 5 tokens completes this step, ``max_seq_len`` 256), because Model Runner V2 cannot be
built on a CPU here, and vLLM's ``UvaBackedTensor`` (pinned memory, which the CPU build cannot allocate) while the
sampler is built. The prefill step's ids are the first row of ``_sampled``, as the sampler hands them on.
"""

from __future__ import annotations

import traceback
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch
from vllm.model_executor.models import diffusion_gemma
from vllm.model_executor.models.diffusion_gemma import DiffusionGemmaRequestStates, DiffusionSampler
from vllm.v1.worker.gpu.pp_utils import PPHandler

CANVAS = 8


def real_sampler() -> DiffusionSampler:
    states = DiffusionGemmaRequestStates(max_num_reqs=2, canvas_length=CANVAS, vocab_size=128, max_denoising_steps=4,
                                         device=torch.device("cpu"), hidden_size=32, stability_threshold=1)
    shared = SimpleNamespace(sampling_states=None, logprob_token_ids_state=None, req_states=None,
                             logprobs_mode="raw_logprobs")
    with mock.patch.object(diffusion_gemma, "UvaBackedTensor", cpu_backed):
        return DiffusionSampler(shared, SimpleNamespace(canvas_length=CANVAS), 128, states, confidence_threshold=0.005,
                                t_min=0.4, t_max=0.8, entropy_bound=0.1, embed_weight=torch.zeros(128, 32),
                                normalizer=torch.tensor(1.0))


def cpu_backed(n: int, dtype: torch.dtype):
    """A stand-in for vLLM's ``UvaBackedTensor`` (pinned host memory, which the CPU build cannot allocate)."""
    return SimpleNamespace(np=np.zeros(n), cpu=torch.zeros(n, dtype=dtype), gpu=torch.zeros(n, dtype=dtype))


def sampler_meets_broadcast() -> dict:
    out: dict = {"composed": "stand-ins for the runner's surroundings; the sampler's buffer and broadcast are real"}
    try:
        sampler = real_sampler()
    except Exception as exc:                               # noqa: BLE001 - reported: what the CPU build allows
        return {**out, "error": {"type": type(exc).__name__, "message": str(exc), "phase": "DiffusionSampler"}}
    sampled = sampler._sampled[:1]
    out["sampled_dtype"] = str(sampled.dtype).removeprefix("torch.")
    batch = SimpleNamespace(num_computed_tokens_np=np.array([0]), prefill_len_np=np.array([5]),
                            num_scheduled_tokens=np.array([5]), max_seq_len_np=np.array([256]),
                            is_prefilling_np=np.array([True]))
    num = torch.zeros(1, dtype=torch.int32)
    try:
        PPHandler.broadcast(SimpleNamespace(is_last_rank=True), sampled, num, num.clone(), batch)
        out["error"] = None
    except Exception as exc:                               # noqa: BLE001 - the assert is the result
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        out["error"] = {"type": type(exc).__name__, "message": str(exc),
                        "where": f"vllm/{frame.filename.rsplit('site-packages/vllm/', 1)[-1]}:{frame.lineno} {frame.name}",
                        "line": (frame.line or "").strip()}
    return out
