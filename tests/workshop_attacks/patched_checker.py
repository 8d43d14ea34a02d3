"""Attack: replace the checker's run() with one that always passes."""
import torch

try:
    import explainer.workshop.check_accept as _c
    from explainer.workshop.report import Check, verdict
    _c.run = lambda fn, code: verdict("accept", [Check("forged", True, "forged")])
except Exception:
    pass


def entropy_bound_accept(entropy, bound):
    return torch.zeros_like(entropy, dtype=torch.bool)
