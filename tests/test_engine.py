"""The engine at PP=1: equal to ``explainer.sampler.generate`` (the oracle) and vLLM's per-canvas invariants."""

import pytest
import torch

from explainer.model import task
from explainer.engine.core import one_torch_thread
from explainer.engine.llm_engine import LLMEngine
from explainer.errors import UsageError
from explainer.model.cached_lm import CachedLM
from explainer.model.checkpoint import load_pretrained
from explainer.sampler import generate
from explainer.trace import Trace

NUMBERS = [451, 100, 119, 707, 999, 312]
PROMPTS = [task.encode(str(n)) for n in NUMBERS]
CL = task.CANVAS_LENGTH
MAX_TOKENS = task.MAX_CANVASES * CL


@pytest.fixture(scope="module")
def whole_model():
    return load_pretrained()


def oracle(model, prompt, seed, cfg, max_tokens=MAX_TOKENS):
    """``explainer.sampler.generate`` for one request, cut like the engine (after EOS, at max_tokens)."""
    with one_torch_thread():
        seq = generate(CachedLM(model), torch.tensor([prompt]), canvas_length=cfg.canvas_length,
                       max_new_tokens=max_tokens, max_denoising_steps=cfg.max_denoising_steps,
                       entropy_bound=cfg.entropy_bound, t_min=cfg.t_min, t_max=cfg.t_max,
                       stability_threshold=cfg.stability_threshold, confidence_threshold=cfg.confidence_threshold,
                       eos_token_id=cfg.eos_token_id, pad_token_id=task.PAD_ID,
                       generator=torch.Generator().manual_seed(seed))
    out = seq[0, len(prompt):].tolist()
    return out[: out.index(cfg.eos_token_id) + 1] if cfg.eos_token_id in out else out[:max_tokens]


@pytest.mark.parametrize("overrides", [
    {},                                                       # the checkpoint's generation config
    {"max_denoising_steps": 2, "entropy_bound": 0.5},        # forced convergence at N
    {"max_num_seqs": 1},                                      # requests queue, one at a time
    {"max_num_seqs": 3, "stability_threshold": 2, "t_min": 0.1, "t_max": 1.5},
])
def test_pp1_equals_sampler_generate_token_for_token(whole_model, overrides):
    engine = LLMEngine.from_engine_args(**overrides)
    seeds = [11 * i + 3 for i in range(len(PROMPTS))]
    outs = engine.generate(PROMPTS, max_tokens=MAX_TOKENS, seeds=seeds)
    for prompt, seed, out in zip(PROMPTS, seeds, outs):
        assert out.output_token_ids == oracle(whole_model, prompt, seed, engine.config)
    if not overrides:
        assert [task.decode(o.output_token_ids) for o in outs] == [task.spell(n) for n in NUMBERS]


def test_pp1_max_tokens_truncates_like_vllm(whole_model):
    engine = LLMEngine.from_engine_args()
    (out,) = engine.generate([task.encode("777")], max_tokens=12, seeds=[5])
    assert out.finish_reason == "length" and len(out.output_token_ids) == 12
    assert out.output_token_ids == oracle(whole_model, task.encode("777"), 5, engine.config, max_tokens=16)[:12]


def _steps_of(trace, req):
    """Per engine step of ``req`` at PP=1: (view read at prepare, sampler action, emitted tokens)."""
    rows = []
    for e in trace.select(rank=0, phase="prepare"):
        if req in e.reads:
            sample = trace.select(step=e.step, rank=0, phase="sample")[0]
            rows.append((e.views[0][req], sample.data["actions"][req], sample.data["emitted"].get(req)))
    return rows


@pytest.mark.parametrize("steps, stability", [(48, 1), (3, 5)])     # (3, 5): never stable, forced at N
def test_pp1_canvas_invariants(steps, stability):
    trace = Trace()
    engine = LLMEngine.from_engine_args(trace, max_denoising_steps=steps, stability_threshold=stability)
    outs = engine.generate(PROMPTS[:4], max_tokens=MAX_TOKENS, seeds=[0, 1, 2, 3])
    for i, out in enumerate(outs):
        rows = _steps_of(trace, f"req-{i}")
        views = [r[0] for r in rows] + [None]
        assert rows[0][1].startswith("prefill done") and rows[0][0]["is_encoder_phase"] is True
        denoise_in_canvas, commits = 0, 0
        for k, (view, action, emitted) in enumerate(rows[1:], start=1):
            after = views[k + 1]
            if action.startswith("denoise"):
                assert view["is_encoder_phase"] is False
                assert emitted is None                                   # denoise emits nothing ...
                if after is not None:                                    # ... and rolls back
                    assert after["num_computed_tokens"] == view["num_computed_tokens"]
                if denoise_in_canvas == 0:                               # zero SC on a canvas's first step
                    assert view["step"] == 0 and view["self_conditioning_embeds"] == 0.0
                else:
                    assert view["self_conditioning_embeds"] > 0
                denoise_in_canvas += 1
                assert denoise_in_canvas <= steps                        # <= N denoise forwards per canvas
            else:
                assert action.startswith("commit") and view["is_encoder_phase"] is True
                assert 1 <= denoise_in_canvas                            # converged (or forced at N) first
                assert stability == 1 or denoise_in_canvas == steps
                assert emitted == view["draft_tokens"] and len(emitted) == CL   # CL argmax tokens
                if after is not None:
                    assert after["num_computed_tokens"] == view["num_computed_tokens"] + CL
                    assert after["is_encoder_phase"] is False and after["step"] == 0
                denoise_in_canvas, commits = 0, commits + 1
        assert commits == -(-len(out.output_token_ids) // CL)            # one commit per emitted canvas


def test_pp1_sampler_returns_int32_like_vllm():
    trace = Trace()
    LLMEngine.from_engine_args(trace).generate([PROMPTS[0]], max_tokens=8, seeds=[0])
    assert {e.data["sampled_dtype"] for e in trace.select(phase="sample")} == {"int32"}
    assert trace.bytes_per_step() == {}                                   # PP=1 sends nothing


def test_requests_are_checked():
    engine = LLMEngine.from_engine_args(warmup=False)
    with pytest.raises(UsageError, match=r"outside the vocabulary; accepted: 0\.\.39"):
        engine.add_request([3, 40], max_tokens=8)
    with pytest.raises(UsageError, match="at least one token"):
        engine.add_request([], max_tokens=8)
    with pytest.raises(UsageError, match="max_tokens=0 is out of range; accepted: integers >= 1"):
        engine.add_request([3], max_tokens=0)
