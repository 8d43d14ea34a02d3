"""The check's handle on the learner's jailed process (``jailed.py`` in ``jail.py``'s jail): start it, load
the learner's module, ask its function with plain data, end it.

The check process computes the verdict and never runs the learner's code; it only reads JSON lines from
the jail (each at most ``MAX_REPLY`` bytes, read with a deadline) and keeps the last ``OUTPUT_TAIL`` bytes
of what the learner printed. Every way the learner's process can stop is named: a time limit (the
call's budget, enforced here), the memory or process limit (``MemoryError``, a refused fork), the CPU time
or file size limit (SIGXCPU, SIGXFSZ), or another signal or exit.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time

from explainer.distributed.procs import die_with_parent
from explainer.workshop import jail
from explainer.workshop.learner import LearnerCode, LearnerLimit, budget
from explainer.workshop.report import LearnerError

MAX_REPLY = 4 << 20              # bytes of one answer line
OUTPUT_TAIL = 64 << 10           # bytes of the learner's output kept (the tail)
STARTUP = 60.0                   # seconds for the jailed Python to start and import torch (a loaded machine)
SIGNAL_MEANING = {signal.SIGXCPU: f"the CPU time limit ({jail.LIMITS.cpu_seconds} s)",
                  signal.SIGXFSZ: f"the file size limit ({jail.LIMITS.file_size >> 20} MB)",
                  signal.SIGKILL: "SIGKILL (out of memory?)"}


class Learner:
    """One jailed learner process for one check (one jail per check, not per call)."""

    def __init__(self, code: LearnerCode, preload: tuple[str, ...] = ()):
        self.code, self.calls = code, 0
        self.isolated, self.why = jail.available()
        uid = jail.jail_uid(os.getpid())
        argv = jail.python_argv(uid if jail.is_root() and self.isolated else None)   # see _fallback_cwd
        limits = jail.limits(uid)

        def preexec():
            limits()
            if not self.isolated:
                die_with_parent()                     # bwrap has --die-with-parent; the plain process needs it
        self.proc = subprocess.Popen(jail.command(argv) if self.isolated else argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec,
                                     start_new_session=True, cwd="/" if self.isolated else _fallback_cwd(uid))
        self._tail, self.printed = bytearray(), 0
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        self._buf = b""
        self._send({"op": "ready", "preload": list(preload)}, "starting the jailed Python")
        self._ready = False                       # its answer is awaited in load(): the check works meanwhile

    def _read_output(self) -> None:
        while True:
            chunk = self.proc.stderr.read1(1 << 16)
            if not chunk:
                return
            self.printed += len(chunk)
            self._tail += chunk
            if len(self._tail) > OUTPUT_TAIL:
                del self._tail[:len(self._tail) - OUTPUT_TAIL]

    def output(self, limit: int = 2000) -> str:
        text = bytes(self._tail).decode("utf-8", errors="replace")[-limit:]
        if self.printed > len(self._tail):
            text = f"[{self.printed - len(self._tail):,} earlier bytes not kept]\n" + text
        return text

    def load(self) -> None:
        if not self._ready:
            self._answer(self._line(STARTUP, "starting the jailed Python"), "starting the jailed Python", "")
            self._ready = True
        c = self.code
        self._ask({"op": "load", "source": c.source, "filename": c.filename, "function": c.function}, budget(),
                  f"running the top level of {c.filename}", prefix=f"running {c.filename}")

    def call(self, kind: str, args: dict, what: str) -> dict:
        """The learner's function on ``args`` (in the jail); its answer as plain data (validate it)."""
        self.calls += 1
        reply = self._ask({"op": "call", "kind": kind, "args": args}, budget(), what, prefix=what)
        value = reply.get("value")
        if not isinstance(value, dict):
            raise LearnerLimit(f"{what}: the learner's process answered with malformed data")
        return value

    def _send(self, req: dict, what: str) -> None:
        try:
            self.proc.stdin.write(json.dumps(req).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise LearnerLimit(f"{what}: {self._ended()}") from None

    def _ask(self, req: dict, seconds: float, what: str, prefix: str = "") -> dict:
        self._send(req, what)
        return self._answer(self._line(seconds, what), what, prefix)

    def _answer(self, reply: dict, what: str, prefix: str) -> dict:
        err = reply.get("error")
        if err is None:
            return reply
        if not isinstance(err, dict):
            raise LearnerLimit(f"{what}: the learner's process answered with malformed data")
        message, kind = str(err.get("message", ""))[:500], err.get("kind")
        if kind == "memory":
            raise LearnerLimit(f"{what} hit the memory limit ({jail.LIMITS.describe()['memory']}): {message}")
        if kind == "processes":
            raise LearnerLimit(f"{what} hit the process limit ({jail.LIMITS.processes} processes): {message}")
        if kind == "missing-function":
            raise LearnerError("missing-function", f"{self.code.origin}: {message}")
        raise LearnerError("exception", f"{prefix or what} raised {message}")

    def _line(self, seconds: float, what: str) -> dict:
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + seconds
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise LearnerLimit(f"{what} did not return within {seconds:g} s (the time limit: an endless "
                                   f"loop or a wait?)")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise LearnerLimit(f"{what}: {self._ended()}")
            self._buf += chunk
            if len(self._buf) > MAX_REPLY:
                self.kill()
                raise LearnerLimit(f"{what}: the learner's process answered with more than {MAX_REPLY >> 20} MB")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            raise LearnerLimit(f"{what}: the learner's process answered with malformed data")
        return reply

    def _ended(self) -> str:
        """How the learner's process ended (it closed its answer pipe)."""
        try:
            rc = self.proc.wait(3.0)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the learner's process stopped answering"
        sig = -rc if rc < 0 else rc - 128 if 128 < rc < 160 else 0
        if sig:
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return f"the learner's process was killed by {SIGNAL_MEANING.get(sig, f'signal {sig} ({name})')}"
        last = (self.output(300).strip().splitlines() or [""])[-1]
        return f"the learner's process exited (code {rc}) instead of answering" + (f" ({last})" if last else "")

    def kill(self) -> None:
        """End the jail: its pid namespace takes every process the learner started with it."""
        if self.proc.poll() is None:
            for target in (lambda: os.killpg(self.proc.pid, signal.SIGKILL), self.proc.kill):
                try:
                    target()
                except OSError:
                    pass
        try:
            self.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(1.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()
        if not self.isolated:                             # no pid namespace: end the session's group
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self._reader.join(2.0)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self) -> "Learner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fallback_cwd(uid: int) -> str:
    """Not isolated: the learner's process starts in an empty folder of its own inside the check's work
    folder (removed with it), as the caller's user (the package may sit where no other uid can read it)."""
    path = os.path.abspath("learner")
    os.makedirs(path, exist_ok=True)
    return path
