"""The trusted check process (``child.main(WORKDIR)``, forked by ``sandbox.py``): it computes the verdict and
never runs the learner's code.

It reads ``WORKDIR/request.json`` ({exercise, code}), starts the learner's jailed process
(``session.Learner``: the only place the learner's code runs), lets the exercise's checker ask it over a
pipe with plain data and compare with the reference here, and writes ``WORKDIR/result.json`` (a Report
with its picture and the tail of what the learner printed). The jail cannot see the work folder. Each
phase is appended to ``WORKDIR/progress.jsonl`` (``progress.py``) so the parent's watchdog can name where
a hang happened and end the process group in bounded time.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time

from explainer.workshop import exercises, learner, progress, session
from explainer.workshop.report import LearnerError, Report


def _graded(checker, ex, code) -> tuple[Report, str, bool]:
    """(report, the learner's printed output, isolated)."""
    jailed = None
    try:
        progress.phase("starting the learner's jailed process")
        jailed = session.Learner(code, preload=getattr(checker, "PRELOAD", ()))
        if hasattr(checker, "prepare"):                   # the reference's own work while the jail starts
            progress.phase("preparing the reference")
            checker.prepare()
        with progress.learner_phase(f"running the top level of {code.filename}"):
            jailed.load()
        report = checker.run(jailed, code)
    except LearnerError as exc:
        report = Report.error(ex.id, exc.kind, str(exc))
    except learner.LearnerLimit as exc:
        report = Report(ex.id, "fail", reason=str(exc))
    finally:
        if jailed is not None:
            jailed.close()
    return report, jailed.output() if jailed else "", jailed.isolated if jailed else False


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
    report, output, isolated = _graded(checker, ex, code)
    report.source, report.function, report.seconds = code.origin, code.function, time.perf_counter() - t0
    report.output, report.isolated = output, isolated
    own, ranks = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    report.cpu_seconds = own.ru_utime + own.ru_stime + ranks.ru_utime + ranks.ru_stime
    data = report.to_json()
    data["picture"], data["output"] = report.picture, report.output
    tmp = os.path.join(workdir, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, os.path.join(workdir, "result.json"))
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main(sys.argv[1]))
