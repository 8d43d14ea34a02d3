"""A workshop check's turnaround (the goal: a few seconds on 2 cores, because learners iterate on it).

For each exercise, a passing answer (the slowest path: every check runs; ``sync-fields`` also runs its
minimality runs):

* command line, cold: ``python -m explainer workshop check ID FILE`` as a fresh process (its own imports,
  the check forked from it); baseline in the same run: a bare ``python -c "import torch"``, the floor any
  fresh process pays; the ratio is ours / floor;
* notebook, warm: ``check_file`` in this process after one warm-up check (the checks fork from a warm
  forkserver); the check's own CPU time (its processes and ranks) is in the name.

* the jail's own cost: the jailed Python (``jail.command``: bubblewrap's namespaces and binds) starting,
  answering one request and exiting, against the same Python started without the jail; once bare (the
  gate's and sync-fields' jail) and once importing torch first (the accept jail). Each check starts one jail.

Goal: under 5 s wall per check; the jail adds under 0.5 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from explainer.bench import Row
from explainer.workshop import check_file, jail


SOLUTIONS = {
    "accept": ("import torch\n\ndef entropy_bound_accept(entropy, bound):\n"
               "    h, order = torch.sort(entropy, dim=-1)\n    keep = torch.cumsum(h, dim=-1) - h <= bound\n"
               "    return torch.zeros_like(keep).scatter_(-1, order, keep)\n"),
    "sync-fields": "def fields_to_sync():\n    return {'draft_tokens', 'is_encoder_phase', 'self_conditioning_embeds'}\n",
    "tensor-dict-gate": ("def use_cpu_custom_send_recv(device_communicator):\n"
                         "    return bool(getattr(device_communicator, 'supports_tensor_dict', False))\n"),
}
GOAL_S = 5.0
JAIL_GOAL_S = 0.5


def _jailed_start(preload: str, jailed: bool) -> float:
    uid = jail.jail_uid(0) if jail.is_root() and jailed else None
    argv = jail.python_argv(uid)
    req = (f'{{"op": "ready", "preload": [{preload!r}]}}\n' if preload else "").replace("'", '"') + '{"op": "exit"}\n'
    t0 = time.perf_counter()
    subprocess.run(jail.command(argv) if jailed else argv, input=req.encode(), check=True, capture_output=True,
                   preexec_fn=jail.limits(uid or 0), cwd="/")
    return time.perf_counter() - t0


def jail_rows(reps: int) -> list[Row]:
    if not jail.available()[0]:
        return []
    rows = []
    for preload, what in (("", "bare Python"), ("torch", "importing torch")):
        ours = statistics.median(_jailed_start(preload, True) for _ in range(reps))
        base = statistics.median(_jailed_start(preload, False) for _ in range(reps))
        rows.append(Row("workshop", f"the learner's jail ({what}): start, one answer, exit vs the same unjailed",
                        ours, base, "s", ours / base, f"+ < {JAIL_GOAL_S:g} s", ours - base < JAIL_GOAL_S))
    return rows


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def run(quick: bool = False) -> list[Row]:
    reps = 1 if quick else 3
    floor = statistics.median(_wall([sys.executable, "-c", "import torch"]) for _ in range(reps))
    rows = []
    with tempfile.TemporaryDirectory(prefix="explainer-bench-workshop-") as tmp:
        paths = {}
        for exercise, source in SOLUTIONS.items():
            paths[exercise] = Path(tmp) / f"{exercise.replace('-', '_')}.py"
            paths[exercise].write_text(source)
        for exercise, path in paths.items():
            cold = statistics.median(_wall([sys.executable, "-m", "explainer", "workshop", "check", exercise, str(path)])
                                     for _ in range(reps))
            rows.append(Row("workshop", f"workshop check {exercise} FILE (fresh process) vs python -c 'import torch'",
                            cold, floor, "s", cold / floor, f"< {GOAL_S:g} s", cold < GOAL_S))
        check_file("accept", paths["accept"])                      # start the warm forkserver
        for exercise, path in paths.items():
            runs = []
            for _ in range(reps):
                t0 = time.perf_counter()
                report = check_file(exercise, path)
                runs.append((time.perf_counter() - t0, report.cpu_seconds, report.passed))
            wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            rows.append(Row("workshop", f"check('{exercise}', ...) in a notebook, warm (CPU {cpu:.1f} s)", wall, None,
                            "s", None, f"< {GOAL_S:g} s", all(r[2] for r in runs) and wall < GOAL_S))
    return rows + jail_rows(reps)
