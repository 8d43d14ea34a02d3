"""The workshop kit: exercises whose checkers run the real mechanism.

    from explainer.workshop import check
    check("accept", entropy_bound_accept)        # a function defined in a notebook cell, or a .py path

``check`` runs the exercise's checker in a process of its own (the learner's code never runs in the
caller's process), bounded in time, and returns a ``Report``; in a notebook it shows as a pass/fail
panel with the picture of the failure. The command line: ``python -m explainer workshop list|check``.
"""

from __future__ import annotations

import os

from explainer.workshop import learner, sandbox, to_room
from explainer.workshop.exercises import Exercise, EXERCISES, get
from explainer.workshop.report import Check, LearnerError, Report


__all__ = ["check", "check_file", "EXERCISES", "Exercise", "Report", "Check"]


def check_file(exercise_id: str, path: str | os.PathLike) -> Report:
    """Grade one .py file (the CLI's ``workshop check ID FILE``)."""
    ex = get(exercise_id)
    try:
        code = learner.from_file(path, ex.function, ex.id)
    except LearnerError as exc:
        return Report.error(ex.id, exc.kind, str(exc), source=str(path), function=ex.function)
    return sandbox.run(ex.id, code)


def check(exercise_id: str, solution) -> Report:
    """Grade ``solution`` (a function object, or a path to a .py file) for ``exercise_id``; with
    ``EXPLAINER_ROOM`` set, the verdict also goes to the room board (in the background)."""
    report = _check(get(exercise_id), solution)
    to_room.report_verdict(report)
    return report


def _check(ex: Exercise, solution) -> Report:
    if isinstance(solution, (str, os.PathLike)):
        return check_file(ex.id, solution)
    try:
        code = learner.from_function(solution, ex.function)
    except LearnerError as exc:
        name = getattr(solution, "__name__", type(solution).__name__)
        return Report.error(ex.id, exc.kind, str(exc), source=f"function {name}", function=ex.function)
    return sandbox.run(ex.id, code)
