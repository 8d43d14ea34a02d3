"""``python -m explainer workshop list`` and ``python -m explainer workshop check ID FILE|DIR [--json]``.

Exit codes: 0 passed, 1 failed (the reason says what and where), 2 bad input (unknown
id, missing file or function, syntax error, unknown field name, an exception raised by the learner's code).
A folder is graded file by file (a table, one row per file): 0 when every file passes, else 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from explainer.errors import UsageError
from explainer.workshop import EXERCISES, check_file, get, grading, sandbox


HELP = "workshop exercises: list them, or check a solution file (or a folder of them) with the real engine"


def configure(parser):
    parser.add_argument("action", nargs="?", default="list", metavar="ACTION", help="list (default) or check")
    parser.add_argument("exercise", nargs="?", metavar="ID", help="exercise id (see `workshop list`)")
    parser.add_argument("path", nargs="?", metavar="FILE|DIR", help="a .py file defining the function, or a folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    sandbox.START_METHOD = "fork"        # this process is single-threaded: fork the checks from it
    if args.action == "list":
        if args.json:
            print(json.dumps([{"id": e.id, "function": e.signature, "notebook": e.notebook, "minutes": e.minutes,
                               "teaches": e.teaches, "summary": e.summary} for e in EXERCISES.values()], indent=2))
            return 0
        for e in EXERCISES.values():
            print(f"{e.id:17s} {e.minutes:3d} min  {e.notebook}\n{'':17s} write {e.signature}\n"
                  f"{'':17s} {e.summary}")
        return 0
    if args.action != "check":
        raise UsageError(f"unknown action {args.action!r}; accepted: list, check")
    if not args.exercise:
        raise UsageError(f"check needs an exercise id; accepted: {', '.join(EXERCISES)}")
    ex = get(args.exercise)
    if not args.path:
        raise UsageError(f"check {ex.id} needs a FILE (defining {ex.function}) or a DIR of .py files")
    path = Path(args.path)
    if path.is_dir():
        return _folder(ex.id, path, args.json)
    report = check_file(ex.id, path)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif report.status == "error":
        print(f"error: {report.reason}", file=sys.stderr)
    else:
        print(report.text())
    return report.exit_code


def _folder(exercise_id: str, folder: Path, as_json: bool) -> int:
    files = grading.submissions(folder)                  # bad input before any work
    print(f"grading {len(files)} file(s) for {exercise_id} ...", file=sys.stderr, flush=True)
    reports = grading.grade(exercise_id, folder, on_report=lambda r: print(
        f"  {Path(r.source).name}: {r.status}", file=sys.stderr, flush=True))
    if as_json:
        print(json.dumps(grading.summary_json(exercise_id, reports), indent=2))
    else:
        print(grading.table(reports))
    return 0 if all(r.passed for r in reports) else 1
