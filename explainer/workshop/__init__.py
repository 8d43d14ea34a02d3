"""The workshop kit: exercises whose checkers run the real mechanism.

    from explainer.workshop import check
    check("accept", entropy_bound_accept)        # a function defined in a notebook cell, or a .py path

``check`` grades in the notebook's grader process (``grader_process.py``: one per kernel, started at the first
check or by ``start()``; it keeps a warm jail and the warm reference, and runs each check in fresh processes:
the learner's code in the jail, the verdict outside it). It returns a ``Report``; in a notebook it shows as a
pass/fail panel with the picture of the failure, and it is posted to the joined room (``explainer.room``). The
command line: ``python -m explainer workshop list|check``. This module loads neither torch nor the jail.
"""

from __future__ import annotations

import atexit
import os

from explainer.workshop import catalog, learner
from explainer.workshop.catalog import EXERCISES, About, get
from explainer.workshop.grader_process import GraderProcess
from explainer.workshop.report import Check, LearnerError, Report


__all__ = ["check", "check_file", "start", "EXERCISES", "About", "Report", "Check"]
GRADER = GraderProcess()                         # this kernel's grader process
atexit.register(GRADER.close)                    # at the kernel's exit it ends cleanly (its folders removed)


def start() -> None:
    """Start this kernel's grader process now, so the first check does not wait for its imports."""
    GRADER.start()


def check_file(exercise_id: str, path: str | os.PathLike) -> Report:
    """Grade one .py file (or a notebook's tagged cell) in this kernel's grader process."""
    ex = get(exercise_id)
    try:
        code = learner.from_file(path, ex.function, ex.id)
    except LearnerError as exc:
        return Report.error(ex.id, exc.kind, str(exc), source=str(path), function=ex.function)
    return GRADER.check(ex.id, code)


def check(exercise_id: str, solution) -> Report:
    """Grade ``solution`` (a function object, or a path to a .py file) for ``exercise_id``; with a room joined
    (or ``EXPLAINER_ROOM`` set), the verdict also goes to the room board (in the background)."""
    report = _check(get(exercise_id), solution)
    catalog.report_verdict(report)
    return report


def _check(ex: About, solution) -> Report:
    if isinstance(solution, (str, os.PathLike)):
        return check_file(ex.id, solution)
    try:
        code = learner.from_function(solution, ex.function)
    except LearnerError as exc:
        name = getattr(solution, "__name__", type(solution).__name__)
        return Report.error(ex.id, exc.kind, str(exc), source=f"function {name}", function=ex.function)
    return GRADER.check(ex.id, code)
