"""The check's side of the conversation with the learner's process (``learner_process.py``, in the jail): load
the learner's module, ask its function with plain data, end it.

The check process computes the verdict and never runs the learner's code; it only reads JSON lines from the
learner's process (each at most ``MAX_REPLY`` bytes, read with a deadline) and keeps the last ``OUTPUT_TAIL``
bytes of what the learner printed. Every way the learner's process can stop is named: a time limit (the call's
budget, enforced here: the keeper then kills the process), the memory or process limit (``MemoryError``, a
refused fork), the CPU time or file size limit (SIGXCPU, SIGXFSZ), or another signal or exit (the keeper
reports the wait status).
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time

from explainer.workshop.jail.limits import LIMITS
from explainer.workshop.jail.warm import Spawned
from explainer.workshop.learner import LearnerCode, LearnerLimit, budget
from explainer.workshop.report import LearnerError

MAX_REPLY = 4 << 20              # bytes of one answer line
OUTPUT_TAIL = 64 << 10           # bytes of the learner's output kept (the tail)
STARTUP = 30.0                   # seconds for the learner's process to answer its first request
SIGNAL_MEANING = {signal.SIGXCPU: f"the CPU time limit ({LIMITS.cpu_seconds} s)",
                  signal.SIGXFSZ: f"the file size limit ({LIMITS.file_size >> 20} MB)",
                  signal.SIGKILL: "SIGKILL (out of memory?)"}
SIGNAL_LIMIT = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "file size limit"}


class LearnerProcess:
    """One learner's process for one check (made by the warm jail; one per check, not per call)."""

    def __init__(self, spawned: Spawned, code: LearnerCode, preload: tuple[str, ...] = ()):
        self.fds, self.code, self.calls, self.isolated = spawned, code, 0, spawned.isolated
        self._tail, self.printed, self._buf, self.status = bytearray(), 0, b"", None
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        self._send({"op": "ready", "preload": list(preload)}, "starting the learner's process")
        self._ready = False                       # its answer is awaited in load(): the check works meanwhile

    def _read_output(self) -> None:
        while True:
            try:
                chunk = os.read(self.fds.output, 1 << 16)
            except OSError:
                return
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
            self._answer(self._line(STARTUP, "starting the learner's process"), "starting the learner's process", "")
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
            raise LearnerLimit(f"{what}: the learner's process answered with malformed data", "malformed answer")
        return value

    def _send(self, req: dict, what: str) -> None:
        data = json.dumps(req).encode() + b"\n"
        try:
            while data:
                data = data[os.write(self.fds.requests, data):]
        except OSError:
            raise LearnerLimit(*self._ended(what)) from None

    def _ask(self, req: dict, seconds: float, what: str, prefix: str = "") -> dict:
        self._send(req, what)
        return self._answer(self._line(seconds, what), what, prefix)

    def _answer(self, reply: dict, what: str, prefix: str) -> dict:
        err = reply.get("error")
        if err is None:
            return reply
        if not isinstance(err, dict):
            raise LearnerLimit(f"{what}: the learner's process answered with malformed data", "malformed answer")
        message, kind = str(err.get("message", ""))[:500], err.get("kind")
        if kind == "memory":
            raise LearnerLimit(f"{what} hit the memory limit ({LIMITS.describe()['memory']}): {message}", "memory limit")
        if kind == "processes":
            raise LearnerLimit(f"{what} hit the process limit ({LIMITS.processes} processes): {message}",
                               "process limit")
        if kind == "missing-function":
            raise LearnerError("missing-function", f"{self.code.origin}: {message}")
        raise LearnerError("exception", f"{prefix or what} raised {message}")

    def _line(self, seconds: float, what: str) -> dict:
        fd, deadline = self.fds.replies, time.monotonic() + seconds
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise LearnerLimit(f"{what} did not return within {seconds:g} s (the time limit: an endless "
                                   f"loop or a wait?)", "time limit")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise LearnerLimit(*self._ended(what))
            self._buf += chunk
            if len(self._buf) > MAX_REPLY:
                self.kill()
                raise LearnerLimit(f"{what}: the learner's process answered with more than {MAX_REPLY >> 20} MB",
                                   "answer too large")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            raise LearnerLimit(f"{what}: the learner's process answered with malformed data", "malformed answer")
        return reply

    def _wait_status(self, timeout: float) -> int | None:
        """The learner's process's wait status, from its keeper (None if it does not say in time)."""
        if self.status is None and select.select([self.fds.keeper], [], [], timeout)[0]:
            try:
                self.status = json.loads(os.read(self.fds.keeper, 4096).split(b"\n")[0])["status"]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return self.status

    def _ended(self, what: str) -> tuple[str, str]:
        """How the learner's process ended (it closed its replies pipe): (what it says, which limit in words)."""
        status = self._wait_status(3.0)
        if status is None:
            self.kill()
            return f"{what}: the learner's process stopped answering", "process ended"
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
        if not sig and 128 < rc < 160:
            sig = rc - 128
        if sig:
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return (f"{what}: the learner's process was killed by {SIGNAL_MEANING.get(sig, f'signal {sig} ({name})')}",
                    SIGNAL_LIMIT.get(sig, "process ended"))
        last = (self.output(300).strip().splitlines() or [""])[-1]
        return (f"{what}: the learner's process exited (code {rc}) instead of answering"
                + (f" ({last})" if last else ""), "process ended")

    def kill(self) -> None:
        """End the learner's process: its keeper kills it, and its pid namespace takes everything it started."""
        try:
            os.write(self.fds.keeper, b"end\n")
        except OSError:
            pass
        self._wait_status(5.0)

    def close(self) -> None:
        """Say exit and hang up: the keeper kills whatever is left and tears the namespaces down after the check."""
        try:
            os.write(self.fds.requests, b'{"op": "exit"}\n')
        except OSError:
            pass
        self._wait_status(1.0)                             # a learner that exits at once: its last output is in
        self._reader.join(0.5)
        self.fds.close()

    def __enter__(self) -> "LearnerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
