"""Attack: print 400 MB at the top level (the grader used to keep all of it)."""
import sys

import torch

line = "x" * 1023 + "\n"
for _ in range(400 * 1024):
    sys.stdout.write(line)


def entropy_bound_accept(entropy, bound):
    return torch.zeros_like(entropy, dtype=torch.bool)
