"""Attack: ask for 8 GiB at the top level (not touched: harmless where there is no limit)."""
import torch

hog = bytearray(8 << 30)


def entropy_bound_accept(entropy, bound):
    return torch.zeros_like(entropy, dtype=torch.bool)
