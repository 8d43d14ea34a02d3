"""Attack: tell the watchdog a trusted phase is running (progress.jsonl in the work folder), block SIGALRM
(the old in-process time limit), then spin."""
import json
import signal
import time


def entropy_bound_accept(entropy, bound):
    return entropy > 0


try:
    with open("progress.jsonl", "a") as f:
        f.write(json.dumps({"t": time.time(), "phase": "importing the checker", "learner": False,
                            "budget": 1e6}) + "\n")
except OSError:
    pass
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
while True:
    pass
