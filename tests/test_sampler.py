"""Sampler primitives against transformers' classes on identical logits, plus the loop on toy LMs.

The class-level facts are transformers 5.23.0's ``generation_diffusion_gemma.py`` (``EntropyBoundSampler``, the
linear temperature processor, ``StableAndConfidentStoppingCriteria``), checked against the installed classes.
"""

import math

import pytest
import torch

from explainer import sampler
from explainer.errors import UsageError
from explainer.sampler import (StableAndConfident, StepRecorder, denoise_step, entropy_bound_accept, generate,
                               linear_temperature, token_entropy)


def _hf_gen():
    pytest.importorskip("transformers")
    from transformers.models.diffusion_gemma import generation_diffusion_gemma as g
    return g


def _logits(seed, shape=(3, 16, 50), scale=4.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


# ---------------------------------------------------------------- temperature

def test_linear_temperature_values():
    got = [linear_temperature(s, 48) for s in (48, 47, 24, 2, 1)]
    assert got == pytest.approx([0.8, 0.7917, 0.6, 0.4167, 0.4083], abs=1e-4)
    assert linear_temperature(1, 48) > 0.4          # never reaches t_min


def test_linear_temperature_bit_exact_with_hf_processor():
    g = _hf_gen()
    proc = g.LinearTemperatureScheduleLogitsProcessor(t_min=0.4, t_max=0.8, max_denoising_steps=48)
    scores = _logits(0)
    for step in range(48, 0, -1):
        # HF's _denoising_step hands the processor an int32 tensor
        theirs = proc(None, scores, cur_step=torch.tensor(step, dtype=torch.int32))
        assert torch.equal(scores / linear_temperature(step, 48), theirs)
        assert linear_temperature(step, 48) == pytest.approx(proc.t_min + (proc.t_max - proc.t_min) * step / 48)


# ---------------------------------------------------------------- entropy bound

def test_token_entropy_bit_exact_with_categorical():
    for scale in (0.1, 4.0, 40.0):
        lg = _logits(1, scale=scale)
        assert torch.equal(token_entropy(lg), torch.distributions.Categorical(logits=lg).entropy())


@pytest.mark.parametrize("bound", [0.0, 0.01, 0.1, 1.0, 5.0])
@pytest.mark.parametrize("scale", [0.5, 5.0, 30.0])
def test_accept_and_renoise_equal_entropy_bound_sampler(bound, scale):
    g = _hf_gen()
    b, length, vocab = 4, 32, 64
    hf = g.EntropyBoundSampler(g.EntropyBoundSamplerConfig(entropy_bound=float(bound) or 1e-12), length, vocab, 8)
    hf.entropy_bound = bound
    raw = _logits(2, (b, length, vocab), scale)
    canvas = torch.randint(0, vocab, (b, length), generator=torch.Generator().manual_seed(3))
    # theirs: HF's step order (multinomial, argmax, accept, renoise) on the global RNG
    torch.manual_seed(7)
    processed = raw / linear_temperature(5, 8)
    probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
    cand = torch.multinomial(probs.view(-1, vocab), 1).view(b, length)
    accepted = hf.accept_canvas(canvas, cand, processed, 5)
    their_canvas = hf.renoise_canvas(accepted, 5)
    torch.manual_seed(7)
    ours = denoise_step(raw, canvas, cur_step=5, num_steps=8, entropy_bound=bound)
    assert torch.equal(ours.accepted, hf.accepted_token_mask)
    assert torch.equal(entropy_bound_accept(token_entropy(processed), bound), hf.accepted_token_mask)
    assert torch.equal(ours.candidate, cand)
    assert torch.equal(ours.canvas, their_canvas)
    assert torch.equal(ours.argmax, processed.argmax(-1))
    assert bool(ours.accepted.any(-1).all())       # at least one per row


def test_hf_test_vector_peaks_over_flat_logits():
    lg = torch.zeros(1, 256, 10000)
    lg[0, 0, 11], lg[0, 1, 22], lg[0, 2, 33] = 18.0, 14.5, 14.5
    h = token_entropy(lg)
    assert h[0, :3].tolist() == pytest.approx([0.00289, 0.0778, 0.0778], abs=5e-5)
    assert h[0, 3].item() == pytest.approx(math.log(10000), abs=1e-3)
    counts = [int(entropy_bound_accept(h, b).sum()) for b in (0.01, 0.1, 1.0)]
    assert counts == [2, 3, 4]


def test_hf_test_vector_matches_hf_sampler_masks():
    g = _hf_gen()
    lg = torch.zeros(1, 256, 10000)
    lg[0, 0, 11], lg[0, 1, 22], lg[0, 2, 33] = 18.0, 14.5, 14.5
    for bound in (0.01, 0.1, 1.0):
        hf = g.EntropyBoundSampler(g.EntropyBoundSamplerConfig(entropy_bound=bound), 256, 10000, 48)
        x = torch.zeros(1, 256, dtype=torch.long)
        hf.accept_canvas(x, x, lg, 1)
        assert torch.equal(entropy_bound_accept(token_entropy(lg), bound), hf.accepted_token_mask)


# ---------------------------------------------------------------- stable and confident

def _confident(b=2, length=6, vocab=10):
    lg = torch.full((b, length, vocab), -30.0)
    lg[..., 3] = 30.0
    return lg.argmax(-1), lg


@pytest.mark.parametrize("s,expected", [(1, [False, True, True]), (2, [False, False, True, True]),
                                        (0, [True, True])])
def test_stable_and_confident_call_sequences(s, expected):
    argmax, lg = _confident()
    stop = StableAndConfident(stability_threshold=s, confidence_threshold=0.005)
    assert [bool(stop(argmax, lg).all()) for _ in expected] == expected
    stop.reset()
    assert bool(stop(argmax, lg).all()) == expected[0]


def test_stable_and_confident_matches_hf_on_sequences():
    g = _hf_gen()
    gen = torch.Generator().manual_seed(0)
    for s in (0, 1, 2, 3):
        for c in (0.005, 0.5, 3.0):
            ours, theirs = StableAndConfident(s, c), g.StableAndConfidentStoppingCriteria(s, c)
            for _ in range(8):
                lg = torch.randn(3, 5, 4, generator=gen) * 6
                argmax = torch.randint(0, 2, (3, 5), generator=gen)   # often repeats
                assert torch.equal(ours(argmax, lg), theirs(argmax, lg))
                ent = token_entropy(lg)
                assert torch.equal(ours.last_confident, ent.mean(-1) < c)


def test_stable_and_confident_not_confident_on_flat_logits():
    stop = StableAndConfident(1, 0.005)
    argmax = torch.zeros(2, 4, dtype=torch.long)
    lg = torch.zeros(2, 4, 8)
    assert [bool(stop(argmax, lg).any()) for _ in range(3)] == [False, False, False]


# ---------------------------------------------------------------- the loop on toy LMs

class PeakyLM:
    """+20 on target(pos) = 3 + 5*pos mod 125 over zeros; optional forced EOS."""

    vocab_size = 128

    def __init__(self, force_eos=None, nan_at=None):
        self.length, self.force_eos, self.nan_at = 0, force_eos or {}, nan_at
        self.encoded, self.decodes = [], 0

    def encode(self, input_ids):
        self.encoded.append(input_ids.clone())
        self.length += input_ids.shape[1]

    def decode(self, canvas, sc):
        self.decodes += 1
        b, length = canvas.shape
        pos = torch.arange(self.length, self.length + length)
        lg = torch.zeros(b, length, self.vocab_size)
        lg[:, torch.arange(length), (3 + 5 * pos) % 125] = 20.0
        for (row, p), tok in self.force_eos.items():
            if self.length <= p < self.length + length:
                lg[row, p - self.length] = 0.0
                lg[row, p - self.length, tok] = 20.0
        if self.nan_at is not None and self.decodes == self.nan_at:
            lg[0, 0, 0] = float("nan")
        return lg


def test_peaky_eos_padding_and_stopping():
    lm = PeakyLM(force_eos={(0, 16): 2})     # row 0, second canvas (positions 13..20), position 3
    prompt = torch.tensor([[1, 10, 11, 12, 13], [1, 14, 15, 16, 17]])
    rec = StepRecorder()
    torch.manual_seed(0)
    out = generate(lm, prompt, canvas_length=8, max_new_tokens=32, eos_token_id=[2, 50], pad_token_id=0,
                   recorder=rec)
    assert out.shape == (2, 5 + 32)
    assert out[0, 13:21].tolist() == [68, 73, 78, 2, 0, 0, 0, 0]
    assert out[0, 21:].tolist() == [0] * 16
    assert out[1, 5:].tolist() == [(3 + 5 * p) % 125 for p in range(5, 37)]
    assert [c.steps for c in rec.canvases] == [2, 2, 2, 2]     # accept all, then stable & confident
    assert lm.decodes == 8 and len(lm.encoded) == 4           # the last canvas is not encoded
    assert lm.encoded[2][0].tolist() == [68, 73, 78, 2, 0, 0, 0, 0]   # the padded canvas is what's encoded
    assert [r.cur_step for r in rec.steps[:2]] == [48, 47]
    assert rec.steps[0].accepted.all() and not rec.steps[0].finished.any() and rec.steps[1].finished.all()


def test_all_rows_finished_stops_early_and_unpadded_without_pad_id():
    lm = PeakyLM(force_eos={(0, 6): 2, (1, 7): 2})
    torch.manual_seed(0)
    out = generate(lm, torch.tensor([[1, 2, 3, 4, 5]] * 2), canvas_length=8, max_new_tokens=32, eos_token_id=2)
    assert out.shape == (2, 13)                             # both finished in the first canvas
    assert out[0, 6].item() == 2 and out[0, 7].item() != 0  # no pad id: tokens after EOS stay


def test_nan_logits_raise_naming_canvas_and_step():
    lm = PeakyLM(nan_at=3)      # canvas 1, its first step
    with pytest.raises(UsageError, match=r"canvas 1, step 48"):
        generate(lm, torch.tensor([[1, 2]]), canvas_length=4, max_new_tokens=8)


def test_generator_run_equals_global_seeded_run():
    lm_args = dict(canvas_length=8, max_new_tokens=16, max_denoising_steps=5)

    class FlatLM(PeakyLM):
        def decode(self, canvas, sc):                  # near-uniform: 1 accepted per step, never stops
            return torch.sin(canvas[..., None].float() + torch.arange(self.vocab_size)) * 0.5

    torch.manual_seed(123)
    a = generate(FlatLM(), torch.tensor([[1, 2, 3]]), **lm_args)
    torch.manual_seed(999)
    state = torch.get_rng_state()
    b = generate(FlatLM(), torch.tensor([[1, 2, 3]]), generator=torch.Generator().manual_seed(123), **lm_args)
    assert torch.equal(a, b)
    assert torch.equal(torch.get_rng_state(), state)        # the global RNG was not touched


def test_rng_order_is_randint_then_multinomial_randint_per_step():
    vocab, b, length = 30, 2, 5
    lm = PeakyLM()
    lm.vocab_size = vocab
    raw = _logits(4, (b, length, vocab), 0.3)
    lm.decode = lambda canvas, sc: raw
    g = torch.Generator().manual_seed(5)
    rec = StepRecorder()
    generate(lm, torch.tensor([[1], [2]]), canvas_length=length, max_new_tokens=length, max_denoising_steps=2,
             generator=g, recorder=rec)
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, vocab, (b, length), generator=g)
    for r, step in zip(rec.steps, (2, 1)):
        assert torch.equal(r.input_canvas, x)
        p = torch.softmax(raw / linear_temperature(step, 2), -1, dtype=torch.float32)
        cand = torch.multinomial(p.view(-1, vocab), 1, generator=g).view(b, length)
        noise = torch.randint(0, vocab, (b, length), generator=g)
        x = torch.where(r.accepted, cand, noise)
        assert torch.equal(r.candidate, cand) and torch.equal(r.canvas, x)


def test_recorder_does_not_change_tokens():
    args = dict(canvas_length=8, max_new_tokens=16, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(1)
    a = generate(PeakyLM(force_eos={(0, 9): 2}), torch.tensor([[1, 5]] * 2), **args)
    torch.manual_seed(1)
    rec = StepRecorder()
    b = generate(PeakyLM(force_eos={(0, 9): 2}), torch.tensor([[1, 5]] * 2), recorder=rec, **args)
    assert torch.equal(a, b)
    assert torch.equal(torch.cat([c.committed for c in rec.canvases], -1), a[:, 2:])


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("kwargs,needle", [
    (dict(canvas_length=0), "canvas_length=0"),
    (dict(canvas_length=-3), "canvas_length=-3"),
    (dict(max_new_tokens=0), "max_new_tokens=0"),
    (dict(max_denoising_steps=0), "max_denoising_steps=0"),
    (dict(t_min=0.8, t_max=0.4), "t_max=0.4 must be > t_min=0.8"),
    (dict(t_min=0.5, t_max=0.5), "t_max=0.5 must be > t_min=0.5"),
    (dict(t_min=-0.1, t_max=0.8), "t_min=-0.1"),
    (dict(t_min=None, t_max=0.8), "set both"),
    (dict(entropy_bound=-0.1), "entropy_bound=-0.1"),
    (dict(entropy_bound=float("nan")), "entropy_bound=nan"),
    (dict(stability_threshold=-1), "stability_threshold=-1"),
    (dict(confidence_threshold=0.0), "confidence_threshold=0.0"),
    (dict(eos_token_id=128), r"eos_token_id \[128\] are outside the vocabulary; accepted: 0..127"),
    (dict(eos_token_id=[2, -1]), r"eos_token_id \[-1\] are outside the vocabulary"),
    (dict(pad_token_id=500), r"pad_token_id \[500\]"),
])
def test_bad_arguments_raise_usage_error(kwargs, needle):
    args = dict(canvas_length=8, max_new_tokens=8) | kwargs
    with pytest.raises(UsageError, match=needle) as info:
        generate(PeakyLM(), torch.tensor([[1, 2]]), **args)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("prompt,needle", [
    (torch.tensor([[1, 128]]), r"input_ids \[128\] are outside the vocabulary; accepted: 0..127"),
    (torch.tensor([[-1, 3]]), r"input_ids \[-1\]"),
    (torch.zeros(1, 0, dtype=torch.long), "must hold >= 1 row and >= 1 token"),
    (torch.zeros(0, 3, dtype=torch.long), "must hold >= 1 row and >= 1 token"),
    (torch.tensor([1, 2]), r"\[batch, prompt_len\]"),
    (torch.tensor([[1.0, 2.0]]), r"\[batch, prompt_len\]"),
])
def test_bad_prompt_raises_usage_error(prompt, needle):
    with pytest.raises(UsageError, match=needle):
        generate(PeakyLM(), prompt, canvas_length=8, max_new_tokens=8)


def test_wrong_logits_shape_raises():
    lm = PeakyLM()
    lm.decode = lambda canvas, sc: torch.zeros(1, 3, 128)
    with pytest.raises(UsageError, match=r"shape \(1, 3, 128\) at canvas 0, step 48"):
        generate(lm, torch.tensor([[1, 2]]), canvas_length=8, max_new_tokens=8)


def test_stopper_validation():
    with pytest.raises(UsageError, match="stability_threshold=1.5"):
        StableAndConfident(1.5)
    with pytest.raises(UsageError, match="confidence_threshold=-1"):
        StableAndConfident(1, -1)


def test_public_api_is_exported():
    for name in ("generate", "denoise_step", "StableAndConfident", "linear_temperature", "entropy_bound_accept",
                 "DiffusionLM", "StepRecorder"):
        assert name in sampler.__all__
