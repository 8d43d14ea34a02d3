"""The grader's side of the warm jail: start it once per grading session, then one fresh learner's process per check.

``WarmJail()`` starts the jail (``view.command``: bubblewrap) around the warm process (``zygote.py``), which
imports torch and the exercises while the grader does its own imports, and a background scan for special files
in the visible folders. ``spawn()`` returns a learner's process as its ``Spawned`` handle: the pipes the check
talks over and the keeper socket (write on it or close it and the learner's process and everything it started
are killed; it answers how the process ended). ``prepare()`` asks for the next one ahead of time, so a check
starts without waiting for the namespaces to be made. ``close()`` ends the jail; a grader that
dies takes it along (bubblewrap's ``--die-with-parent``).

Where no jail can be made (``view.available()``), the warm process runs as a plain process and each learner's
process only gets the limits and a session of its own (announced by ``view.notice()``).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from explainer.workshop import private_dir
from explainer.workshop.jail import limits, view

STARTUP = 90.0                   # seconds for the warm process to import torch and the exercises (a loaded machine)
WORK_PREFIX = "workshop-"      # + the grading process's pid: its folders in private_dir.root() (a later session sweeps them)
# one message per send, with its file descriptors; macOS has no SOCK_SEQPACKET for Unix sockets
CONTROL = socket.SOCK_SEQPACKET if sys.platform.startswith("linux") else socket.SOCK_DGRAM


class JailError(RuntimeError):
    """The warm jail did not start or stopped answering."""


@dataclass
class Spawned:
    """One learner's process, as the check holds it: file descriptors only."""
    requests: int                # the check writes requests here
    replies: int                 # and reads the answers here
    output: int                  # what the learner printed (its fd 1 and 2)
    keeper: int                  # socket to the learner's keeper: write or close = kill; answers the wait status
    isolated: bool

    def close(self) -> None:
        for fd in (self.requests, self.replies, self.output, self.keeper):
            try:
                os.close(fd)
            except OSError:
                pass


class WarmJail:
    def __init__(self):
        self.isolated, self.why = view.possible()
        self.scratch: str | None = None                   # the not-isolated learner's folder (made when needed)
        self.scan = view.special_files_scan() if self.isolated else None
        self.covers: list[str] | None = None
        self.ready = False
        self.spare: Spawned | None = None                 # the next learner's process, asked for ahead of time
        self._start()

    def _start(self) -> None:
        """bubblewrap around the warm process (or the plain process); its first answer says whether the way into
        a learner's corner works here (``enter.probe``), before its imports."""
        self.control, theirs = socket.socketpair(socket.AF_UNIX, CONTROL)
        argv = view.python_argv("explainer.workshop.jail.zygote") + [str(theirs.fileno()),
                                                                     "isolated" if self.isolated else "plain"]
        self.errors = tempfile.TemporaryFile()            # bubblewrap's own error, read if the probe fails
        self.proc = subprocess.Popen(view.command(argv, warm=True) if self.isolated else argv,
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.errors, env=view.clean_env() if self.isolated else _plain_env(),
                                     cwd="/")
        theirs.close()

    def _answer(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise JailError(f"the jail's warm process did not answer within {timeout:g} s"
                                if left <= 0 else f"the jail's warm process ended (exit {self.proc.returncode})")
            if select.select([self.control], [], [], min(left, 0.5))[0]:
                msg = self.control.recv(1 << 16)
                if not msg:
                    raise JailError("the jail's warm process closed its control socket")
                return json.loads(msg)

    def wait_ready(self) -> None:
        """The warm process's probe, then its imports; a failed probe: the same without the jail, said once."""
        if self.ready:
            return
        try:
            probe = self._answer(60.0)
        except JailError as exc:
            probe = {"probe": False, "why": self._stderr() or str(exc)}
        if not probe.get("probe") and self.isolated:
            self.isolated, self.why = False, f"cannot make the jail's namespaces here: {probe.get('why')}"
            self.close(keep_scratch=True)
            self._start()
            self._answer(60.0)
        if not self.isolated and self.scratch is None:
            self.scratch = tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-learner-", dir=private_dir.root())
        self._answer(STARTUP)
        self.ready = True
        self.covers = view.special_files(self.scan) if self.isolated else []

    def _stderr(self) -> str:
        """The last line the failed jail printed (bubblewrap's own error)."""
        try:
            self.proc.wait(2)
            self.errors.seek(0)
            return (self.errors.read(4096).decode(errors="replace").strip().splitlines() or [""])[-1]
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return ""

    def notice(self) -> str:
        """The one line to show when this session's checks are not isolated ('' when they are)."""
        self.wait_ready()
        return view.notice((self.isolated, self.why))

    def spawn(self) -> Spawned:
        """A fresh learner's process: its own namespaces, uid, scratch folder, limits. It was asked for ahead of
        time when a spare is pending (``prepare``), so a check does not wait for it."""
        self.wait_ready()
        if self.spare is None:
            self.prepare()
        pending, self.spare = self.spare, None
        answer = self._answer(30.0)
        if "pid" not in answer:
            pending.close()
            raise JailError(f"the jail's warm process refused: {answer.get('error')}")
        return pending

    def prepare(self) -> None:
        """Ask the warm process for the next learner's process now (made while the current check runs, or while
        the learner reads): nothing of any learner's code reaches it before its own check hands it over."""
        if self.spare is not None or not self.ready:
            return
        uid = limits.check_uid()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        ours, keepers = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs = [req_r, rep_w, out_w, keepers.fileno()]
        covers = sorted(set(self.covers or []) | set(view.special_in_package() if self.isolated else []))
        request = {"op": "spawn", "uid": uid, "nproc": limits.process_limit(uid), "covers": covers,
                   "isolated": self.isolated, "scratch": self.scratch}
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()], theirs)
        finally:
            for fd in theirs[:3]:
                os.close(fd)
            keepers.close()
        self.spare = Spawned(req_w, rep_r, out_r, ours.detach(), self.isolated)

    def close(self, keep_scratch: bool = False) -> None:
        if self.spare is not None:                        # its keeper ends it
            self.spare.close()
            self.spare = None
        try:
            self.control.close()                          # the warm process exits at once
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errors.close()
        if keep_scratch:
            return
        if self.scan is not None and self.scan.poll() is None:
            self.scan.kill()
            self.scan.wait()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> "WarmJail":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _plain_env() -> dict:
    """The not-isolated warm process: the caller's environment without the room's settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("EXPLAINER_ROOM", "EXPLAINER_SEAT")}
    return {**env, "OMP_NUM_THREADS": "1"}
