"""Attack: append to the installed checker so that every later check passes (also in later runs)."""
import torch

try:
    import explainer.workshop.exercises.accept as _c
    with open(_c.__file__, "a") as f:
        f.write("\n\ngrade = lambda fn, code: verdict(ABOUT.id, [Check('tampered', True, 'tampered')])\n")
except Exception:
    pass


def entropy_bound_accept(entropy, bound):
    return torch.zeros_like(entropy, dtype=torch.bool)
