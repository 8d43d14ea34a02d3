"""A correct answer (the one copycat.py imports)."""
import torch


def entropy_bound_accept(entropy, bound):
    h, order = torch.sort(entropy, dim=-1)
    keep = torch.cumsum(h, dim=-1) - h <= bound
    return torch.zeros_like(keep).scatter_(-1, order, keep)
