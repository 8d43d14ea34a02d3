"""The learner's side of the room board: post one verdict to the instructor's board, fire-and-forget.

With ``EXPLAINER_ROOM`` set (the URL ``python -m explainer room serve`` prints, ``http://HOST:P/?token=T``),
every ``workshop check`` and notebook ``check()`` posts {exercise, passed, failure, seat, time} to
``POST /api/report?token=T``. Never the learner's code, never anything else. ``EXPLAINER_SEAT`` names the seat
(default ``user@host``).

The standard library only (``urllib``): no torch, nothing of the package, so a report costs nothing to import.
The post runs in a daemon thread bounded by ``TIMEOUT`` seconds in all; the caller either goes on at once (a
notebook) or waits at most ``TIMEOUT`` (the command line, which exits right after). A failed post is recorded
in ``LAST`` and, when waited for, one line on stderr; it never raises, never changes a verdict.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ENV_ROOM, ENV_SEAT = "EXPLAINER_ROOM", "EXPLAINER_SEAT"
TIMEOUT = 1.5                 # seconds, the whole post (connect, send, answer)
MAX_SEAT, MAX_FAILURE = 64, 120
FIELDS = ("exercise", "passed", "failure", "seat", "time")
LAST: dict = {}               # the latest post's outcome: {"status": 200} or {"error": "..."} (tests, the CLI)


def default_seat() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "learner"
    return f"{user}@{socket.gethostname()}"[:MAX_SEAT]


def seat_name(seat: str | None = None) -> str:
    seat = (seat or os.environ.get(ENV_SEAT) or default_seat()).strip()
    return "".join(ch for ch in seat if ch.isprintable())[:MAX_SEAT] or default_seat()


def report_url(room: str) -> str:
    """``http://HOST:P/?token=T`` (the board's URL) -> ``http://HOST:P/api/report?token=T``."""
    parts = urllib.parse.urlsplit(room.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{ENV_ROOM}={room!r}: expected the board's URL, http://HOST:PORT/?token=T")
    token = urllib.parse.parse_qs(parts.query).get("token", [""])[0]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/api/report",
                                    urllib.parse.urlencode({"token": token}), ""))


def payload(exercise: str, passed: bool, failure: str | None, seat: str | None = None) -> dict:
    """The whole report: five fields (``FIELDS``), nothing of the code."""
    return {"exercise": str(exercise), "passed": bool(passed),
            "failure": None if passed or failure is None else str(failure)[:MAX_FAILURE],
            "seat": seat_name(seat), "time": round(time.time(), 3)}


def post(url: str, body: dict, timeout: float = TIMEOUT) -> dict:
    """POST ``body`` as JSON; returns {"status": code, "answer": ...} or {"error": "..."}; never raises."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer = resp.read(4096)
            return {"status": resp.status, "answer": json.loads(answer or b"{}")}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "error": f"the board refused the report (HTTP {exc.code}: "
                                             f"{exc.read(200).decode(errors='replace').strip()})"}
    except (OSError, ValueError) as exc:          # refused, unreachable, timed out, not JSON
        return {"error": f"the board did not answer ({getattr(exc, 'reason', exc)})"}


def report_verdict(exercise: str, passed: bool, failure: str | None, seat: str | None = None,
                   wait: bool = False) -> threading.Thread | None:
    """Post one verdict if ``EXPLAINER_ROOM`` is set; ``wait``: block up to ``TIMEOUT`` (then say a failure)."""
    room = os.environ.get(ENV_ROOM)
    if not room:
        return None
    try:
        url = report_url(room)
    except ValueError as exc:
        LAST.clear()
        LAST["error"] = str(exc)
        if wait:
            print(f"room: report not sent: {exc}", file=sys.stderr)
        return None
    body = payload(exercise, passed, failure, seat)

    def send():
        LAST.update(post(url, body))

    LAST.clear()
    thread = threading.Thread(target=send, name="explainer-room-report", daemon=True)
    thread.start()
    if wait:
        thread.join(TIMEOUT + 0.1)
        if thread.is_alive() or "error" in LAST:
            why = LAST.get("error", f"no answer within {TIMEOUT:g} s")
            print(f"room: report not sent: {why}", file=sys.stderr)
    return thread
