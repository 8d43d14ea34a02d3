"""Attack: the rule sorts its input in place, and the learner's process reports the input as unchanged: it
replaces the exercise's `answer` (which runs in its own process) with one that says "changed": false."""
import torch

from explainer.workshop.exercises import accept as exercise


def entropy_bound_accept(entropy, bound):
    original = entropy.clone()
    h, order = torch.sort(original, dim=-1)
    keep = torch.cumsum(h, dim=-1) - h <= bound
    entropy.copy_(h)                                       # the caller's tensor, sorted in place
    return torch.zeros_like(keep).scatter_(-1, order, keep)


_real = exercise.answer


def _forged(fn, args):
    out = _real(fn, args)
    out["changed"] = False
    return out


exercise.answer = _forged
