"""``explainer.hf.generate`` == ``model.generate(...).sequences``, token for token (the sampler's conformance).

Tiny random ``DiffusionGemmaForBlockDiffusion`` built in the test (``explainer.model.hf_tiny``; no downloads).
"""

import pytest
import torch

pytest.importorskip("transformers")

from explainer import hf  # noqa: E402
from explainer.model.hf_tiny import tiny_hf_model  # noqa: E402
from explainer.errors import UsageError  # noqa: E402
from explainer.sampler import StepRecorder  # noqa: E402

PROMPTS = torch.tensor([[1, 10, 11, 12, 13], [1, 20, 21, 22, 23], [1, 30, 31, 32, 33]])


def build_tiny(canvas_length=8):
    """The tiny random model, seed 0 (``explainer.model.hf_tiny``)."""
    return tiny_hf_model(seed=0, canvas_length=canvas_length)


@pytest.fixture(scope="module")
def model():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_tiny()
    torch.set_num_threads(threads)


def both(model, prompt, seed, **kw):
    torch.manual_seed(seed)
    theirs = model.generate(prompt, **kw).sequences
    torch.manual_seed(seed)
    ours = hf.generate(model, prompt, **kw)
    return ours, theirs


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("steps", [4, 16])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("max_new_tokens", [8, 24])   # 1 and 3 canvases of 8
def test_matrix(model, seed, steps, batch, max_new_tokens):
    ours, theirs = both(model, PROMPTS[:batch], seed, max_new_tokens=max_new_tokens, max_denoising_steps=steps)
    assert theirs.shape == (batch, 5 + max_new_tokens)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("steps,expected", [
    (4, [97, 53, 24, 108, 27, 57, 63, 44, 84, 46, 91, 53, 122, 42, 19, 41]),
    (48, [63, 93, 73, 58, 53, 25, 93, 12, 117, 53, 108, 95, 48, 47, 95, 122]),
])
def test_reference_vectors(model, steps, expected):
    """Seeded outputs of transformers 5.23.0 on this model and prompt, recorded once (generate with
    ``torch.manual_seed(42)``): the same numbers today, from transformers and from ours."""
    ours, theirs = both(model, PROMPTS[:1], 42, max_new_tokens=16, max_denoising_steps=steps, eos_token_id=None)
    assert theirs[0, 5:].tolist() == expected
    assert torch.equal(ours, theirs)


def test_48_steps_three_canvases_batch_2(model):
    ours, theirs = both(model, PROMPTS[:2], 0, max_new_tokens=24, max_denoising_steps=48)
    assert torch.equal(ours, theirs)


def test_bfloat16_model_casts_self_conditioning(model):
    low = build_tiny().to(torch.bfloat16)
    for kw in (dict(max_new_tokens=16, max_denoising_steps=6),
               dict(max_new_tokens=16, max_denoising_steps=12, t_min=0.005, t_max=0.01, confidence_threshold=0.05)):
        ours, theirs = both(low, PROMPTS, 0, **kw)
        assert torch.equal(ours, theirs)


def test_defaults_and_non_multiple_length(model):
    # default 48 steps; 10 new tokens -> 2 canvases, not truncated
    ours, theirs = both(model, PROMPTS[:2], 5, max_new_tokens=10)
    assert theirs.shape == (2, 5 + 16)
    assert torch.equal(ours, theirs)


def test_adaptive_stopping_with_frozen_rows(model):
    """Low temperatures make some rows stable & confident before others: the frozen-row path runs."""
    kw = dict(max_new_tokens=24, max_denoising_steps=12, t_min=0.005, t_max=0.01, confidence_threshold=0.05)
    rec = StepRecorder()
    torch.manual_seed(0)
    ours = hf.generate(model, PROMPTS, recorder=rec, **kw)
    torch.manual_seed(0)
    theirs = model.generate(PROMPTS, **kw).sequences
    assert torch.equal(ours, theirs)
    mixed = [s for s in rec.steps if s.finished.any() and not s.finished.all()]
    assert mixed, "no step had frozen and running rows together"
    assert any(c.steps < 12 for c in rec.canvases), "no canvas stopped early"


def _eos_case(model, seed=3, steps=6):
    kw = dict(max_new_tokens=24, max_denoising_steps=steps)
    torch.manual_seed(seed)
    base = model.generate(PROMPTS[:2], eos_token_id=None, **kw).sequences
    first = base[:, 5:13]
    # an id inside row 0's first canvas (not its last slot) that row 1's first canvas lacks
    eos = next(t for t in first[0, :-1].tolist() if t not in first[1].tolist() and t != 0)
    return eos, kw


@pytest.mark.parametrize("pad", [0, None])
@pytest.mark.parametrize("as_list", [False, True])
def test_eos_padding(model, pad, as_list):
    eos, kw = _eos_case(model)
    ours, theirs = both(model, PROMPTS[:2], 3, eos_token_id=[eos, 7] if as_list else eos, pad_token_id=pad, **kw)
    assert torch.equal(ours, theirs)
    assert theirs.shape == (2, 5 + 24)
    assert eos in theirs[0, 5:13].tolist()                  # the EOS path really ran
    if pad is not None:
        at = theirs[0, 5:13].tolist().index(eos)
        assert theirs[0, 5 + at + 1:].tolist() == [pad] * (23 - at)   # padded after EOS and later canvases
        assert eos not in theirs[1, 5:13].tolist()          # row 1 kept going


def test_attention_mask_left_padding(model):
    prompt = torch.tensor([[0, 0, 1, 10, 11], [1, 20, 21, 22, 23]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    ours, theirs = both(model, prompt, 5, attention_mask=mask, max_new_tokens=16, max_denoising_steps=5)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("kw", [
    dict(max_length=15, max_new_tokens=24, max_denoising_steps=3),   # max_length stops early
    dict(max_length=15, max_denoising_steps=3),                      # max_length replaces the default 256
    dict(max_new_tokens=8, max_denoising_steps=3, t_min=None, t_max=None, stability_threshold=None),
    dict(max_new_tokens=8, max_denoising_steps=4, entropy_bound=2.0),
    dict(max_new_tokens=8, max_denoising_steps=4, stability_threshold=0, confidence_threshold=2.0),
])
def test_other_kwargs(model, kw):
    if "entropy_bound" in kw:
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig
        theirs_kw = dict(kw, sampler_config=EntropyBoundSamplerConfig(entropy_bound=kw["entropy_bound"]))
        del theirs_kw["entropy_bound"]
        torch.manual_seed(9)
        theirs = model.generate(PROMPTS[:2], **theirs_kw).sequences
        torch.manual_seed(9)
        assert torch.equal(hf.generate(model, PROMPTS[:2], **kw), theirs)
        torch.manual_seed(9)
        assert torch.equal(hf.generate(model, PROMPTS[:2], **theirs_kw), theirs)
    else:
        ours, theirs = both(model, PROMPTS[:2], 9, **kw)
        assert torch.equal(ours, theirs)


def test_explicit_generator_equals_global_seed(model):
    kw = dict(max_new_tokens=16, max_denoising_steps=4)
    torch.manual_seed(11)
    theirs = model.generate(PROMPTS[:2], **kw).sequences
    ours = hf.generate(model, PROMPTS[:2], generator=torch.Generator().manual_seed(11), **kw)
    assert torch.equal(ours, theirs)


def test_canvas_length_16(model):
    other = build_tiny(canvas_length=16)
    ours, theirs = both(other, PROMPTS[:2], 2, max_new_tokens=32, max_denoising_steps=6)
    assert torch.equal(ours, theirs)


def test_defaults_come_from_generation_configs():
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import DiffusionGemmaGenerationConfig
    fresh = build_tiny()
    fresh.generation_config.max_denoising_steps = 5       # model default
    fresh.generation_config.max_new_tokens = 16
    ours, theirs = both(fresh, PROMPTS[:2], 4)
    assert theirs.shape == (2, 21) and torch.equal(ours, theirs)
    cfg = DiffusionGemmaGenerationConfig(max_new_tokens=8, max_denoising_steps=3, t_min=0.1, t_max=0.3)
    ours, theirs = both(fresh, PROMPTS[:2], 4, generation_config=cfg, eos_token_id=torch.tensor([2, 3]))
    assert theirs.shape == (2, 13) and torch.equal(ours, theirs)


def test_unknown_kwarg_rejected(model):
    with pytest.raises(UsageError, match="do_sample"):
        hf.generate(model, PROMPTS[:1], do_sample=True)
