"""Rehearse the workshop's machine time on this laptop: what each block of the run sheet waits for.

Usage: .venv/bin/python scripts/rehearse.py [--json]

Measures, one after the other, in fresh processes as a learner's laptop runs them:
- `python -m explainer doctor` (every row, the gloo round trip and the checkpoint included);
- Run All of each notebook of the route, in a fresh kernel (nbclient, as JupyterLab's "Restart Kernel and Run
  All Cells"; the files are not written);
- each exercise's check from a terminal (`python -m explainer workshop check ID FILE`), on its module's stub (what
  the exercises notebook starts from) and its solution (``EXAMPLES`` in ``explainer/workshop/exercises/``), after
  the notebook it follows.
Prints one row per block with the load average before and after it: numbers for docs/instructor-guide.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from explainer.workshop import catalog

REPO = Path(__file__).resolve().parents[1]
FURTHER = ["04_pp_today", "05_two_hosts"]


def load() -> float:
    return os.getloadavg()[0]


def timed(label: str, fn) -> dict:
    before, t0 = load(), time.monotonic()
    detail = fn()
    row = {"block": label, "seconds": round(time.monotonic() - t0, 1), "load_before": round(before, 1),
           "load_after": round(load(), 1), "detail": detail}
    print(f"{label:46s} {row['seconds']:7.1f} s   load {row['load_before']:.1f} -> {row['load_after']:.1f}   {detail}",
          flush=True)
    return row


def run_all(name: str) -> str:
    path = REPO / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    return f"{sum(c.cell_type == 'code' for c in nb.cells)} code cells, {len(errors)} errors"


def check(exercise: str, source: str) -> str:
    with tempfile.TemporaryDirectory(prefix="explainer-rehearse-") as tmp:
        path = Path(tmp) / f"{exercise.replace('-', '_')}.py"
        path.write_text(source)
        out = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", exercise, str(path)],
                             capture_output=True, text=True, timeout=300, cwd=REPO)
    verdict = {0: "passed", 1: "failed"}.get(out.returncode, f"exit {out.returncode}")
    return f"{verdict}: {(out.stdout.strip().splitlines() or [''])[-1][:70]}"


def main(argv: list[str]) -> int:
    rows = [timed("doctor", lambda: subprocess.run([sys.executable, "-m", "explainer", "doctor"], capture_output=True,
                                                   text=True, timeout=300, cwd=REPO).stdout.splitlines()[-3])]
    ran = set()
    for exercise, module in catalog.load_all().items():          # in the route's order
        name = module.ABOUT.follows
        if name not in ran:
            ran.add(name)
            rows.append(timed(f"Run All {name}", lambda name=name: run_all(name)))
        stub, answer = module.EXAMPLES["stub"].source, module.EXAMPLES["solution"].source
        rows.append(timed(f"check {exercise}: the stub", lambda e=exercise, s=stub: check(e, s)))
        rows.append(timed(f"check {exercise}: the answer", lambda e=exercise, s=answer: check(e, s)))
    for name in FURTHER:
        rows.append(timed(f"Run All {name}", lambda name=name: run_all(name)))
    if "--json" in argv:
        print(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
