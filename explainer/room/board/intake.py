"""What the board accepts: a report's shape, a seat's name, and a per-seat rate limit.

A report is refused (4xx, nothing stored) unless it is a JSON object of exactly the client's fields
(``client.FIELDS``): ``exercise`` (an id of the workshop's registry), ``passed`` (true/false), ``failure`` (null,
or a short printable string when not passed), ``seat`` (a seat name, below), ``time`` (seconds since the epoch,
within a day of now) and ``seat_key`` (null for a seat's first report, then the key the board gave it). A join
(``room join``) is ``seat`` and ``seat_key`` alone. Any value of another type or out of range is a 400, never a
server error: a number too large for a float, NaN, a nested object, a duplicate key.

Seat names: Unicode-normalized (NFKC: full-width letters, ligatures and styled letters become the plain ones),
spaces collapsed, 1..64 printable characters, and not mixing Latin letters with the Cyrillic, Greek or other
scripts whose letters imitate them. ``skeleton`` is what a name looks like (case folded, every look-alike letter
replaced by the Latin letter it imitates); the store refuses a second seat with the same skeleton, so a Cyrillic
"аlice" never shows as a second "alice".
"""

from __future__ import annotations

import json
import math
import time
import unicodedata

from explainer.room.client import FIELDS, JOIN_FIELDS, MAX_FAILURE, MAX_KEY, MAX_SEAT

MAX_BODY = 2048           # bytes; the client's reports are ~200
RATE, BURST = 2.0, 10     # reports per second per seat, after a burst of BURST (a folder of checks is slower)
MAX_SKEW = 86400.0
LOOKALIKE_SCRIPTS = {"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"}
# Letters of other scripts that look like a Latin letter (Unicode's confusables, those keyboards give), by script:
# each pair of strings maps letter for letter.
LOOKALIKES = {k: v for fake, latin in (
    ("АВЕКМНОРСТХУЅІЈԚԜҮӀаеорсухѕіјһԁԛԝӏ", "ABEKMHOPCTXYSIJQWYIaeopcyxsijhdqwl"),       # Cyrillic
    ("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαοικνρυχϲ", "ABEZHIKMNOPTYXaoikvpuxc"),                           # Greek
    ("ոսօՕ", "nuoO"),                                                                    # Armenian
    ("ᎪᎠᎬᏀᎻᏆᎫᏦᏞᎷᏃᏟ", "ADEGHIJKLMZC"),                                                  # Cherokee
) for k, v in zip(fake, latin, strict=True)}


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


def _text(value, name: str, limit: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= limit or not value.isprintable():
        raise Refused(400, f"{name}: expected 1..{limit} printable characters")
    return value


def seat_name(value) -> str:
    """The seat's name as the board keeps it: NFKC, spaces collapsed; 1..64 printable characters, one script."""
    if not isinstance(value, str) or len(value) > 4 * MAX_SEAT:
        raise Refused(400, f"seat: expected 1..{MAX_SEAT} printable characters")
    name = _text(" ".join(unicodedata.normalize("NFKC", value).split()), "seat", MAX_SEAT)
    scripts = {unicodedata.name(ch, "?").split(" ")[0] for ch in name if unicodedata.category(ch).startswith("L")}
    mixed = sorted(scripts & LOOKALIKE_SCRIPTS)
    if len(mixed) > 1:
        raise Refused(400, f"seat: {' and '.join(s.lower() for s in mixed)} letters in one name (a look-alike); "
                           f"write it in one script")
    return name


def skeleton(name: str) -> str:
    """What ``name`` looks like: look-alike letters replaced by the Latin letter they imitate, case folded."""
    return "".join(LOOKALIKES.get(ch, ch) for ch in name).casefold()


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
    if failure is not None:
        _text(failure, "failure", MAX_FAILURE)
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
