"""The trusted check process (forked by ``grader.py`` for each check): it computes the verdict and never runs the
learner's code.

It talks to the learner's process (``jail.channel.LearnerProcess``, over the pipes of its ``Spawned`` handle),
lets the exercise's ``grade`` ask it with plain data and compare with the reference here, and writes
``WORKDIR/result.json`` (a Report with its picture and the tail of what the learner printed). The learner's
process cannot see the work folder. Each phase is appended to ``WORKDIR/progress.jsonl`` (``progress.py``) so
the grader's watchdog can name where a hang happened and end the process group in bounded time.
"""

from __future__ import annotations

import json
import os
import resource
import time
from types import ModuleType

from explainer.workshop import learner, private_dir, progress
from explainer.workshop.jail.channel import LearnerProcess
from explainer.workshop.jail.warm import Spawned
from explainer.workshop.report import LearnerError, Report


def _graded(ex: ModuleType, code: learner.LearnerCode, spawned: Spawned) -> tuple[Report, str, bool]:
    """(report, the learner's printed output, isolated)."""
    talk = None
    try:
        progress.phase("starting the learner's process")
        talk = LearnerProcess(spawned, code, preload=ex.PRELOAD)
        with progress.learner_phase(f"running the top level of {code.filename}"):
            talk.load()
        report = ex.grade(talk, code)
    except LearnerError as exc:
        report = Report.error(ex.ABOUT.id, exc.kind, str(exc))
    except learner.LearnerLimit as exc:
        report = Report(ex.ABOUT.id, "fail", reason=str(exc), limit=exc.kind)
    finally:
        if talk is not None:
            talk.close()
        else:
            spawned.close()
    return report, talk.output() if talk else "", spawned.isolated


def run(ex: ModuleType, code: learner.LearnerCode, spawned: Spawned, workdir: str) -> int:
    """The check, in its own process: the verdict to ``WORKDIR/result.json``; returns the exit code."""
    progress.start(os.path.join(workdir, "progress.jsonl"))
    t0 = time.perf_counter()
    report, output, isolated = _graded(ex, code, spawned)
    report.source, report.function, report.seconds = code.origin, code.function, time.perf_counter() - t0
    report.output, report.isolated = output, isolated
    own, ranks = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    report.cpu_seconds = own.ru_utime + own.ru_stime + ranks.ru_utime + ranks.ru_stime
    data = report.to_json()
    data["picture"], data["output"] = report.picture, report.output
    tmp = os.path.join(workdir, "result.json.tmp")
    with os.fdopen(private_dir.create(tmp), "w") as f:               # a new file: never through a link
        json.dump(data, f)
    os.replace(tmp, os.path.join(workdir, "result.json"))
    return 0
