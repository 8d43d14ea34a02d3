"""Attack: make the reference agree with a wrong answer (the checker's reference and the sampler's rule)."""
import torch

try:
    import explainer.workshop.exercises.accept as _c
    from explainer.sampler import primitives
    _wrong = lambda h, b: torch.zeros_like(h, dtype=torch.bool)   # noqa: E731
    _c.library_rule = _wrong
    primitives.entropy_bound_accept = _wrong
except Exception:
    pass


def entropy_bound_accept(entropy, bound):
    return torch.zeros_like(entropy, dtype=torch.bool)
