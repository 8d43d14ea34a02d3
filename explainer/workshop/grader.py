"""A grading session: the warm jail and the warm reference once, then every check in fresh processes of its own.

``Grader()`` starts the warm jail (``jail.warm.WarmJail``: bubblewrap around a process that imports torch and the
exercises once) and does each exercise's reference work once (``warm``: the exercise module's ``reference``, a real
generation, PP=1's tokens), ahead of time or at its first check. ``check(exercise_id, code)`` then reads top to
bottom:

1. ``jail.spawn()``: a fresh learner's process in the warm jail (its own namespaces, uid, scratch folder, limits);
2. ``os.fork()``: the trusted check process, in a session of its own (``check_process.run``): it asks the learner's
   process over pipes, computes the verdict (the exercise's ``grade``) and writes it to the check's work folder;
3. the watchdog, here: a learner phase may last its budget plus ``GRACE``, the whole check ``hard_cap()``; then
   the check's process group is ended (``process_group.end``: the gate's rank processes with it) and their
   shared-memory segments unlinked; the learner's process dies with the check (its keeper sees the check's
   end of the keeper socket close);
4. the report: the check's own, or what the watchdog saw (a hang, a crash).

A command line holds a ``Grader`` in its own process (it is single-threaded, so forking is safe); a notebook
holds one in a process of its own (``grader_process.py``; a kernel has threads). The check process dies with
the grader (``PR_SET_PDEATHSIG``), the jail too (bubblewrap's ``--die-with-parent``); a later session sweeps
the work folders of killed ones (``process_group.sweep``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from explainer.distributed.procs import die_with_parent
from explainer.workshop import catalog, check_process, learner, private_dir, process_group
from explainer.workshop.jail.warm import STARTUP, JailError, Spawned, WarmJail
from explainer.workshop.report import Report

MAX_RESULT = 256 << 20  # bytes of a check's result.json (its picture: traces of a real run)
GRACE = 5.0            # seconds past a learner phase's own budget before the watchdog ends the group
SWEEP_BUDGET = 10.0    # seconds for the start-up sweep (it never waits on anything: a bound, not a guess)
JAIL_BUDGET = 2 * 60.0 + STARTUP     # the jail's probe (a retry without it) and its imports (warm.py's bounds)
REFERENCE_BUDGET = 120.0             # an exercise's reference work on a loaded machine (a real generation)


def hard_cap() -> float:
    """The whole check's bound (``EXPLAINER_WORKSHOP_TIMEOUT``, default 120 s: a loaded machine)."""
    try:
        return max(5.0, float(os.environ.get("EXPLAINER_WORKSHOP_TIMEOUT", "120")))
    except ValueError:
        return 120.0


def settings() -> dict:
    """The caller's ``EXPLAINER_*`` settings a check reads (its budget, its hard cap), never the room's."""
    return {k: v for k, v in os.environ.items()
            if k.startswith("EXPLAINER_") and k not in ("EXPLAINER_ROOM", "EXPLAINER_SEAT")}


class Grader:
    def __init__(self, exercise_ids: tuple[str, ...] | None = None, jail: WarmJail | None = None, phase=None):
        """``jail``: one started before this module's imports (then both import at once, on two cores).
        ``phase(what, seconds)``: called before each step that could take long (a notebook's grader process
        tells its kernel and its log)."""
        self.phase = phase or (lambda what, seconds: None)
        self.phase("sweeping killed sessions' folders", SWEEP_BUDGET)
        process_group.sweep()
        self.jail = jail or WarmJail()              # its warm process imports while we prepare the reference
        torch.set_num_threads(1)                    # tiny tensors, a shared machine; and no thread pool at fork
        self.warmed: set[str] = set()
        for ex_id in exercise_ids or ():
            self.warm(ex_id)
        self.phase("waiting for the jail's warm process", JAIL_BUDGET)
        self.jail.wait_ready()
        self.jail.prepare()                         # the first check's learner's process, made now

    def warm(self, exercise_id: str) -> None:
        """The exercise's reference work, once per session (every later check's process inherits it)."""
        if exercise_id not in self.warmed:
            self.phase(f"the {exercise_id} reference", REFERENCE_BUDGET)
            catalog.load(exercise_id).reference()
            self.warmed.add(exercise_id)

    def check_file(self, exercise_id: str, path, env: dict | None = None) -> Report:
        """Grade one .py or .ipynb file (``workshop check ID FILE``)."""
        ex = catalog.get(exercise_id)
        try:
            code = learner.from_file(path, ex.function, ex.id)
        except learner.LearnerError as exc:
            return Report.error(ex.id, exc.kind, str(exc), source=str(path), function=ex.function)
        return self.check(exercise_id, code, env)

    def check(self, exercise_id: str, code: learner.LearnerCode, env: dict | None = None) -> Report:
        about = catalog.get(exercise_id)
        self.warm(about.id)
        self.phase(f"checking {about.id}", hard_cap() + GRACE + 10.0)
        work = Path(tempfile.mkdtemp(prefix=f"{process_group.PREFIX}{os.getpid()}-", dir=process_group.sweep_root()))
        t0, seen, pid = time.monotonic(), set(), None
        try:
            try:
                spawned = self.jail.spawn()
            except (JailError, OSError) as exc:
                return Report.error(about.id, "internal", f"the jail could not start a learner's process: {exc}",
                                    source=code.origin, function=code.function)
            pid = self._fork(catalog.load(about.id), code, spawned, work, settings() if env is None else env)
            spawned.close()                          # the check holds them now: its end is the learner's end
            self.jail.prepare()                      # the next check's learner's process, made meanwhile
            seen.add(pid)
            process_group.record(work, pid)
            killed, status = self._watch(pid, work, t0, seen)
            report = _report(about.id, code, killed, status, work, time.monotonic() - t0)
            report.process_ids, report.check_pid = sorted(seen), pid
            return report
        finally:
            if pid is not None:
                process_group.end(pid, seen)        # the check's process group: whatever is left of it
                _reap(pid)
                process_group.unlink_segments(seen, process_group.check_segments(pid))   # its ranks' SHM groups
            shutil.rmtree(work, ignore_errors=True)

    def _fork(self, exercise, code, spawned: Spawned, work: Path, env: dict) -> int:
        pid = os.fork()
        if pid:
            return pid
        code_ = 1                                   # the check process: never returns
        try:
            os.setsid()
            die_with_parent()
            self.jail.control.close()
            if self.jail.spare is not None:          # not this check's
                self.jail.spare.close()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            fd = private_dir.create(str(work / "output.txt"))
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            for key in [k for k in os.environ if k.startswith("EXPLAINER_")]:
                del os.environ[key]
            os.environ.update(env)
            os.chdir(work)
            code_ = check_process.run(exercise, code, spawned, str(work))
        except BaseException:                        # noqa: BLE001 - reported through output.txt
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code_)

    def _watch(self, pid: int, work: Path, t0: float, seen: set[int]) -> tuple[str | None, int | None]:
        """(why the watchdog ended the check or None, the check process's wait status)."""
        cap, next_scan, progress = hard_cap(), 0.0, work / "progress.jsonl"
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return None, status
            now = time.monotonic()
            if now >= next_scan:
                seen |= process_group.members(pid)
                next_scan = now + 0.25
            last = _last_phase(progress)
            if last and last["learner"] and time.time() - last["t"] > last["budget"] + GRACE:
                return (f"{last['phase']} did not finish within {last['budget'] + GRACE:g} s (an endless loop or a "
                        f"wait?); the check ended it"), None
            if now - t0 > cap:
                return (f"the check did not finish within {cap:g} s (last step: "
                        f"{last['phase'] if last else 'starting'}); the check ended it"), None
            time.sleep(0.02)

    def close(self) -> None:
        self.jail.close()

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _last_phase(path: Path) -> dict | None:
    data = private_dir.read_small(str(path), 1 << 20)          # never a FIFO, never through a link
    if data is None:
        return None
    for line in reversed(data.decode("utf-8", errors="replace").splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def _tail(path: Path, limit: int = 2000) -> str:
    """The end of the check process's own output (trusted code: tracebacks of an internal error)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | private_dir.NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        f.seek(max(0, os.fstat(fd).st_size - limit))
        return f.read(limit).decode("utf-8", errors="replace")


def _report(exercise: str, code, killed: str | None, status: int | None, work: Path, seconds: float) -> Report:
    """The check's own report, or what the watchdog saw (a hang, a crash)."""
    output, result = _tail(work / "output.txt"), work / "result.json"
    if killed:
        return Report(exercise, "fail", reason=killed, source=code.origin, function=code.function,
                      seconds=seconds, output=output, limit="time limit")
    data = private_dir.read_small(str(result), MAX_RESULT)
    if data is not None:
        report = Report.from_json(json.loads(data))
        report.seconds = seconds
        return report
    last = _last_phase(work / "progress.jsonl")
    where = last["phase"] if last else "starting"
    how = (f"signal {signal.Signals(os.WTERMSIG(status)).name}" if status is not None and os.WIFSIGNALED(status)
           else f"exit code {os.WEXITSTATUS(status) if status is not None else '?'}")
    if last and last["learner"]:
        return Report(exercise, "fail", reason=f"the check's process died ({how}) during {where}",
                      source=code.origin, function=code.function, seconds=seconds, output=output,
                      limit="process ended")
    tail = output.strip().splitlines()[-1:] or [""]
    return Report.error(exercise, "internal", f"the check's process died ({how}) during {where}: {tail[0]}",
                        source=code.origin, function=code.function, seconds=seconds, output=output)
