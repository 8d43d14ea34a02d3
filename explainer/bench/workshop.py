"""A workshop check's turnaround (DESIGN: "a few seconds on 2 cores", learners iterate on it).

Ours: ``check_file(ID, solution.py)`` for each exercise, a passing answer (the slowest path: every check
runs; ``sync-fields`` also runs its minimality runs), wall time and the CPU time of the check's processes.
Baseline, in the same run: a bare ``python -c "import torch"``, the floor any check process pays.
Goal: under 5 s wall per check.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from explainer.bench import Row

SOLUTIONS = {
    "accept": ("import torch\n\ndef entropy_bound_accept(entropy, bound):\n"
               "    h, order = torch.sort(entropy, dim=-1)\n    keep = torch.cumsum(h, dim=-1) - h <= bound\n"
               "    return torch.zeros_like(keep).scatter_(-1, order, keep)\n"),
    "sync-fields": "def fields_to_sync():\n    return {'draft_tokens', 'is_encoder_phase', 'self_conditioning_embeds'}\n",
    "tensor-dict-gate": ("def use_cpu_custom_send_recv(device_communicator):\n"
                         "    return bool(getattr(device_communicator, 'supports_tensor_dict', False))\n"),
}
GOAL_S = 5.0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(fn) -> tuple[float, float, object]:
    cpu, t0 = _children_cpu(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, _children_cpu() - cpu, out


def run(quick: bool = False) -> list[Row]:
    from explainer.workshop import check_file
    reps = 1 if quick else 2
    floor = statistics.median(_timed(lambda: subprocess.run([sys.executable, "-c", "import torch"], check=True))[0]
                              for _ in range(reps))
    rows = []
    with tempfile.TemporaryDirectory(prefix="explainer-bench-workshop-") as tmp:
        for exercise, source in SOLUTIONS.items():
            path = Path(tmp) / f"{exercise.replace('-', '_')}.py"
            path.write_text(source)
            runs = [_timed(lambda: check_file(exercise, path)) for _ in range(reps)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            passed = all(r[2].passed for r in runs)
            rows.append(Row("workshop", f"check {exercise} (passing answer; CPU {cpu:.1f} s) vs python -c 'import torch'",
                            wall, floor, "s", wall / floor, f"< {GOAL_S:g} s", passed and wall < GOAL_S))
    return rows
