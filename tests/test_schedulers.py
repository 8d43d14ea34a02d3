"""Optional schedulers vs diffusers' ``DiscreteDDIMScheduler`` / ``BlockRefinementScheduler`` (uniform mode).

The facts are diffusers 0.42.1's ``scheduling_discrete_ddim.py`` and ``scheduling_block_refinement.py``
(the posterior routes, the cumulative commit quota, the RNG order), checked against the installed classes.
"""

import pytest
import torch

from explainer.errors import UsageError
from explainer.sampler.diffusers_schedulers import BlockRefinement, DiscreteDDIM


def _diffusers():
    return pytest.importorskip("diffusers")


def _logits(seed, shape=(3, 16, 40), scale=3.0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("num_steps", [1, 5, 12])
def test_ddim_equals_diffusers_over_a_run(temperature, num_steps):
    d = _diffusers()
    theirs = d.DiscreteDDIMScheduler(num_inference_steps=num_steps)
    ours = DiscreteDDIM(num_steps)
    b, length, vocab = 3, 16, 40
    x_ours = x_theirs = torch.randint(0, vocab, (b, length), generator=torch.Generator().manual_seed(1))
    g_ours, g_theirs = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for i in range(num_steps):
        logits = _logits(10 + i, (b, length, vocab))
        logits[:, :4, 5] += 8.0        # some positions agree with x_t once x_t holds 5
        o = ours.step(logits, i, x_ours, temperature=temperature, generator=g_ours)
        t = theirs.step(logits, i, x_theirs, temperature=temperature, generator=g_theirs)
        assert torch.equal(o.sampled_tokens, t.sampled_tokens)
        assert torch.equal(o.sampled_probs, t.sampled_probs)
        assert torch.equal(o.prev_sample, t.prev_sample)
        x_ours, x_theirs = o.prev_sample, t.prev_sample
    assert torch.equal(o.prev_sample, o.sampled_tokens)      # the last step commits x0


def test_ddim_route_table():
    ddim = DiscreteDDIM(48)
    differ, same = torch.tensor([[0]]), torch.tensor([[1]])
    x0 = torch.tensor([[1]])
    v = 10000      # the x_t == x0 column depends on V (reference table: a large vocabulary)
    rows = {0: (0.0208, 0.0, 0.9792, 0.0208), 1: (0.0213, 0.489, 0.489, 0.995), 24: (0.042, 0.920, 0.038, 1.0),
            46: (0.500, 0.489, 0.011, 1.0)}
    for step, (clean, stay, noise, clean_same) in rows.items():
        p = ddim.route_probs(differ, x0, step, v)[0, 0].tolist()
        assert p == pytest.approx([clean, stay, noise], abs=2e-3)
        assert ddim.route_probs(same, x0, step, v)[0, 0, 0].item() == pytest.approx(clean_same, abs=2e-3)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("threshold,editing", [(0.95, None), (0.3, None), (0.95, 0.5)])
def test_block_refinement_equals_diffusers_over_a_run(temperature, threshold, editing):
    d = _diffusers()
    b, length, vocab, n = 2, 24, 30, 7
    theirs = d.BlockRefinementScheduler(block_length=length, num_inference_steps=n, threshold=threshold,
                                        editing_threshold=editing)
    theirs.set_timesteps(n, block_length=length)
    ours = BlockRefinement(n, threshold=threshold, editing_threshold=editing)
    g_ours, g_theirs = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for canvas in range(2):                       # the committed mask resets at step 0
        x_ours = x_theirs = torch.randint(0, vocab, (b, length), generator=torch.Generator().manual_seed(canvas))
        for i in range(n):
            logits = _logits(100 * canvas + i, (b, length, vocab), scale=2.5)
            o = ours.step(logits, i, x_ours, temperature=temperature, generator=g_ours)
            t = theirs.step(logits, i, x_theirs, temperature=temperature, generator=g_theirs)
            assert torch.equal(o.prev_sample, t.prev_sample)
            assert torch.equal(o.accepted, t.transfer_index)
            assert torch.equal(o.edited, t.editing_transfer_index)
            assert torch.equal(o.sampled_probs, t.sampled_probs)
            x_ours, x_theirs = o.prev_sample, t.prev_sample
        assert bool(ours.committed.all())         # the cumulative quota commits everything by step N


def test_block_refinement_quotas_on_flat_logits():
    br = BlockRefinement(48, threshold=1.0)
    x = torch.zeros(1, 256, dtype=torch.long)
    counts = []
    for i in range(48):
        br.step(torch.zeros(1, 256, 10), i, x)
        counts.append(int(br.committed.sum()))
    assert [counts[i] for i in (0, 1, 2, 23, 46, 47)] == [6, 11, 16, 128, 251, 256]


def test_block_refinement_threshold_commits_all_confident_positions():
    br = BlockRefinement(48, threshold=0.5)
    logits = torch.zeros(1, 256, 10)
    logits[0, :20, 3] = 10.0
    out = br.step(logits, 0, torch.zeros(1, 256, dtype=torch.long))
    assert int(out.accepted.sum()) == 20 and bool(out.accepted[0, :20].all())


def test_scheduler_validation():
    with pytest.raises(UsageError, match="num_steps=0"):
        DiscreteDDIM(0)
    with pytest.raises(UsageError, match=r"step_index=4 is out of range; accepted: integers 0\.\.3"):
        DiscreteDDIM(4).step(torch.zeros(1, 2, 3), 4, torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(UsageError, match="temperature=-1"):
        BlockRefinement(4).step(torch.zeros(1, 2, 3), 0, torch.zeros(1, 2, dtype=torch.long), temperature=-1)
