"""The process a check starts (``python -m explainer.workshop.child WORKDIR``): the only place the learner's
code runs (besides the rank processes the gate check launches from here).

Reads ``WORKDIR/request.json`` ({exercise, code}), writes ``WORKDIR/result.json`` (a Report with its picture).
Each phase is appended to ``WORKDIR/progress.jsonl`` (``progress.py``) so the parent's watchdog can name
where a hang happened and end the process group in bounded time.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time

from explainer.workshop import exercises, learner, progress
from explainer.workshop.report import LearnerError, Report


def main(workdir: str) -> int:
    progress.start(os.path.join(workdir, "progress.jsonl"))
    with open(os.path.join(workdir, "request.json")) as f:
        req = json.load(f)
    ex = exercises.get(req["exercise"])
    code = learner.LearnerCode(**req["code"])
    t0 = time.perf_counter()
    progress.phase("importing the checker")
    import torch
    torch.set_num_threads(1)                     # tiny tensors; the machine is shared
    checker = importlib.import_module(ex.checker)
    try:
        with progress.learner_phase(f"running the top level of {code.filename}"):
            fn = learner.load(code)
        report = checker.run(fn, code)
    except LearnerError as exc:
        report = Report.error(ex.id, exc.kind, str(exc))
    except learner.LearnerTimeout as exc:
        report = Report(ex.id, "fail", reason=str(exc))
    report.source, report.function, report.seconds = code.origin, code.function, time.perf_counter() - t0
    own, ranks = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    report.cpu_seconds = own.ru_utime + own.ru_stime + ranks.ru_utime + ranks.ru_stime
    data = report.to_json()
    data["picture"] = report.picture
    tmp = os.path.join(workdir, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, os.path.join(workdir, "result.json"))
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main(sys.argv[1]))
