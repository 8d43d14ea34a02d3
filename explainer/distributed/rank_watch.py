"""How the launcher waits for its ranks, and never hangs: ``RankResult`` per rank, and ``collect``.

One deadline for a rank's whole life (the comm timeout): each rank reports its phase through its result
pipe, and the parent watches every rank:

* a rank that dies without reporting is named (rank, pid, signal, phase) at once; its peers get
  ``grace`` seconds to report, then are ended, and every rank's result names the dead one;
* a stopped rank (``/proc/PID/stat`` state T, SIGSTOP) is ended after the comm timeout, or as soon as
  a peer has failed waiting for it;
* the whole launch is capped by ``timeout``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from explainer.distributed.device_communicators import shm
from explainer.distributed.procs import end_process, is_stopped, signame


@dataclass
class RankResult:
    rank: int
    ok: bool
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    exitcode: int | None = None
    pid: int | None = None
    ended_by_launcher: bool = False
    seconds: float = 0.0
    phase: str = "start"                 # the last phase the rank reported
    reported_error: dict | None = None   # {type, message, phase}: an ok rank that reported a failure it returns
    phase_at: float = 0.0                # seconds after the launch started when the rank entered ``phase``
    culprit: bool = False                # the launcher found this rank dead or stopped: the others waited on it

    @property
    def error(self) -> dict | None:
        return None if self.ok else {"type": self.error_type, "message": self.error_message}


class RankWatch:
    """What the launcher knows of each rank while it waits for their results (``collect``)."""

    def __init__(self, procs, conns, t0: float, grace: float, comm_timeout: float):
        n = len(procs)
        self.procs, self.conns, self.t0, self.grace, self.comm_timeout = procs, conns, t0, grace, comm_timeout
        self.results: dict[int, RankResult] = {}
        self.phase = ["start"] * n
        self.phase_at = [0.0] * n
        self.stopped_since: list[float | None] = [None] * n
        self.culprit: tuple[int, str, str] | None = None    # (rank, error type for peers, description)
        self.pending, self.failed_at, self.first_failed = set(range(n)), None, None
        self.early: dict[int, dict] = {}

    def finish(self, r: int, res: RankResult) -> None:
        res.phase, res.phase_at = self.phase[r], self.phase_at[r]
        self.results[r] = res
        self.pending.discard(r)
        if not res.ok and self.failed_at is None:
            self.failed_at, self.first_failed = time.monotonic(), r

    def _messages(self, r: int):
        """Take rank ``r``'s phase reports and early failure records; its result message, if it came."""
        try:
            while self.conns[r].poll():
                m = self.conns[r].recv()
                if m[0] == "phase":
                    self.phase[r], self.phase_at[r] = m[1], time.monotonic() - self.t0
                elif m[0] == "failed":                    # the rank returns its failure as a record
                    self.early[r] = {"type": m[1], "message": m[2], "phase": m[3]}
                    if self.failed_at is None:
                        self.failed_at, self.first_failed = time.monotonic(), r
                else:
                    return m
        except (EOFError, OSError):
            pass
        return None

    def read(self, ready: set) -> None:
        """Every pending rank's result, or its death (named at once: rank, pid, signal, phase)."""
        procs = self.procs
        for r in sorted(self.pending):
            msg = self._messages(r)
            if msg is not None:
                res = RankResult(r, msg[0] == "ok", pid=procs[r].pid, seconds=time.monotonic() - self.t0)
                if msg[0] == "ok":
                    res.value, res.reported_error = msg[1], self.early.get(r)
                else:
                    res.error_type, res.error_message, res.traceback, res.value = msg[1], msg[2], msg[3], msg[4]
                self.finish(r, res)
            elif procs[r].sentinel in ready or not procs[r].is_alive():
                procs[r].join(0.5)
                desc = f"rank {r} (pid {procs[r].pid}) {signame(procs[r].exitcode)} in phase {self.phase[r]}"
                if self.culprit is None:
                    self.culprit = (r, "PeerGoneError", desc)
                self.finish(r, RankResult(r, False, pid=procs[r].pid, error_type="ProcessDied",
                                          error_message=f"{desc}, before reporting", seconds=time.monotonic() - self.t0))

    def end_stopped(self) -> None:
        """A stopped rank (state T) is ended after the comm timeout, or at once when a peer has failed."""
        now = time.monotonic()
        for r in sorted(self.pending):
            proc = self.procs[r]
            self.stopped_since[r] = (self.stopped_since[r] or now) if is_stopped(proc.pid) else None
            since = self.stopped_since[r]
            if since is not None and (now - since >= self.comm_timeout or self.failed_at is not None):
                desc = (f"rank {r} (pid {proc.pid}) was stopped (process state T, e.g. SIGSTOP) in phase "
                        f"{self.phase[r]} for {now - since:.1f}s")
                if self.culprit is None:
                    self.culprit = (r, "PeerTimeoutError", desc)
                end_process(proc)
                self.finish(r, RankResult(r, False, pid=proc.pid, error_type="PeerTimeoutError", ended_by_launcher=True,
                                          error_message=f"{desc}; ended by the launcher",
                                          seconds=time.monotonic() - self.t0))

    def end_pending(self, timeout: float) -> None:
        """Ranks that overran the launch, or still run after a peer failed: ended, and said so."""
        for r in sorted(self.pending):
            proc = self.procs[r]
            end_process(proc)
            why = (f"was still running {self.grace:.1f}s after rank {self.first_failed} failed"
                   if self.first_failed is not None else f"did not finish within {timeout:.1f}s")
            self.results[r] = RankResult(r, False, error_type="TimeoutError", pid=proc.pid, ended_by_launcher=True,
                                         error_message=f"rank {r} (pid {proc.pid}) {why} in phase {self.phase[r]}; "
                                                       f"ended by the launcher", seconds=time.monotonic() - self.t0,
                                         phase=self.phase[r], phase_at=self.phase_at[r])

    def blame(self) -> None:
        """Every other failed rank names the peer that caused it (the dead or stopped one)."""
        if self.culprit is None:
            return
        c, kind, desc = self.culprit
        self.results[c].culprit = True
        for r, res in self.results.items():
            if r != c and not res.ok:
                own = f"{res.error_type}: {(res.error_message or '').splitlines()[0][:300]}" if res.error_message else ""
                res.error_type = kind
                res.error_message = (f"peer {desc}; rank {r} (pid {res.pid}) was in phase {res.phase}"
                                     + (f" ({own})" if own else ""))

    def reap(self) -> None:
        """Let finished ranks exit (they unlink their shared memory); sweep what a killed one left."""
        for r, proc in enumerate(self.procs):
            proc.join(max(0.5, self.grace))
            end_process(proc)
            self.results[r].exitcode = proc.exitcode
            if proc.exitcode != 0:
                shm.sweep_segments_of(proc.pid)


def collect(procs, conns, t0: float, timeout: float, grace: float, comm_timeout: float) -> list[RankResult]:
    """Wait for every rank's result, within ``timeout``; a failure gives the others ``grace`` seconds."""
    w = RankWatch(procs, conns, t0, grace, comm_timeout)
    while w.pending:
        if time.monotonic() >= t0 + timeout:
            break
        w.read(set(wait([conns[r] for r in w.pending] + [procs[r].sentinel for r in w.pending], 0.1)))
        w.end_stopped()
        if w.failed_at is not None and time.monotonic() >= w.failed_at + grace:
            break
    w.end_pending(timeout)
    w.blame()
    w.reap()
    return [w.results[r] for r in range(len(procs))]
