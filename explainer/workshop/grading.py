"""Grade a folder of submissions for a room (``workshop check ID DIR/ [--csv FILE]``): a gradebook no hand-in
can break.

Every entry of the folder ends as one row, whatever its name or contents: ``.py`` and ``.ipynb`` files (any
case of the suffix) are graded (a notebook's answer is the code cell tagged ``exercise:ID``); everything else
is skipped with the reason: a symlink (it could point anywhere), a folder, a special file, another suffix, a
notebook that is not shaped like one. A file the grader itself fails on is an ``ERROR`` row naming the
failure, and the next file is graded. An interrupt keeps the rows already finished (``Interrupted.rows``).

Names and reasons are shown through ``shown.inert`` (a file name may hold escape sequences, newlines or bytes
that are not UTF-8), so each row is one line of the grader's own text; ``write_csv`` also neutralizes
spreadsheet formulas (``shown.csv_cell``) and writes the whole gradebook or nothing, through a temporary file
made exclusively (never through a planted link).
"""

from __future__ import annotations

import csv
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from explainer.errors import UsageError
from explainer.workshop.report import Report
from explainer.workshop.shown import clip, csv_cell, inert

GRADED = (".py", ".ipynb")
NAME_WIDTH, REASON_WIDTH = 48, 160              # the terminal table's columns (the CSV and JSON keep all)
SKIPPED_KINDS = ("not-a-notebook",)             # a graded file that turns out not to be a submission


@dataclass
class Row:
    """One entry of the folder: its name as shown (inert), and its report or why it was skipped."""
    name: str
    report: Report | None = None
    skipped: str = ""


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) during a folder's grading: the rows finished so far."""

    def __init__(self, rows: list[Row]):
        super().__init__(f"interrupted after {len(rows)} entries")
        self.rows = rows


def _skip_reason(entry: os.DirEntry) -> str:
    """Why ``entry`` is not graded ('' when it is a submission); never follows a symlink."""
    if entry.is_symlink():
        return "a symlink: refused (hand in the file itself)"
    if entry.is_dir(follow_symlinks=False):
        return "a folder (only the files directly in the folder are graded)"
    if not entry.is_file(follow_symlinks=False):
        return "not a regular file"
    suffix = os.path.splitext(entry.name)[1]
    if suffix.lower() not in GRADED:
        return f"not a .py or .ipynb file ({inert(suffix) or 'no suffix'})"
    return ""


def survey(folder: str | Path) -> list[tuple[str, str]]:
    """Every entry of ``folder`` in name order: (path, '' to grade it or why it is skipped)."""
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: os.fsencode(e.name))
    plan = [(e.path, _skip_reason(e)) for e in entries]
    if not any(not why for _, why in plan):
        raise UsageError(f"folder {inert(folder)!r} holds no .py or .ipynb files ({len(plan)} other entries); "
                         f"accepted: a .py file, a notebook, or a folder of them")
    return plan


def grade(check_file, exercise_id: str, plan: list[tuple[str, str]], on_row=None) -> list[Row]:
    """One row per entry of ``plan`` (``survey``): ``check_file(exercise_id, path)`` grades each submission."""
    rows: list[Row] = []
    try:
        for path, why in plan:
            name = inert(os.path.basename(path))
            if not why:
                row = _graded(check_file, exercise_id, path, name)
            else:
                row = Row(name, skipped=why)
            rows.append(row)
            if on_row:
                on_row(row)
    except KeyboardInterrupt:
        raise Interrupted(rows) from None
    return rows


def _graded(check_file, exercise_id: str, path: str, name: str) -> Row:
    try:
        report = check_file(exercise_id, path)
    except Exception as exc:                                 # noqa: BLE001 - one file never ends the gradebook
        report = Report.error(exercise_id, "internal", f"the grader failed on this file ({type(exc).__name__}: "
                                                       f"{inert(str(exc))[:200]})", source=path)
    if report.error_kind in SKIPPED_KINDS:
        return Row(name, skipped=report.reason)
    return Row(name, report)


def table(rows: list[Row]) -> str:
    """file | result | seconds | reason: one line per entry, every field inert; the count last."""
    word = {"pass": "pass", "fail": "FAIL", "error": "ERROR"}
    names = [clip(r.name, NAME_WIDTH) for r in rows]
    w = max([len("file")] + [len(n) for n in names])
    lines = [f"{'file':{w}s}  {'result':6s}  {'s':>5s}  reason", f"{'-' * w}  ------  -----  ------"]
    for n, row in zip(names, rows):
        r = row.report
        if r is None:
            lines.append(f"{n:{w}s}  {'skip':6s}  {'':>5s}  {clip(inert(row.skipped), REASON_WIDTH)}")
        else:
            lines.append(f"{n:{w}s}  {word[r.status]:6s}  {r.seconds:5.1f}  {clip(inert(r.reason), REASON_WIDTH)}")
    graded = [r.report for r in rows if r.report is not None]
    skipped = len(rows) - len(graded)
    lines.append(f"{sum(r.passed for r in graded)}/{len(graded)} passed" + (f", {skipped} skipped" if skipped else ""))
    return "\n".join(lines)


def summary_json(exercise_id: str, rows: list[Row]) -> dict:
    """One object (``workshop check ID DIR --json``): the folder passes when every file passes; one check per
    graded file; every name and reason inert."""
    graded = [r for r in rows if r.report is not None]
    return {"exercise": exercise_id, "passed": all(r.report.passed for r in graded),
            "checks": [{"name": r.name, "passed": r.report.passed, "detail": inert(r.report.reason) or "passed"}
                       for r in graded],
            "files": [{**r.report.to_json(), "name": r.name} for r in graded],
            "skipped": [{"name": r.name, "reason": inert(r.skipped)} for r in rows if r.report is None]}


def write_csv(path: str | Path, exercise_id: str, rows: list[Row]) -> None:
    """The gradebook, one row per entry: submission, exercise, verdict, first failing check, reason, seconds.
    Written whole to a new temporary file beside ``path`` (``mkstemp``: a random name, created exclusively, never
    through a link a learner planted in a shared folder), then renamed over ``path`` (a symlink at ``path`` is
    replaced, not followed). ``UsageError`` names the file when it cannot be written."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)                        # as an ordinary new file would be
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["submission", "exercise", "verdict", "first failing check", "reason", "seconds"])
            for row in rows:
                r = row.report
                cells = ([row.name, exercise_id, "skipped", "", row.skipped, ""] if r is None else
                         [row.name, exercise_id, r.status, r.first_failure() or "", r.reason, f"{r.seconds:.1f}"])
                w.writerow([csv_cell(c) for c in cells])
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise UsageError(f"cannot write the gradebook {inert(str(path))!r}: {exc.strerror or exc}") from None
