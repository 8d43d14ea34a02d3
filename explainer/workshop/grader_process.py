"""A notebook's grader, in a process of its own: ``python -c "from explainer.workshop.grader_process import main; main()"``.

A notebook kernel has threads, so it must not fork, and the warm jail and the warm reference should outlive one
check: the kernel starts this process once (at its first check, or ahead of it with ``explainer.workshop.start()``)
and keeps it. The process holds one ``grader.Grader`` and answers one JSON line per request on its stdin:
``{"exercise", "code", "env"}`` -> ``{"report"}`` (or ``{"error"}``).

Before each step that could take long (start-up, the sweep of killed sessions, the jail's imports, a reference,
a check) the grader process says so on the same channel, ``{"phase", "budget", "t"}``, and in its log.
``GraderProcess`` is the kernel's side: it waits for the answer while the current phase is within its budget plus
``MARGIN`` (a check's: its hard cap); a grader process that died or overran its phase is ended (after a SIGUSR1
that makes it write every thread's stack to its log), and the check answered at once with an internal error that
names the phase and the log; a new grader starts at the next check. The log, one per user,
``$XDG_STATE_HOME/explainer/grader.log`` (``~/.local/state``; 0600, never through a link, the previous one kept
as ``grader.log.1`` past ``LOG_LIMIT``), holds each grader's phases, its stderr and those stacks. The process
dies with the kernel (``PR_SET_PDEATHSIG``), and takes its jail and check processes along.
"""

from __future__ import annotations

import faulthandler
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from explainer.distributed.procs import die_with_parent
from explainer.workshop.catalog import EXERCISES
from explainer.workshop.jail.warm import STARTUP as JAIL_STARTUP
from explainer.workshop.jail.warm import WarmJail
from explainer.workshop.learner import LearnerCode
from explainer.workshop.report import Report

NO_FORK = ("workshop checks run in processes forked from a warm one: Linux (jailed) or macOS (limits only); "
           "on Windows, run them in WSL")
MARGIN = 30.0                    # seconds past a phase's budget (a loaded machine) before the kernel gives up on it
FIRST = 30.0                     # seconds until a new grader process says its first phase
CAP = 120.0                      # = grader.hard_cap()'s default (that module loads torch; this one must not)
LOG_LIMIT = 1 << 20              # bytes of grader.log before it is moved to grader.log.1


def log_path() -> str:
    """This user's grader log: ``$XDG_STATE_HOME/explainer/grader.log`` (default ``~/.local/state``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "explainer", "grader.log")


def open_log() -> int:
    """The log opened for appending (0600 in a 0700 folder, never through a link); /dev/null if it cannot be."""
    path = log_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        st = os.lstat(path) if os.path.lexists(path) else None
        if st is not None and (not os.path.isfile(path) or os.path.islink(path) or st.st_size > LOG_LIMIT):
            os.replace(path, path + ".1")                   # too long, or not a plain file: set aside
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


def log_line(fd: int, text: str) -> None:
    try:
        os.write(fd, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n".encode())
    except OSError:
        pass


class GraderProcess:
    """The kernel's handle on its grader process (started when first needed)."""

    def __init__(self, jail: bool | None = None):
        self.jail = jail                          # None: as EXPLAINER_WORKSHOP_JAIL says; False: not isolated
        self.proc: subprocess.Popen | None = None
        self.jail_setting: str | None = None
        self.lock = threading.Lock()
        self.phase: dict = {}                     # the grader's latest {"phase", "budget", "t"}
        self.buf = b""

    def start(self) -> None:
        """Start the grader process now (its imports and the warm jail get ready while the learner reads)."""
        setting = os.environ.get("EXPLAINER_WORKSHOP_JAIL", "") if self.jail is None else \
            ("on" if self.jail else "off")
        if self.proc is not None and self.proc.poll() is None and setting == self.jail_setting:
            return
        self.close()
        env = {k: v for k, v in os.environ.items() if k not in ("EXPLAINER_ROOM", "EXPLAINER_SEAT")}
        env["EXPLAINER_WORKSHOP_JAIL"] = setting
        log = open_log()
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", "from explainer.workshop.grader_process import main; "
                                          "main()"], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd="/")
        finally:
            os.close(log)
        self.jail_setting, self.buf = setting, b""
        self.phase = {"phase": "starting the grader's process", "budget": FIRST, "t": time.time()}

    def check(self, exercise_id: str, code: LearnerCode) -> Report:
        if not hasattr(os, "fork"):
            return Report.error(exercise_id, "internal", NO_FORK, source=code.origin, function=code.function)
        with self.lock:
            self.start()
            env = {k: v for k, v in os.environ.items()
                   if k.startswith("EXPLAINER_") and k not in ("EXPLAINER_ROOM", "EXPLAINER_SEAT")}
            request = json.dumps({"exercise": exercise_id, "code": code.to_json(), "env": env}).encode() + b"\n"
            sent = time.time()
            if self.phase.get("phase") == "ready":                # idle: it starts the check at once
                self.phase = {"phase": f"checking {exercise_id}", "budget": _cap(env), "t": sent}
            try:
                self.proc.stdin.write(request)
                self.proc.stdin.flush()
                answer = self._answer(exercise_id, _cap(env), sent)
            except (OSError, ValueError) as exc:
                why = self._hung() if isinstance(exc, TimeoutError) else \
                    f"the grader's process stopped (during {self.phase.get('phase')!r}); its log: {log_path()}"
                self.close()
                return Report.error(exercise_id, "internal", f"{why}; the next check starts a new one",
                                    source=code.origin, function=code.function)
            except BaseException:                         # an interrupted kernel: this check's answer is lost
                self.close()
                raise
            if "report" not in answer:
                return Report.error(exercise_id, "internal", f"the grader failed: {answer.get('error')}",
                                    source=code.origin, function=code.function)
            report = Report.from_json(answer["report"])
            report.process_ids, report.check_pid = answer.get("process_ids", []), answer.get("check_pid")
            return report

    def _answer(self, exercise_id: str, cap: float, sent: float) -> dict:
        """The grader's answer line, reading its phase lines on the way; ``TimeoutError`` when the current
        phase overran its budget plus ``MARGIN`` (a check's budget is at least ``cap``). Once it is ready with
        this request sent, it is checking it."""
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                msg = json.loads(line)
                if "phase" not in msg:
                    return msg
                if msg["phase"] == "ready":
                    msg = {"phase": f"checking {exercise_id}", "budget": cap, "t": max(msg["t"], sent)}
                elif msg["phase"].startswith("checking "):
                    msg["budget"] = max(msg.get("budget") or 0.0, cap)
                self.phase = msg
            if select.select([fd], [], [], 0)[0]:                 # what it already said, before judging the time
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise OSError("the grader's process ended")
                self.buf += chunk
                continue
            budget = self.phase.get("budget")
            left = 1.0 if budget is None else self.phase["t"] + budget + MARGIN - time.time()
            if left <= 0:
                raise TimeoutError
            if select.select([fd], [], [], min(left, 1.0))[0]:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise OSError("the grader's process ended")
                self.buf += chunk

    def _hung(self) -> str:
        """Say it: one line in the grader's log, every thread's stack there (SIGUSR1), and the reason."""
        phase, budget = self.phase.get("phase"), self.phase.get("budget") or 0.0
        waited = time.time() - self.phase.get("t", time.time())
        why = (f"the grader's process stopped answering during {phase!r} ({waited:.0f} s; its limit is "
               f"{budget + MARGIN:g} s)")
        log = open_log()
        log_line(log, f"kernel {os.getpid()}: {why}; ending grader {self.proc.pid} (its threads' stacks follow "
                      f"if it can still write them)")
        os.close(log)
        try:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
        except OSError:
            pass
        return f"{why}; what it was doing is in its log: {log_path()}"

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
    work is done one by one (a check that comes first does its own exercise's first). Each phase is said to the
    kernel and written to the log (this process's stderr); SIGUSR1 writes every thread's stack there."""
    die_with_parent()
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)                                          # nothing else reaches the kernel's channel

    def say(phase: str, budget: float | None) -> None:
        log_line(2, f"grader {os.getpid()}: {phase}" + (f" (limit {budget:g} s)" if budget is not None else ""))
        replies.write(json.dumps({"phase": phase, "budget": budget, "t": time.time()}) + "\n")

    say("starting the jail's warm process", JAIL_STARTUP)
    jail = WarmJail()
    from explainer.workshop.grader import Grader
    idle, buf = list(EXERCISES), b""
    with Grader(jail=jail, phase=say) as grader:
        while True:
            if b"\n" not in buf and idle and not select.select([0], [], [], 0)[0]:
                grader.warm(idle.pop(0))
                continue
            if b"\n" not in buf:
                say("ready", None)
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
