"""``python -m explainer workshop list`` and ``python -m explainer workshop check ID FILE|DIR [--json] [--csv FILE]``.

Exit codes: 0 passed, 1 failed (the reason says what and where, a limit the learner's code hit included),
2 bad input (unknown id, missing, oversized (> 1 MB) or symlinked file, missing function, syntax error,
unknown field name, an exception raised by the learner's code). A folder is graded file by file (.py and
.ipynb; a table, one row per file, the other entries listed as skipped with the reason): 0 when every
file passes, else 1; ``--csv FILE`` also writes the gradebook. Ctrl-C prints the rows finished and exits 130.
Where the learner's code cannot be jailed, one line on stderr says the checks are not isolated.
With a room joined (``room join``) or ``EXPLAINER_ROOM`` set, each verdict also goes to the room board
(``explainer.room``), after it is shown; in a folder, one seat per file, named after it.

The checks run in one grading session (``workshop.grader.Grader``, in this process: the warm jail and the
reference once for a whole folder); bad input is refused before the session starts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from explainer.errors import UsageError
from explainer.workshop import catalog, grading, learner
from explainer.workshop.catalog import EXERCISES, get
from explainer.workshop.grader_process import NO_FORK
from explainer.workshop.jail.warm import WarmJail
from explainer.workshop.report import Report
from explainer.workshop.shown import inert


HELP = "workshop exercises: list them, or check a solution file (or a folder of them) with the real engine"
ENGINE = False           # the engine's EXPLAINER_* settings are checked in _grader, once the jail is starting


def configure(parser):
    parser.add_argument("action", nargs="?", default="list", metavar="ACTION", help="list (default) or check")
    parser.add_argument("exercise", nargs="?", metavar="ID", help="exercise id (see `workshop list`)")
    parser.add_argument("path", nargs="?", metavar="FILE|DIR", help="a .py file defining the function, or a folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--csv", metavar="FILE", help="with a folder: also write the gradebook (one row per file)")


def _grader(exercise_id: str):
    """This command's grading session: the warm jail starts first (its imports run beside ours), then torch and
    the exercises load here, only to grade."""
    if not hasattr(os, "fork"):
        raise UsageError(NO_FORK)
    jail = WarmJail()
    from explainer.distributed.device_communicators.comm_config import validate_env
    try:
        validate_env()                          # the settings the check's rank processes read (exit 2 if bad)
    except UsageError:
        jail.close()
        raise
    from explainer.workshop.grader import Grader
    return Grader((exercise_id,), jail=jail)


def run(args) -> int:
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
    if path.is_dir() and not path.is_symlink():
        return _folder(ex.id, path, args.json, args.csv)
    if args.csv:
        raise UsageError("--csv writes a folder's gradebook; give a folder (DIR) to grade")
    try:
        code = learner.from_file(path, ex.function, ex.id)
    except learner.LearnerError as exc:
        report = Report.error(ex.id, exc.kind, str(exc), source=str(path), function=ex.function)
    else:
        with _grader(ex.id) as grader:
            _notice(grader)
            report = grader.check(ex.id, code)
    if args.json:
        print(json.dumps(report.to_json(), indent=2), flush=True)
    elif report.status == "error":
        print(f"error: {inert(report.reason)}", file=sys.stderr, flush=True)
    else:
        print(report.text(), flush=True)
    catalog.report_verdict(report, wait=True)          # a joined room sees it (<= 1.5 s more)
    return _leave(report.exit_code)


def _notice(grader) -> None:
    line = grader.jail.notice()                 # this session's own: the jail, or why not
    if line:
        print(line, file=sys.stderr, flush=True)


def _row(row) -> None:
    print(f"  {row.name}: {row.report.status if row.report else 'skipped'}", file=sys.stderr, flush=True)
    if row.report is not None:                    # a hand-in per learner: its seat is named after the file
        catalog.report_verdict(row.report, seat=row.name.rsplit(".", 1)[0], wait=True, instructor=True)


def _folder(exercise_id: str, folder: Path, as_json: bool, csv_path: str | None) -> int:
    plan = grading.survey(folder)                        # bad input before any work
    graded = sum(1 for _, why in plan if not why)
    print(f"grading {graded} file(s) for {exercise_id} ..." + (f" ({len(plan) - graded} other entries skipped)"
                                                               if len(plan) > graded else ""),
          file=sys.stderr, flush=True)
    interrupted = False
    try:
        with _grader(exercise_id) as grader:
            _notice(grader)
            rows = grading.grade(grader.check_file, exercise_id, plan, on_row=_row)
    except grading.Interrupted as exc:
        rows, interrupted = exc.rows, True
    if as_json:
        print(json.dumps({**grading.summary_json(exercise_id, rows), "interrupted": interrupted}, indent=2))
    else:
        print(grading.table(rows))
    if csv_path:
        grading.write_csv(csv_path, exercise_id, rows)
    if interrupted:
        done = sum(1 for r in rows if r.report is not None)
        print(f"interrupted: {done} of {graded} file(s) graded", file=sys.stderr, flush=True)
        return _leave(130)
    return _leave(0 if all(r.report.passed for r in rows if r.report is not None) else 1)


def _leave(code: int) -> int:
    """The real command line ends here once all is said, the session closed and the room told: without the
    interpreter's teardown of torch (0.1 to 1 s). Called from Python, it returns the code."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", "") == "explainer.__main__":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
