"""The tiny DiffusionGemma backbone against a straightforward reference, and its PP slicing."""

import math

import pytest
import torch
import torch.nn.functional as F

from explainer.errors import UsageError
from explainer.model.cached_lm import CachedLM
from explainer.model.checkpoint import init_weights
from explainer.model.diffusion_gemma import DiffusionGemmaModel
from explainer.model.kv_cache import KVCache
from explainer.model.stages import IntermediateTensors, get_pp_indices
from explainer.model.tiny_config import TinyConfig

CFG = TinyConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                 num_attention_heads=2, head_dim=16, canvas_length=8)


def make_model(seed=0, cfg=CFG):
    torch.manual_seed(seed)
    m = DiffusionGemmaModel(cfg)
    init_weights(m, std=0.2)
    with torch.no_grad():           # non-trivial norm scales so the test sees them
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return m.eval()


# ---- reference: explicit math, explicit masks, one pass over prefix + new tokens -------------
def ref_rms(x, w=None, eps=1e-6):
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def ref_rope(x, pos, theta):                      # x [B, h, T, d], pos [T]
    d = x.shape[-1]
    out = torch.empty_like(x)
    for j in range(d // 2):
        ang = pos.double() / theta ** (2 * j / d)
        c, s = torch.cos(ang).float(), torch.sin(ang).float()
        a, b = x[..., j], x[..., j + d // 2]
        out[..., j], out[..., j + d // 2] = a * c - b * s, b * c + a * s
    return out


def ref_forward(m, ids, mask, sc_embeds=None, sc_rows=None):
    """ids [B, S]; mask [S, S] bool (row i may attend to column j); SC applied to rows sc_rows."""
    cfg, W = m.config, dict(m.named_parameters())
    B, S = ids.shape
    x = W["embed_tokens.weight"][ids] * math.sqrt(cfg.hidden_size)
    if sc_rows is not None:
        s = sc_embeds if sc_embeds is not None else torch.zeros_like(x[:, sc_rows])
        n = ref_rms(s, W["self_conditioning.pre_norm.weight"])
        g = F.gelu(n @ W["self_conditioning.mlp.gate_proj.weight"].T, approximate="tanh")
        sc = (g * (n @ W["self_conditioning.mlp.up_proj.weight"].T)) @ W["self_conditioning.mlp.down_proj.weight"].T
        x = x.clone()
        x[:, sc_rows] = ref_rms(x[:, sc_rows] + sc)
    pos = torch.arange(S)
    nh, hd = cfg.num_attention_heads, cfg.head_dim
    for i in range(cfg.num_hidden_layers):
        def p(n):
            return W[f"layers.{i}.{n}"]

        h = ref_rms(x, p("input_layernorm.weight"))
        q = (h @ p("self_attn.q_proj.weight").T).view(B, S, nh, hd)
        k = (h @ p("self_attn.k_proj.weight").T).view(B, S, nh, hd)
        v = (h @ p("self_attn.v_proj.weight").T).view(B, S, nh, hd)
        q = ref_rope(ref_rms(q, p("self_attn.q_norm.weight")).transpose(1, 2), pos, cfg.rope_theta)
        k = ref_rope(ref_rms(k, p("self_attn.k_norm.weight")).transpose(1, 2), pos, cfg.rope_theta)
        v = ref_rms(v).transpose(1, 2)
        scores = q @ k.transpose(-1, -2)                                   # scaling 1.0
        scores = scores.masked_fill(~mask, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, nh * hd) @ p("self_attn.o_proj.weight").T
        x = x + ref_rms(a, p("post_attention_layernorm.weight"))
        h = ref_rms(x, p("pre_feedforward_layernorm.weight"))
        f = (F.gelu(h @ p("mlp.gate_proj.weight").T, approximate="tanh") * (h @ p("mlp.up_proj.weight").T))
        x = x + ref_rms(f @ p("mlp.down_proj.weight").T, p("post_feedforward_layernorm.weight"))
    x = ref_rms(x, W["norm.weight"])
    logits = x @ W["embed_tokens.weight"].T
    return 30.0 * torch.tanh(logits / 30.0)


def causal_mask(S):
    return torch.ones(S, S, dtype=torch.bool).tril()


def decoder_mask(P, L):
    """Prefix rows causal; canvas rows see the whole prefix and the whole canvas."""
    m = causal_mask(P + L)
    m[P:, :] = True
    return m


# ---- encoder and decoder mode ---------------------------------------------------------------
def test_encoder_mode_matches_reference_in_chunks():
    m = make_model()
    ids = torch.randint(0, CFG.vocab_size, (2, 13), generator=torch.Generator().manual_seed(1))
    kv = m.new_kv_cache()
    h1 = m(ids[:, :5], kv_cache=kv, causal=True)                 # prompt prefill
    h2 = m(ids[:, 5:], kv_cache=kv, causal=True)                 # commit a canvas of 8
    assert kv.length == 13
    got = m.compute_logits(torch.cat([h1, h2], 1))
    want = ref_forward(m, ids, causal_mask(13))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_sc", [False, True])
def test_decoder_mode_matches_reference(with_sc):
    m = make_model()
    g = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, CFG.vocab_size, (2, 11), generator=g)
    canvas = torch.randint(0, CFG.vocab_size, (2, 8), generator=g)
    sc_logits = torch.randn(2, 8, CFG.vocab_size, generator=g) * 3 if with_sc else None
    lm = CachedLM(m)
    lm.encode(prefix)
    got = lm.decode(canvas, sc_logits)
    assert got.dtype == torch.float32 and got.shape == (2, 8, CFG.vocab_size)
    assert lm.kv_cache.length == 11                              # decode stores nothing
    sc = None
    if with_sc:
        sc = sc_logits.softmax(-1) @ m.embed_tokens.weight * math.sqrt(CFG.hidden_size)
    want = ref_forward(m, torch.cat([prefix, canvas], 1), decoder_mask(11, 8), sc, slice(11, 19))[:, 11:]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert got.abs().max() <= 30.0


def test_decoder_mode_is_bidirectional_and_encoder_mode_is_not():
    m = make_model()
    prefix = torch.randint(0, CFG.vocab_size, (1, 4), generator=torch.Generator().manual_seed(3))
    canvas = torch.arange(2, 10)[None]
    changed = canvas.clone()
    changed[0, -1] = 20                                          # change only the last canvas token
    for causal, first_moves in ((True, False), (False, True)):
        outs = []
        for c in (canvas, changed):
            kv = m.new_kv_cache()
            m(prefix, kv_cache=kv, causal=True)
            outs.append(m(c, kv_cache=kv, causal=causal))
        assert (not torch.equal(outs[0][:, 0], outs[1][:, 0])) == first_moves


def test_decode_after_truncate_equals_fresh_prefix():
    m = make_model()
    prefix = torch.randint(0, CFG.vocab_size, (1, 6), generator=torch.Generator().manual_seed(4))
    canvas = torch.randint(0, CFG.vocab_size, (1, 8), generator=torch.Generator().manual_seed(5))
    lm = CachedLM(m)
    lm.encode(prefix)
    first = lm.decode(canvas, None)
    lm.decode(torch.zeros_like(canvas), first)                  # another step in between
    assert torch.equal(lm.decode(canvas, None), first)


def test_kv_cache_truncate_rolls_back():
    kv = KVCache(2)
    for i in range(2):
        kv.append(i, torch.ones(1, 2, 5, 4), torch.ones(1, 2, 5, 4))
    kv.truncate(3)
    assert kv.length == 3 and kv.values[1].shape[2] == 3
    with pytest.raises(UsageError):
        kv.truncate(4)
    kv.truncate(0)
    assert kv.length == 0


# ---- PP slicing -----------------------------------------------------------------------------
def test_get_pp_indices_like_vllm():
    assert [get_pp_indices(4, r, 2) for r in range(2)] == [(0, 2), (2, 4)]
    assert [get_pp_indices(4, r, 3) for r in range(3)] == [(0, 1), (1, 3), (3, 4)]
    assert [get_pp_indices(4, r, 4) for r in range(4)] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert get_pp_indices(5, 0, 1) == (0, 5)
    for bad in (0, 5, -1):
        with pytest.raises(UsageError, match="accepted: 1..4"):
            get_pp_indices(4, 0, bad)
    with pytest.raises(UsageError):
        get_pp_indices(4, 2, 2)


def make_stages(whole, pp):
    stages = []
    for r in range(pp):
        s = DiffusionGemmaModel(whole.config, *get_pp_indices(whole.config.num_hidden_layers, r, pp))
        s.load_state_dict({k: v for k, v in whole.state_dict().items() if k in s.state_dict()}, strict=True)
        stages.append(s.eval())
    return stages


def run_stages(stages, kvs, ids, causal, sc_logits=None, use_sc=False):
    """Compose stages in sequence like the PP handler: ids -> ... -> logits (and the hand-overs)."""
    first, last = stages[0], stages[-1]
    embeds = first.embed_input_ids(ids)
    if use_sc:
        sc = None if sc_logits is None else last.soft_embedding(sc_logits)   # computed on the last rank
        embeds = first.apply_self_conditioning(embeds, sc)
    x, handovers = None, []
    for s, kv in zip(stages, kvs):
        x = s(inputs_embeds=embeds if s.is_first_rank else None, kv_cache=kv, causal=causal,
              intermediate_tensors=None if s.is_first_rank else x)
        if not s.is_last_rank:
            assert isinstance(x, IntermediateTensors) and set(x.keys()) == {"hidden_states", "residual"}
            handovers.append(x)
    return last.compute_logits(x), handovers


@pytest.mark.parametrize("pp", [2, 4])
def test_sliced_stages_equal_whole_model_bit_for_bit(pp):
    whole = make_model(seed=7)
    stages = make_stages(whole, pp)
    g = torch.Generator().manual_seed(8)
    prompt = torch.randint(0, CFG.vocab_size, (2, 5), generator=g)
    canvas = torch.randint(0, CFG.vocab_size, (2, 8), generator=g)
    kv_whole = [whole.new_kv_cache()]
    kv_stages = [s.new_kv_cache() for s in stages]
    with torch.no_grad():
        a, _ = run_stages([whole], kv_whole, prompt, causal=True)                     # prefill
        b, _ = run_stages(stages, kv_stages, prompt, causal=True)
        assert torch.equal(a, b)
        sc = None
        for _ in range(2):                                                           # two denoise steps
            a, _ = run_stages([whole], kv_whole, canvas, causal=False, sc_logits=sc, use_sc=True)
            b, hand = run_stages(stages, kv_stages, canvas, causal=False, sc_logits=sc, use_sc=True)
            assert torch.equal(a, b)
            assert len(hand) == pp - 1
            for kv in kv_whole + kv_stages:
                kv.truncate(5)                                                       # rollback
            sc, canvas = a / 0.8, a.argmax(-1)
        a, _ = run_stages([whole], kv_whole, canvas, causal=True)                     # commit
        b, _ = run_stages(stages, kv_stages, canvas, causal=True)
        assert torch.equal(a, b)
    # the stages' caches together hold exactly the whole model's K/V
    stacked = [k for kv in kv_stages for k in kv.keys]
    assert all(torch.equal(x, y) for x, y in zip(stacked, kv_whole[0].keys))


def test_stage_ownership_and_empty_intermediate_tensors():
    first, mid, last = (DiffusionGemmaModel(CFG, s, e) for s, e in ((0, 1), (1, 3), (3, 4)))
    assert first.is_first_rank and not first.is_last_rank and hasattr(first, "self_conditioning")
    assert not hasattr(mid, "embed_tokens") and not hasattr(mid, "norm")
    assert last.is_last_rank and hasattr(last, "embed_tokens") and not hasattr(last, "self_conditioning")
    assert sorted({k.split(".")[1] for k in mid.state_dict() if k.startswith("layers.")}) == ["1", "2"]
    it = mid.make_empty_intermediate_tensors(batch_size=3, dtype=torch.float32, device="cpu")
    assert set(it.keys()) == {"hidden_states", "residual"}
    assert it["hidden_states"].shape == (3, CFG.canvas_length, CFG.hidden_size)
    with pytest.raises(UsageError):
        DiffusionGemmaModel(CFG, 2, 2)
    with pytest.raises(UsageError):
        mid(kv_cache=mid.new_kv_cache())                         # a non-first stage needs intermediates


def test_token_ids_outside_vocab_are_rejected():
    m = make_model()
    with pytest.raises(UsageError, match=r"\[40\].*accepted: 0..39"):
        m.embed_input_ids(torch.tensor([[3, 40]]))


# ---- training -------------------------------------------------------------------------------
def test_short_training_run_lowers_the_loss():
    from explainer.model import task
    from explainer.model.objective import diffusion_loss, train

    prompts, answers = task.make_batch(task.held_out_numbers()[:32])

    def loss_of(model):
        with torch.no_grad():
            return diffusion_loss(model, prompts, answers, torch.Generator().manual_seed(0)).item()

    from explainer.model.objective import model_config

    torch.manual_seed(3)
    untrained = DiffusionGemmaModel(model_config())
    init_weights(untrained)
    before = loss_of(untrained)
    trained, info = train(steps=12, seed=3, batch_size=16, log_every=12, log=lambda *a, **k: None)
    after = loss_of(trained)
    assert after < 0.8 * before, (before, after)
    assert info["history"][-1]["step"] == 12
