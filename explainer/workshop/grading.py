"""Grade a folder of submissions: every ``.py`` file in it, one row per file (``workshop check ID DIR/``)."""

from __future__ import annotations

from pathlib import Path

from explainer.errors import UsageError
from explainer.workshop import check_file
from explainer.workshop.report import Report


def submissions(folder: str | Path) -> list[Path]:
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.suffix == ".py")
    if not files:
        raise UsageError(f"folder {str(folder)!r} holds no .py files; accepted: a .py file or a folder of them")
    return files


def grade(exercise_id: str, folder: str | Path, on_report=None) -> list[Report]:
    reports = []
    for path in submissions(folder):
        report = check_file(exercise_id, path)
        reports.append(report)
        if on_report:
            on_report(report)
    return reports


def table(reports: list[Report]) -> str:
    """file | result | seconds | reason (the first failed check, or the error), one row per file."""
    word = {"pass": "pass", "fail": "FAIL", "error": "ERROR"}
    names = [Path(r.source).name for r in reports]
    w = max([len("file")] + [len(n) for n in names])
    lines = [f"{'file':{w}s}  {'result':6s}  {'s':>5s}  reason", f"{'-' * w}  ------  -----  ------"]
    for n, r in zip(names, reports):
        reason = r.reason if len(r.reason) <= 160 else r.reason[:157] + "..."
        lines.append(f"{n:{w}s}  {word[r.status]:6s}  {r.seconds:5.1f}  {reason}")
    passed = sum(r.passed for r in reports)
    lines.append(f"{passed}/{len(reports)} passed")
    return "\n".join(lines)


def summary_json(exercise_id: str, reports: list[Report]) -> dict:
    """One object (``workshop check ID DIR --json``): the folder passes when every file passes; one check per file."""
    return {"exercise": exercise_id, "passed": all(r.passed for r in reports),
            "checks": [{"name": Path(r.source).name, "passed": r.passed, "detail": r.reason or "passed"}
                       for r in reports],
            "files": [r.to_json() for r in reports]}
