"""Attack: every comparison says equal."""
import torch

torch.equal = lambda a, b: True


def entropy_bound_accept(entropy, bound):
    return torch.zeros_like(entropy, dtype=torch.bool)
