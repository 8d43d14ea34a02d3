"""What the board accepts: a report's shape, a seat's name, and a per-seat rate limit.

A report is refused (4xx, nothing stored) unless it is a JSON object of exactly the client's fields
(``client.FIELDS``): ``exercise`` (an id of the workshop's registry), ``passed`` (true/false), ``failure`` (null when
passed, else the first failing check's name, below), ``seat`` (a seat name, below), ``time`` (seconds since the epoch,
within a day of now) and ``seat_key`` (null for a seat's first report, then the key the board gave it). A join
(``room join``) is ``seat`` and ``seat_key`` alone. Any value of another type or out of range is a 400, never a
server error: a number too large for a float, NaN, a nested object, a duplicate key.

Seat names: ``room.seat_names.clean`` (NFKC, spaces collapsed, 1..64 printable characters, none that draws
nothing, one script); the store refuses a second seat that looks like a taken one (``seat_names.looks``). A failure
is one of the names the exercise's checks carry (``catalog.About.checks``) or what a check ends with when no check
failed (``report.FAILURE_KINDS``: a bad input's kind, a limit in words), never free text.
"""

from __future__ import annotations

import json
import math
import time

from explainer.room import seat_names
from explainer.room.client import FIELDS, JOIN_FIELDS, MAX_KEY
from explainer.workshop.report import FAILURE_KINDS

MAX_BODY = 2048           # bytes; the client's reports are ~200
RATE, BURST = 2.0, 10     # reports per second per seat, after a burst of BURST (a folder of checks is slower)
MAX_SKEW = 86400.0


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Refused(400, "a key appears twice in the JSON object")
    return dict(pairs)


def _object(body: bytes, fields: tuple[str, ...]) -> dict:
    if len(body) > MAX_BODY:
        raise Refused(413, f"bodies are capped at {MAX_BODY} bytes")
    try:
        data = json.loads(body, object_pairs_hook=_no_duplicates, parse_constant=_not_a_number)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(data, dict) or set(data) != set(fields):
        raise Refused(400, f"expected a JSON object of exactly {', '.join(fields)}")
    return data


def _not_a_number(name: str):
    raise Refused(400, f"{name} is not a number")


def seat_name(value) -> str:
    """The seat's name as the board keeps it (``seat_names.clean``); ``Refused`` 400 naming what is wrong."""
    try:
        return seat_names.clean(value)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None


def failure_name(value, exercise) -> str:
    """A failing report's failure: one of ``exercise``'s check names or a ``FAILURE_KINDS`` word."""
    if not isinstance(value, str) or value not in (*exercise.checks, *FAILURE_KINDS):
        raise Refused(400, f"failure: expected the name of one of {exercise.id}'s checks ({', '.join(exercise.checks)})"
                           f" or one of {', '.join(FAILURE_KINDS)}")
    return value


def _key(value):
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY or not value.isascii() or not value.isprintable():
        raise Refused(400, "seat_key: expected null or the key the board gave this seat")
    return value


def parse(body: bytes, exercises, now: float | None = None) -> dict:
    """A report's body -> a clean report dict, or ``Refused`` (400 malformed, 413 too big, 422 unknown exercise)."""
    data = _object(body, FIELDS)
    if not isinstance(data["exercise"], str) or data["exercise"] not in exercises:
        raise Refused(422, f"unknown exercise; accepted: {', '.join(exercises)}")
    if not isinstance(data["passed"], bool):
        raise Refused(400, "passed: expected true or false")
    failure = data["failure"]
    if data["passed"] and failure is not None:
        raise Refused(400, "failure: expected null when passed")
    if not data["passed"]:
        failure = failure_name(failure, exercises[data["exercise"]])
    t, now = data["time"], time.time() if now is None else now
    try:
        ok = not isinstance(t, bool) and isinstance(t, (int, float)) and math.isfinite(float(t)) \
            and abs(float(t) - now) <= MAX_SKEW
    except OverflowError:                                     # an integer too large for a float
        ok = False
    if not ok:
        raise Refused(400, "time: expected seconds since the epoch, within a day of the board's clock")
    return {"exercise": data["exercise"], "passed": data["passed"], "failure": failure,
            "seat": seat_name(data["seat"]), "time": float(t), "seat_key": _key(data["seat_key"])}


def parse_join(body: bytes) -> dict:
    """A join's body (``room join``) -> {seat, seat_key}, or ``Refused``."""
    data = _object(body, JOIN_FIELDS)
    return {"seat": seat_name(data["seat"]), "seat_key": _key(data["seat_key"])}


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
