"""A workshop check's turnaround: learners iterate on it, so it should answer in about a second.

For each exercise, its module's passing answer (``EXAMPLES["solution"]``; the slowest path: every check runs,
``sync-fields`` also runs its minimality runs), graded as a learner meets it:

* in a notebook: ``check()`` through the kernel's grader process (``grader_process.py``), warm (its jail and its
  reference ready, as after the first check of a session): the p50 of several checks. Goal: at most 1.0 s;
* from a fresh command line: ``python -m explainer workshop check ID FILE`` as a new process (its own imports,
  jail and reference); baseline in the same run: a bare ``python -c "import torch"``. Goal: at most 3 s;
* under load: the same warm notebook checks with the jail and without it (``EXPLAINER_WORKSHOP_JAIL=off``, the
  learner's code then runs under the limits only), taken in turns (jailed, not isolated, jailed, ...) so a change
  in the machine's other load falls on both, while busy loops hold every core; the ratio is what the isolation
  costs. Goal: at most 1.5x.

Every row names the load average (1 min) it was measured at.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from explainer.bench import Row
from explainer.bench.load import busy_load
from explainer.workshop import learner
from explainer.workshop import catalog
from explainer.workshop.grader_process import GraderProcess
from explainer.workshop.jail import view

NOTEBOOK_GOAL, COMMAND_GOAL, LOAD_GOAL = 1.0, 3.0, 1.5


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def _wall(cmd: list[str]) -> tuple[float, bool]:
    """(seconds, exit 0) of one command; a failure is said on stderr."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"bench: {' '.join(cmd[1:])} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-500:]}",
              file=sys.stderr, flush=True)
    return time.perf_counter() - t0, proc.returncode == 0


def _passed(report, exercise: str) -> bool:
    """A passing answer's check passed; if not, say why on stderr (the row then shows the goal not met)."""
    if not report.passed:
        print(f"bench: check('{exercise}') of a passing answer did not pass: {report.status}: {report.reason}",
              file=sys.stderr, flush=True)
    return report.passed


def _warm_p50(grader: GraderProcess, codes: dict, exercise: str, reps: int) -> tuple[float, bool]:
    """(p50 seconds of ``reps`` checks of ``exercise``, all passed) after one warm-up check."""
    grader.check(exercise, codes[exercise])
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        report = grader.check(exercise, codes[exercise])
        runs.append((time.perf_counter() - t0, _passed(report, exercise)))
    return statistics.median(r[0] for r in runs), all(r[1] for r in runs)


def _paired_p50(graders: dict, codes: dict, exercise: str, reps: int) -> tuple[tuple[float, float], bool]:
    """((p50 jailed, p50 not isolated), all passed): one warm-up check each, then ``reps`` rounds of one check
    each, in turns."""
    for grader in graders.values():
        grader.check(exercise, codes[exercise])
    runs, ok = {True: [], False: []}, True
    for _ in range(reps):
        for jail in (True, False):
            t0 = time.perf_counter()
            report = graders[jail].check(exercise, codes[exercise])
            runs[jail].append(time.perf_counter() - t0)
            ok = _passed(report, exercise) and ok
    return (statistics.median(runs[True]), statistics.median(runs[False])), ok


def _grader(jail: bool) -> GraderProcess:
    grader = GraderProcess(jail=jail)
    grader.start()
    return grader


def run(quick: bool = False) -> list[Row]:
    reps = 3 if quick else 7
    rows = []
    with tempfile.TemporaryDirectory(prefix="explainer-bench-workshop-") as tmp:
        paths, codes = {}, {}
        for ex, module in catalog.load_all().items():
            paths[ex] = Path(tmp) / f"{ex.replace('-', '_')}.py"
            paths[ex].write_text(module.EXAMPLES["solution"].source)
            codes[ex] = learner.from_file(paths[ex], module.ABOUT.function, ex)
        grader = _grader(jail=True)
        try:
            for ex in codes:
                p50, ok = _warm_p50(grader, codes, ex, reps)
                rows.append(Row("workshop", f"check('{ex}', ...) in a notebook, warm, jailed (p50 of {reps}; "
                                            f"{_load()})", p50, None, "s", None, f"<= {NOTEBOOK_GOAL:g} s",
                                ok and p50 <= NOTEBOOK_GOAL))
        finally:
            grader.close()
        floor = statistics.median(_wall([sys.executable, "-c", "import torch"])[0] for _ in range(2 if quick else 3))
        for ex, path in paths.items():
            walls = [_wall([sys.executable, "-m", "explainer", "workshop", "check", ex, str(path)])
                     for _ in range(1 if quick else 3)]
            cold = statistics.median(w[0] for w in walls)
            rows.append(Row("workshop", f"workshop check {ex} FILE, a fresh command line, jailed, vs python -c "
                                        f"'import torch' ({_load()})", cold, floor, "s", cold / floor,
                            f"<= {COMMAND_GOAL:g} s", all(w[1] for w in walls) and cold <= COMMAND_GOAL))
        rows += _under_load(codes, reps)
    return rows


def _under_load(codes: dict, reps: int) -> list[Row]:
    if not view.available()[0]:
        return []
    rows = []
    procs = os.cpu_count() or 2
    with busy_load(procs, max_seconds=600):
        graders = {jail: _grader(jail) for jail in (True, False)}
        try:
            for ex in codes:
                (jailed, plain), ok = _paired_p50(graders, codes, ex, reps)
                rows.append(Row("workshop", f"check('{ex}') under load ({procs} busy loops, {_load()}): jailed vs "
                                            f"not isolated, in turns, p50 of {reps}", jailed, plain, "s",
                                jailed / plain, f"<= {LOAD_GOAL:g}x", ok and jailed / plain <= LOAD_GOAL))
        finally:
            for g in graders.values():
                g.close()
    return rows
