"""What the board accepts: a report's shape (the client's five fields, nothing else) and a per-seat rate limit.

A report is refused (4xx, nothing stored) unless it is a JSON object of exactly ``exercise`` (an id of the
workshop's registry), ``passed`` (true/false), ``failure`` (null, or a short printable string when not
passed), ``seat`` (1..64 printable characters) and ``time`` (seconds since the epoch, within a day of now).
"""

from __future__ import annotations

import json
import time

from explainer.room.client import FIELDS, MAX_FAILURE, MAX_SEAT

MAX_BODY = 2048           # bytes; the client's reports are ~150
RATE, BURST = 2.0, 10     # reports per second per seat, after a burst of BURST (a folder of checks is slower)
MAX_SKEW = 86400.0


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _text(value, name: str, limit: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= limit or not value.isprintable():
        raise Refused(400, f"{name}: expected 1..{limit} printable characters")
    return value


def parse(body: bytes, exercises, now: float | None = None) -> dict:
    """The body -> a clean report dict, or ``Refused`` (400 malformed, 413 too big, 422 unknown exercise)."""
    if len(body) > MAX_BODY:
        raise Refused(413, f"report bodies are capped at {MAX_BODY} bytes")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(data, dict) or set(data) != set(FIELDS):
        raise Refused(400, f"expected a JSON object of exactly {', '.join(FIELDS)}")
    if not isinstance(data["exercise"], str) or data["exercise"] not in exercises:
        raise Refused(422, f"unknown exercise; accepted: {', '.join(exercises)}")
    if not isinstance(data["passed"], bool):
        raise Refused(400, "passed: expected true or false")
    failure = data["failure"]
    if data["passed"] and failure is not None:
        raise Refused(400, "failure: expected null when passed")
    if failure is not None:
        _text(failure, "failure", MAX_FAILURE)
    t = data["time"]
    now = time.time() if now is None else now
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not abs(t - now) <= MAX_SKEW:
        raise Refused(400, "time: expected seconds since the epoch, within a day of the board's clock")
    return {"exercise": data["exercise"], "passed": data["passed"], "failure": failure,
            "seat": _text(data["seat"], "seat", MAX_SEAT), "time": float(t)}


class RateLimit:
    """A token bucket per seat: ``burst`` reports at once, then ``rate`` per second. Holds one entry per seat
    (the store caps the seats); ``rate=None`` switches it off (the load benchmark)."""

    def __init__(self, rate: float | None = RATE, burst: int = BURST):
        self.rate, self.burst = rate, burst
        self.buckets: dict[str, tuple[float, float]] = {}

    def allow(self, seat: str, now: float | None = None) -> bool:
        if self.rate is None:
            return True
        now = time.monotonic() if now is None else now
        level, then = self.buckets.get(seat, (float(self.burst), now))
        level = min(float(self.burst), level + (now - then) * self.rate)
        if level < 1.0:
            self.buckets[seat] = (level, now)
            return False
        self.buckets[seat] = (level - 1.0, now)
        return True
