"""Attack: fork until the machine says no (each child sleeps as `sleep 4242.37`)."""
import os

children = 0
for _ in range(300):
    try:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "4242.37"])
        children += 1
    except OSError:
        break


def entropy_bound_accept(entropy, bound):
    return entropy > 0
