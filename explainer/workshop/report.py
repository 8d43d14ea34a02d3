"""What a workshop check returns: a verdict, its named checks, the reason and where, and the picture data.

Statuses and the command line's exit codes: ``pass`` 0, ``fail`` 1 (the reason says what and where),
``error`` 2 (bad input: unknown id, missing, oversized or symlinked file, missing function, syntax error,
unknown field name, an exception raised by the learner's code). A limit the learner's code hits (time,
memory, processes, CPU time, a signal) is a ``fail`` that names the limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from explainer.workshop.panel import panel_html
from explainer.workshop.shown import inert, inert_data

EXIT_CODES = {"pass": 0, "fail": 1, "error": 2}
# What a check that failed without a failing check of its own ends with (the room board counts these names too):
# a bad input's kind (an error), or the limit the learner's code hit, in words.
ERROR_KINDS = ("syntax-error", "missing-function", "missing-file", "too-large", "not-a-notebook", "unknown-field",
               "bad-value", "exception", "internal")
LIMIT_KINDS = ("time limit", "memory limit", "process limit", "CPU time limit", "file size limit",
               "answer too large", "malformed answer", "process ended")
FAILURE_KINDS = ERROR_KINDS + LIMIT_KINDS


class LearnerError(Exception):
    """Bad input or an exception in the learner's code: exit 2, one line. ``kind`` names which."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    required: bool = True          # False: reported (e.g. "minimal"), not part of the verdict

    def to_json(self) -> dict:
        return {"name": inert(self.name), "passed": self.passed, "detail": inert(self.detail),
                "required": self.required}


@dataclass(repr=False)
class Report:
    exercise: str
    status: str                                  # pass | fail | error
    reason: str = ""                             # one line: what went wrong and where ("" on pass)
    checks: list[Check] = field(default_factory=list)
    source: str = ""                             # the file, or "<function NAME>"
    function: str = ""
    error_kind: str | None = None                # error only: unknown-exercise, missing-file, syntax-error, ...
    figures: dict[str, Any] = field(default_factory=dict)    # bytes per step, minimal, cases run, ...
    picture: dict[str, Any] = field(default_factory=dict, repr=False)   # what the panel draws on failure
    seconds: float = 0.0
    cpu_seconds: float = 0.0                     # CPU time of the check's processes (the child and its ranks)
    output: str = ""                             # what the learner's code printed (tail)
    process_ids: list[int] = field(default_factory=list, repr=False)   # the check's process group (grader.py)
    check_pid: int | None = None
    isolated: bool = True                        # False: the learner's code ran under rlimits only (no jail)
    limit: str | None = None                     # a fail without a failed check: which limit (LIMIT_KINDS)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def first_failure(self) -> str | None:
        """The name the gradebook (``--csv``) and the room board count: the first failed required check, else the
        error's kind (``syntax-error``, ...), else the limit the learner's code hit in words (``time limit``, ...);
        None on a pass. Always a check's name or one of ``FAILURE_KINDS``."""
        if self.passed:
            return None
        failed = [c for c in self.checks if c.required and not c.passed]
        if failed:
            return failed[0].name
        kind = self.error_kind or self.limit
        return kind if kind in FAILURE_KINDS else ("internal" if self.status == "error" else "process ended")

    def to_json(self) -> dict:
        """Plain data; every text a learner may have shaped (the reason, the source's name, a check's
        detail, a figure) is inert (``shown.inert``)."""
        reason = inert(self.reason)
        return {"exercise": self.exercise, "passed": self.passed, "status": self.status,
                "exit_code": self.exit_code, "reason": reason, "source": inert(self.source),
                "function": self.function, "error": None if self.status != "error" else
                {"kind": self.error_kind, "message": reason},
                "checks": [c.to_json() for c in self.checks], "figures": inert_data(self.figures),
                "seconds": round(self.seconds, 2), "cpu_seconds": round(self.cpu_seconds, 2),
                "isolated": self.isolated, "limit": self.limit}

    @classmethod
    def from_json(cls, d: dict) -> "Report":
        return cls(exercise=d["exercise"], status=d["status"], reason=d.get("reason", ""),
                   checks=[Check(**c) for c in d.get("checks", [])], source=d.get("source", ""),
                   function=d.get("function", ""), error_kind=(d.get("error") or {}).get("kind"),
                   figures=d.get("figures", {}), picture=d.get("picture", {}), seconds=d.get("seconds", 0.0),
                   cpu_seconds=d.get("cpu_seconds", 0.0), isolated=d.get("isolated", True),
                   output=d.get("output", ""), limit=d.get("limit"))

    @classmethod
    def error(cls, exercise: str, kind: str, message: str, **kw) -> "Report":
        return cls(exercise=exercise, status="error", reason=message, error_kind=kind, **kw)

    def __repr__(self) -> str:
        word = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}[self.status]
        return f"<workshop check {self.exercise}: {word}" + (f": {self.reason}>" if self.reason else ">")

    def _repr_html_(self) -> str:
        return panel_html(self)          # a failure's picture loads its exercise (torch): in a notebook only

    def text(self) -> str:
        """The terminal form: verdict line, one line per check, the reason; learner text inert, and what the
        learner printed only after ``  | `` (never a line of the grader's own)."""
        word = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}[self.status]
        lines = [f"{self.exercise}: {word} ({inert(self.source)})"]
        width = max((len(c.name) for c in self.checks), default=0)
        for c in self.checks:
            mark = "✓" if c.passed else ("✗" if c.required else "·")
            lines.append(f"  {mark} {inert(c.name):{width}s}  {inert(c.detail)}")
        for k, v in self.figures.items():
            lines.append(f"  {inert(k)}: {inert(v)}")
        if self.output.strip():
            lines.append("printed during the check:")
            lines += ["  | " + line for line in inert(self.output.rstrip(), newlines=True).split("\n")[-20:]]
        if self.status != "pass":
            lines.append(("error: " if self.status == "error" else "reason: ") + inert(self.reason))
        return "\n".join(lines)


def verdict(exercise: str, checks: list[Check], **kw) -> Report:
    """pass when every required check passed; the reason is the first failed required check's detail."""
    failed = [c for c in checks if c.required and not c.passed]
    return Report(exercise=exercise, status="fail" if failed else "pass",
                  reason=f"{failed[0].name}: {failed[0].detail}" if failed else "", checks=checks, **kw)
