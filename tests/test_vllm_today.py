"""vLLM as it runs today: the Gumbel-max draw, SC on every request with logits, the load-time failure
without the gate, vLLM's warmup shape, and the request-state details."""

import pytest
import torch

from explainer.model import task
from explainer.config import EngineConfig
from explainer.engine.llm_engine import LLMEngine
from explainer.errors import UsageError
from explainer.scenario.pp import load_without_gate
from explainer.model.registry import ModelRegistry
from explainer.worker.model_state import DiffusionGemmaModelState
from explainer.sampler import denoise_step, gumbel_max_draw, multinomial_draw
from explainer.trace import Trace
from explainer.worker.warmup import WARMUP_DECODE_STEPS

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
N = 20000                       # draws per test
ALPHA = 1e-3                    # the stated significance: reject "same distribution" only if p < 0.001


def chi2_sf(x: float, df: int) -> float:
    """Survival function of the chi-square distribution (regularized upper incomplete gamma)."""
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(x / 2, dtype=torch.float64)))


def counts(draw, seed: int) -> torch.Tensor:
    processed = LOGITS.expand(1, N, -1).contiguous()
    tokens = draw(processed, torch.Generator().manual_seed(seed))
    return torch.bincount(tokens.flatten(), minlength=LOGITS.numel()).double()


@pytest.mark.parametrize("draw", [multinomial_draw, gumbel_max_draw], ids=["multinomial", "gumbel"])
def test_each_draw_samples_softmax_at_fixed_logits(draw):
    observed = counts(draw, seed=0)
    expected = N * torch.softmax(LOGITS.double(), -1)
    stat = float(((observed - expected) ** 2 / expected).sum())
    assert chi2_sf(stat, LOGITS.numel() - 1) > ALPHA, stat


def test_the_two_draws_sample_the_same_distribution():
    """Chi-square test of homogeneity over a 2 x V table of counts (df = V - 1), fixed seeds."""
    table = torch.stack([counts(multinomial_draw, seed=1), counts(gumbel_max_draw, seed=2)])
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    stat = float(((table - expected) ** 2 / expected).sum())
    assert chi2_sf(stat, LOGITS.numel() - 1) > ALPHA, stat


def test_chi2_sf_rejects_a_wrong_distribution():
    """The test above can fail: counts from shifted logits are rejected at the same significance."""
    observed = counts(gumbel_max_draw, seed=0)
    wrong = N * torch.softmax(LOGITS.double() * 1.2, -1)
    assert chi2_sf(float(((observed - wrong) ** 2 / wrong).sum()), LOGITS.numel() - 1) < ALPHA


def test_same_seed_same_logits_different_tokens():
    raw = torch.randn(1, 16, 40, generator=torch.Generator().manual_seed(3)) * 2
    canvas = torch.zeros(1, 16, dtype=torch.int64)
    a = denoise_step(raw, canvas, cur_step=10, num_steps=10, generator=torch.Generator().manual_seed(0))
    b = denoise_step(raw, canvas, cur_step=10, num_steps=10, generator=torch.Generator().manual_seed(0),
                     draw="gumbel")
    assert torch.equal(a.argmax, b.argmax) and torch.equal(a.entropy, b.entropy)   # deterministic parts agree
    assert not torch.equal(a.candidate, b.candidate)                               # the draws do not
    with pytest.raises(UsageError, match="accepted: multinomial, gumbel"):
        denoise_step(raw, canvas, cur_step=1, num_steps=1, draw="exponential")


def test_engine_gumbel_draw_changes_the_run_not_the_contract():
    outs = {}
    for draw in ("multinomial", "gumbel"):
        trace = Trace()
        engine = LLMEngine.from_engine_args(trace, sampler_draw=draw, warmup=False)
        outs[draw] = (engine.generate([task.encode("451")], max_tokens=24, seeds=[0])[0].output_token_ids,
                      [e.views[0] for e in trace.select(rank=0, phase="sample")])
    assert outs["multinomial"][1] != outs["gumbel"][1]          # different canvases along the way
    with pytest.raises(UsageError, match="sampler_draw"):
        EngineConfig(sampler_draw="topk")


def _model_state(mode):
    cfg = EngineConfig(self_conditioning=mode, warmup=False)
    model = ModelRegistry.resolve_model_cls(cfg.model)()
    state = DiffusionGemmaModelState(cfg)
    state.req_states.is_encoder_phase[0] = True                # a commit step, or a stale rank 0
    return model, state


def test_sc_modes_on_a_commit_step():
    """vLLM runs the SC MLP on every request with logits: with a zero soft embedding that is
    post_norm(embeds), not embeds (HF's encoder pass applies none)."""
    ids = torch.arange(8)
    model, hf = _model_state("hf")
    _, vllm = _model_state("vllm")
    with torch.no_grad():
        plain = model.embed_input_ids(ids[None])
        got_hf = hf.prepare_inputs(model, ids, 0, is_decode=True)
        got_vllm = vllm.prepare_inputs(model, ids, 0, is_decode=True)
        assert torch.equal(got_hf, plain)
        assert torch.allclose(got_vllm, model.model.self_conditioning.post_norm(plain), atol=1e-6)
        assert not torch.allclose(got_vllm, plain, atol=1e-3)
        assert torch.equal(vllm.prepare_inputs(model, ids, 0, is_decode=False), plain)   # prefill: no SC


def test_without_the_gate_rank1_fails_at_load():
    post = load_without_gate("diffusion-gemma-tiny", 2)
    assert (post["rank"], post["phase"], post["type"]) == (1, "load_model", "AttributeError")
    assert "make_empty_intermediate_tensors" in post["message"]
    assert load_without_gate("diffusion-gemma-tiny@pre-45828", 2) == {"rank": None}


def test_warmup_as_vllm_shapes_it():
    trace = Trace()
    LLMEngine.from_engine_args(trace)
    prepares = [e for e in trace.select(rank=0, phase="prepare", warmup=True)]
    assert len(prepares) == 1 + WARMUP_DECODE_STEPS == 6
    assert "prefill 9 tokens" in prepares[0].detail                 # canvas_length + 1
    assert all("_warmup_0_: " in e.detail and f"{task.CANVAS_LENGTH} tokens" in e.detail for e in prepares[1:])


def test_request_state_history_starts_at_zero_and_remove_resets_its_length():
    cfg = EngineConfig(warmup=False)
    state = DiffusionGemmaModelState(cfg)
    st = state.req_states
    assert int(st.accepted_canvas_history.abs().sum()) == 0
    st.accepted_canvas_history_len[3] = 5
    st.self_conditioning_embeds[3] = 1.0
    st.is_encoder_phase[3] = True
    state.remove_request(3)
    assert (int(st.accepted_canvas_history_len[3]), bool(st.is_encoder_phase[3]),
            float(st.self_conditioning_embeds[3].abs().sum())) == (0, False, 0.0)
