"""Attack: replace the exercise's grade() with one that always passes."""
import torch

try:
    import explainer.workshop.exercises.accept as _c
    from explainer.workshop.report import Check, verdict
    _c.grade = lambda fn, code: verdict("accept", [Check("forged", True, "forged")])    # the module is the exercise
except Exception:
    pass


def entropy_bound_accept(entropy, bound):
    return torch.zeros_like(entropy, dtype=torch.bool)
