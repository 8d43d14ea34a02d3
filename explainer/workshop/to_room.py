"""The one hook between a workshop check and the room board: after the verdict is computed, post it.

``report_verdict(report)`` sends the exercise, passed, the first failing check's name and the seat to the
board ``EXPLAINER_ROOM`` names (``explainer.room.client``; nothing when it is unset). It reads the verdict,
never changes it, and sends nothing of the learner's code.
"""

from __future__ import annotations

from explainer.room import client
from explainer.workshop.report import Report, first_failure


def report_verdict(report: Report, seat: str | None = None, wait: bool = False):
    """Post ``report``'s verdict if ``EXPLAINER_ROOM`` is set (``wait``: at most ``client.TIMEOUT`` s)."""
    return client.report_verdict(report.exercise, report.passed, first_failure(report), seat=seat, wait=wait)
