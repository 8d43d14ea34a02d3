"""A notebook's grader, in a process of its own: ``python -m explainer.workshop.grader_process``.

A notebook kernel has threads, so it must not fork, and the warm jail and the warm reference should outlive one
check: the kernel starts this process once (at its first check, or ahead of it with ``explainer.workshop.start()``)
and keeps it. The process holds one ``grader.Grader`` and answers one JSON line per request on its stdin:
``{"exercise", "code", "env"}`` -> ``{"report"}`` (or ``{"error"}``).

``GraderProcess`` is the kernel's side: it waits for an answer at most the check's hard cap plus ``MARGIN``
(plus ``STARTUP`` the first time); a grader process that died or went silent is ended, the check answered with
an internal error, and a new one started at the next check. The process dies with the kernel
(``PR_SET_PDEATHSIG``), and takes its jail and check processes along.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time

from explainer.distributed.procs import die_with_parent
from explainer.workshop.catalog import EXERCISES
from explainer.workshop.jail.warm import WarmJail
from explainer.workshop.learner import LearnerCode
from explainer.workshop.report import Report

NO_FORK = ("workshop checks run in processes forked from a warm one: Linux (jailed) or macOS (limits only); "
           "on Windows, run them in WSL")
STARTUP = 120.0                  # seconds: imports, the jail's warm process and the references, on a loaded machine
MARGIN = 30.0
CAP = 120.0                      # = grader.hard_cap()'s default (that module loads torch; this one must not)


class GraderProcess:
    """The kernel's handle on its grader process (started when first needed)."""

    def __init__(self, jail: bool | None = None):
        self.jail = jail                          # None: as EXPLAINER_WORKSHOP_JAIL says; False: not isolated
        self.proc: subprocess.Popen | None = None
        self.jail_setting: str | None = None
        self.lock = threading.Lock()
        self.started = 0.0
        self.answered = False

    def start(self) -> None:
        """Start the grader process now (its imports and the warm jail get ready while the learner reads)."""
        setting = os.environ.get("EXPLAINER_WORKSHOP_JAIL", "") if self.jail is None else \
            ("on" if self.jail else "off")
        if self.proc is not None and self.proc.poll() is None and setting == self.jail_setting:
            return
        self.close()
        env = {k: v for k, v in os.environ.items() if k not in ("EXPLAINER_ROOM", "EXPLAINER_SEAT")}
        env["EXPLAINER_WORKSHOP_JAIL"] = setting
        self.proc = subprocess.Popen([sys.executable, "-m", "explainer.workshop.grader_process"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd="/")
        self.jail_setting, self.started, self.answered = setting, time.monotonic(), False

    def check(self, exercise_id: str, code: LearnerCode) -> Report:
        if not hasattr(os, "fork"):
            return Report.error(exercise_id, "internal", NO_FORK, source=code.origin, function=code.function)
        with self.lock:
            self.start()
            env = {k: v for k, v in os.environ.items()
                   if k.startswith("EXPLAINER_") and k not in ("EXPLAINER_ROOM", "EXPLAINER_SEAT")}
            request = json.dumps({"exercise": exercise_id, "code": code.to_json(), "env": env}).encode() + b"\n"
            wait = _cap(env) + MARGIN + (0.0 if self.answered else STARTUP)
            try:
                self.proc.stdin.write(request)
                self.proc.stdin.flush()
                answer = json.loads(self._line(wait))
            except (OSError, ValueError) as exc:
                why = "did not answer in time" if isinstance(exc, TimeoutError) else "stopped"
                self.close()
                return Report.error(exercise_id, "internal", f"the grader's process {why}; the next check starts a "
                                                             f"new one", source=code.origin, function=code.function)
            except BaseException:                         # an interrupted kernel: this check's answer is lost
                self.close()
                raise
            self.answered = True
            if "report" not in answer:
                return Report.error(exercise_id, "internal", f"the grader failed: {answer.get('error')}",
                                    source=code.origin, function=code.function)
            report = Report.from_json(answer["report"])
            report.process_ids, report.check_pid = answer.get("process_ids", []), answer.get("check_pid")
            return report

    def _line(self, seconds: float) -> bytes:
        fd, deadline, buf = self.proc.stdout.fileno(), time.monotonic() + seconds, b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if select.select([fd], [], [], min(left, 1.0))[0]:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise OSError("the grader's process ended")
                buf += chunk
        return buf

    def close(self) -> None:
        if self.proc is None:
            return
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _cap(env: dict) -> float:
    try:
        return max(5.0, float(env.get("EXPLAINER_WORKSHOP_TIMEOUT", CAP)))
    except ValueError:
        return CAP


def main() -> None:
    """The grader process: one ``Grader``, one answer line per request line, until stdin closes. The warm jail
    starts first, so its imports run beside this process's own; while no request waits, the exercises' reference
    work is done one by one (a check that comes first does its own exercise's first)."""
    die_with_parent()
    jail = WarmJail()
    from explainer.workshop.grader import Grader
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)                                          # nothing else reaches the kernel's channel
    idle, buf = list(EXERCISES), b""
    with Grader(jail=jail) as grader:
        while True:
            if b"\n" not in buf and idle and not select.select([0], [], [], 0)[0]:
                grader.warm(idle.pop(0))
                continue
            while b"\n" not in buf:
                chunk = os.read(0, 1 << 20)
                if not chunk:
                    return
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            replies.write(json.dumps(_answer(grader, line)) + "\n")


def _answer(grader, line: bytes) -> dict:
    try:
        req = json.loads(line)
        report = grader.check(req["exercise"], LearnerCode(**req["code"]), env=req["env"])
        data = report.to_json()
        data.update(picture=report.picture, output=report.output)
        return {"report": data, "process_ids": report.process_ids, "check_pid": report.check_pid}
    except Exception as exc:                                  # noqa: BLE001 - answered, the process goes on
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    main()
