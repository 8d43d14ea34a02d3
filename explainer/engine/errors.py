"""What the engine reports when ranks fail: ``RankFailure`` (every rank's failure of a step, the root one
first) and ``error_summary`` (the ``{type, message}`` every report prints)."""

from __future__ import annotations

import traceback


class RankError(Exception):
    """A failure raised in a rank process, rebuilt in the driver from its type name and message."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


class RankFailure(RuntimeError):
    """One or more ranks raised during a step. ``cause`` is the root failure, not a rank that was only
    left waiting for it (a ``TimeoutError``: nothing pending, peer gone, timed out)."""

    processes_started = 0

    def __init__(self, failures: list[tuple[int, str, BaseException]], warmup: bool):
        self.failures, self.warmup = failures, warmup
        roots = [f for f in failures if not _starved(f[2])] or failures
        self.rank, self.phase, self.cause = roots[0]
        super().__init__("; ".join(f"rank {r} in {p}: {error_summary(e)['type']}: {error_summary(e)['message']}"
                                   for r, p, e in failures))


def _starved(exc: BaseException) -> bool:
    if getattr(exc, "culprit", False):                    # the launcher found this rank dead or stopped
        return False
    # a rank left waiting for another (the launcher names the peer that died or stopped: that one is the root)
    return isinstance(exc, TimeoutError) or getattr(exc, "type_name", None) in (
        "NothingPendingError", "PeerGoneError", "TimeoutError", "PeerTimeoutError")


def error_summary(exc: BaseException) -> dict:
    """``{type, message}``; a bare ``assert`` gets its source line as the message (what a traceback shows)."""
    message = str(exc)
    if not message and exc.__traceback__ is not None:
        message = (traceback.extract_tb(exc.__traceback__)[-1].line or "").strip()
    return {"type": getattr(exc, "type_name", type(exc).__name__), "message": message}
