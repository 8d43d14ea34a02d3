"""Grade a folder of submissions for a room (``workshop check ID DIR/ [--csv FILE]``).

Every entry of the folder is accounted for: ``.py`` and ``.ipynb`` files (any case of the suffix) are
graded, one row each (a notebook's answer is the code cell tagged ``exercise:ID``); everything else is
listed as skipped with the reason (a symlink is refused: it could point anywhere). An interrupt keeps the
rows already finished (``Interrupted.reports``). ``write_csv`` is the gradebook: one row per submission
and exercise with its verdict, the first failing check, and the seconds it took.
"""

from __future__ import annotations

import csv
from pathlib import Path

from explainer.errors import UsageError
from explainer.workshop import check_file
from explainer.workshop.report import Report, first_failure

GRADED = (".py", ".ipynb")


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) during a folder's grading: the reports finished so far."""

    def __init__(self, reports: list[Report]):
        super().__init__(f"interrupted after {len(reports)} submission(s)")
        self.reports = reports


def survey(folder: str | Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(files to grade, [(entry, why it is skipped)]) for every entry of ``folder``."""
    graded, skipped = [], []
    for p in sorted(Path(folder).iterdir()):
        if p.is_symlink():
            skipped.append((p, "a symlink: refused (hand in the file itself)"))
        elif p.is_dir():
            skipped.append((p, "a folder (only the files directly in the folder are graded)"))
        elif not p.is_file():
            skipped.append((p, "not a regular file"))
        elif p.suffix.lower() in GRADED:
            graded.append(p)
        else:
            skipped.append((p, f"not a .py or .ipynb file ({p.suffix or 'no suffix'})"))
    if not graded:
        raise UsageError(f"folder {str(folder)!r} holds no .py or .ipynb files ({len(skipped)} other entries); "
                         f"accepted: a .py file, a notebook, or a folder of them")
    return graded, skipped


def submissions(folder: str | Path) -> list[Path]:
    return survey(folder)[0]


def grade(exercise_id: str, folder: str | Path, on_report=None) -> list[Report]:
    reports: list[Report] = []
    try:
        for path in submissions(folder):
            report = check_file(exercise_id, path)
            reports.append(report)
            if on_report:
                on_report(report)
    except KeyboardInterrupt:
        raise Interrupted(reports) from None
    return reports


def table(reports: list[Report], skipped: list[tuple[Path, str]] = ()) -> str:
    """file | result | seconds | reason (the first failed check, or the error), one row per file; skipped
    entries after them."""
    word = {"pass": "pass", "fail": "FAIL", "error": "ERROR"}
    names = [Path(r.source).name for r in reports] + [p.name for p, _ in skipped]
    w = max([len("file")] + [len(n) for n in names])
    lines = [f"{'file':{w}s}  {'result':6s}  {'s':>5s}  reason", f"{'-' * w}  ------  -----  ------"]
    for n, r in zip(names, reports):
        reason = r.reason if len(r.reason) <= 160 else r.reason[:157] + "..."
        lines.append(f"{n:{w}s}  {word[r.status]:6s}  {r.seconds:5.1f}  {reason}")
    for p, why in skipped:
        lines.append(f"{p.name:{w}s}  {'skip':6s}  {'':>5s}  {why}")
    passed = sum(r.passed for r in reports)
    lines.append(f"{passed}/{len(reports)} passed" + (f", {len(skipped)} skipped" if skipped else ""))
    return "\n".join(lines)


def summary_json(exercise_id: str, reports: list[Report], skipped: list[tuple[Path, str]] = ()) -> dict:
    """One object (``workshop check ID DIR --json``): the folder passes when every file passes; one check per file."""
    return {"exercise": exercise_id, "passed": all(r.passed for r in reports),
            "checks": [{"name": Path(r.source).name, "passed": r.passed, "detail": r.reason or "passed"}
                       for r in reports],
            "files": [r.to_json() for r in reports],
            "skipped": [{"name": p.name, "reason": why} for p, why in skipped]}


def write_csv(path: str | Path, exercise_id: str, reports: list[Report],
              skipped: list[tuple[Path, str]] = ()) -> None:
    """The gradebook: submission, exercise, verdict, first failing check, reason, seconds (one row each)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["submission", "exercise", "verdict", "first failing check", "reason", "seconds"])
        for r in reports:
            w.writerow([Path(r.source).name, exercise_id, r.status, first_failure(r) or "", r.reason, f"{r.seconds:.1f}"])
        for p, why in skipped:
            w.writerow([p.name, exercise_id, "skipped", "", why, ""])
