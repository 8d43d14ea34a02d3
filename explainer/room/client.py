"""The learner's side of the room board: join a room once, then every check posts its verdict there.

``python -m explainer room join URL --seat NAME`` (or ``join(URL, seat=NAME)`` in a notebook) keeps the room's
URL (``http://HOST:P/?token=T``, what ``room serve`` prints) and the seat's name in this user's settings file,
outside any repository (``$XDG_CONFIG_HOME/explainer/room.json``, else ``~/.config/explainer/room.json``; a 0700
folder, a 0600 file: it holds the room's token). The board answers a seat's first join or report with a seat
key, kept in the same file; later reports for that seat carry it, so nobody else can post as that seat. What
``join`` returns (``Joined``), prints or leaves in ``LAST`` holds neither the key nor the room's token, so a
notebook's saved output never does. The instructor's ``room serve`` keeps the board's instructor key in the same
file (by room token); only the instructor's folder grading sends it (``INSTRUCTOR_HEADER``). Every
later ``workshop check`` and notebook ``check()``, in any kernel and after restarts, posts {exercise, passed,
failure, seat, time, seat_key} to ``POST /api/report?token=T``: never the learner's code, never anything else.
``EXPLAINER_ROOM`` and ``EXPLAINER_SEAT`` override the file. Without a joined seat the name is ``user@host``
plus a random suffix made once per user, so identical lab machines still show as different seats.

On the room's JupyterHub (``hub serve``) nobody joins: the learner's server has ``EXPLAINER_ROOM`` (the board, a
hub service, at ``http://HOST:P/services/board/``, no token in it), ``EXPLAINER_SEAT`` (the learner's hub name)
and ``JUPYTERHUB_API_TOKEN`` (the server's own token, from the hub); a report then carries that token
(``Authorization: token ...``) and the board asks the hub whose it is.

The standard library only (``urllib``): no torch, nothing of the package. The post runs in a daemon thread
bounded by ``TIMEOUT`` seconds in all; the caller either goes on at once (a notebook) or waits at most
``TIMEOUT`` (the command line). A failed post is recorded in ``LAST`` and, when waited for, one line on
stderr; it never raises, never changes a verdict.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from explainer.room import seat_names
from explainer.room.settings import load_settings, save, settings_path

ENV_ROOM, ENV_SEAT, ENV_HUB_TOKEN = "EXPLAINER_ROOM", "EXPLAINER_SEAT", "JUPYTERHUB_API_TOKEN"
TIMEOUT = 1.5                 # seconds, the whole post (connect, send, answer)
MAX_SEAT, MAX_KEY = seat_names.MAX, 64
INSTRUCTOR_HEADER = "X-Room-Instructor"      # the instructor's key: a folder's new seats are not capped
FIELDS = ("exercise", "passed", "failure", "seat", "time", "seat_key")
JOIN_FIELDS = ("seat", "seat_key")
LAST: dict = {}               # the latest post's outcome: {"status": 200} or {"error": "..."} (tests, the CLI)


def clean_seat(seat: str) -> str:
    """A seat name as the board will keep it (``seat_names.clean``); ``ValueError`` naming what is wrong."""
    return seat_names.clean(seat)


def default_seat() -> str:
    """``user@host-XXXX``: the suffix is made once per user and kept, so cloned machines differ."""
    data = load_settings()
    suffix = data.get("suffix")
    if not isinstance(suffix, str) or not suffix.isalnum():
        suffix = secrets.token_hex(2)
        try:
            suffix = save(lambda d: d.setdefault("suffix", suffix))["suffix"]
        except OSError:
            pass                                          # a read-only home: the suffix lasts this process
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "learner"
    return clean_seat(f"{user}@{socket.gethostname()}"[:MAX_SEAT - 5] + f"-{suffix}")


def room() -> str | None:
    """The room's URL: ``EXPLAINER_ROOM``, else the joined one, else None."""
    value = os.environ.get(ENV_ROOM) or load_settings().get("room")
    return value if isinstance(value, str) and value else None


def seat_name(seat: str | None = None) -> str:
    """The seat: the one given, else ``EXPLAINER_SEAT``, else the joined one, else ``default_seat()``."""
    chosen = seat or os.environ.get(ENV_SEAT) or load_settings().get("seat")
    try:
        return clean_seat(chosen) if isinstance(chosen, str) and chosen.strip() else default_seat()
    except ValueError:
        return default_seat()


def _keys(data: dict, room_url: str) -> dict:
    """The seat keys kept for ``room_url`` (made a dict if the file held something else)."""
    rooms = data["keys"] = data.get("keys") if isinstance(data.get("keys"), dict) else {}
    keys = rooms[room_url] = rooms.get(room_url) if isinstance(rooms.get(room_url), dict) else {}
    return keys


def _token(room_url: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(room_url.strip()).query).get("token", [""])[0]


def keep_instructor_key(room_url: str, key: str) -> None:
    """``room serve``: keep the board's instructor key for this user (by the room's token, whatever the host)."""
    def update(data: dict) -> None:
        keys = data.get("instructor") if isinstance(data.get("instructor"), dict) else {}
        keys.pop(_token(room_url), None)
        data["instructor"] = dict(list(keys.items())[-7:] + [(_token(room_url), key)])   # the 8 latest rooms
    save(update)


def instructor_key(room_url: str) -> str | None:
    keys = load_settings().get("instructor")
    key = keys.get(_token(room_url)) if isinstance(keys, dict) else None
    return key if isinstance(key, str) else None


def shown_room(url: str) -> str:
    """The room's URL without its token (what a learner's screen and a notebook show)."""
    parts = urllib.parse.urlsplit(url.strip())
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path or "/", "", ""))


def seat_key(room_url: str, seat: str) -> str | None:
    key = _keys(load_settings(), room_url).get(seat)
    return key if isinstance(key, str) else None


def keep_key(room_url: str, seat: str, key: str) -> None:
    def update(data: dict) -> None:
        _keys(data, room_url)[seat] = key
    save(update)


def api_url(room_url: str, route: str) -> str:
    """``http://HOST:P/?token=T`` (the board's URL) -> ``http://HOST:P/api/ROUTE?token=T``; a hub's board
    ``http://HOST:P/services/board/`` -> ``http://HOST:P/services/board/api/ROUTE``."""
    parts = urllib.parse.urlsplit(room_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"room {shown_room(room_url)!r}: expected the board's URL, http://HOST:PORT/?token=T")
    token = _token(room_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, f"{parts.path.rstrip('/')}/api/{route}",
                                    urllib.parse.urlencode({"token": token}) if token else "", ""))


def hub_headers(room_url: str) -> dict:
    """On the room's JupyterHub (a room URL without a token, and the server's token in the environment): the
    header that tells the board who reports; else none."""
    token = os.environ.get(ENV_HUB_TOKEN, "")
    has_room_token = "token" in urllib.parse.parse_qs(urllib.parse.urlsplit(room_url.strip()).query)
    return {"Authorization": f"token {token}"} if token and not has_room_token else {}


def report_url(room_url: str) -> str:
    return api_url(room_url, "report")


def payload(exercise: str, passed: bool, failure: str | None, seat: str | None = None,
            key: str | None = None) -> dict:
    """The whole report: the six ``FIELDS``, nothing of the code."""
    return {"exercise": str(exercise), "passed": bool(passed),
            "failure": None if passed or failure is None else str(failure),
            "seat": seat_name(seat), "time": round(time.time(), 3), "seat_key": key}


def post(url: str, body: dict, timeout: float = TIMEOUT, headers: dict | None = None) -> dict:
    """POST ``body`` as JSON; returns {"status": code, "answer": ...} or {"error": "..."}; never raises."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer = resp.read(4096)
            return {"status": resp.status, "answer": json.loads(answer or b"{}")}
    except urllib.error.HTTPError as exc:
        try:
            why = json.loads(exc.read(400)).get("error", "")
        except (ValueError, AttributeError, OSError):
            why = ""
        return {"status": exc.code, "error": f"the board refused it (HTTP {exc.code}: {str(why)[:200]})"}
    except (OSError, ValueError) as exc:          # refused, unreachable, timed out, not JSON
        return {"error": f"the board did not answer ({getattr(exc, 'reason', exc)})"}


def _claimed(room_url: str, seat: str, out: dict) -> dict:
    """Keep the seat key the board just gave (its first answer for this seat); the answer keeps no copy."""
    answer = out.get("answer") if isinstance(out.get("answer"), dict) else {}
    key = answer.pop("seat_key", None)
    if out.get("status") == 200 and isinstance(key, str):
        try:
            keep_key(room_url, seat, key)
        except OSError as exc:
            out["error"] = f"the seat key could not be kept in {settings_path()} ({exc.strerror})"
    return out


@dataclass(frozen=True)
class Joined:
    """What ``join`` did, as a notebook shows it: the room's address without its token, the seat, the board's
    HTTP status (None when it did not answer) and why not. The seat key is in the settings file, not here."""
    room: str
    seat: str
    status: int | None
    error: str | None = None

    @property
    def joined(self) -> bool:
        return self.status == 200

    def __str__(self) -> str:
        if self.joined:
            return f"joined {self.room} as {self.seat!r}; every check now reports there (kept in {settings_path()})"
        if self.status:
            return f"not joined: {self.error}"
        return (f"kept {self.room} and seat {self.seat!r} in {settings_path()}, but {self.error}; checks will "
                f"report once the board is up")

    __repr__ = __str__


def join(room_url: str, seat: str) -> Joined:
    """Join ``room_url`` as ``seat``: keep both in the settings file and claim the seat on the board (its key is
    kept there too). Returns a ``Joined`` (no secret in it); ``ValueError`` on a bad URL or name (nothing is
    kept then)."""
    url, seat = api_url(room_url, "join"), clean_seat(seat)
    out = post(url, {"seat": seat, "seat_key": seat_key(room_url, seat)})
    if out.get("status") in (None, 200):                  # joined, or the board is not up yet: keep the choice
        save(lambda d: d.update(room=room_url.strip(), seat=seat))
    out = _claimed(room_url.strip(), seat, out)
    return Joined(shown_room(room_url), seat, out.get("status"), out.get("error"))


def report_verdict(exercise: str, passed: bool, failure: str | None, seat: str | None = None,
                   wait: bool = False, instructor: bool = False) -> threading.Thread | None:
    """Post one verdict if a room is joined or ``EXPLAINER_ROOM`` set; ``wait``: block up to ``TIMEOUT``.
    ``instructor``: the instructor's folder grading (sends the instructor's key, if this user keeps one)."""
    room_url = room()
    if not room_url:
        return None
    try:
        url = report_url(room_url)
    except ValueError as exc:
        LAST.clear()
        LAST["error"] = str(exc)
        if wait:
            print(f"room: report not sent: {exc}", file=sys.stderr)
        return None
    name = seat_name(seat)
    body = payload(exercise, passed, failure, name, seat_key(room_url, name))
    key = instructor_key(room_url) if instructor else None
    headers = {**hub_headers(room_url), **({INSTRUCTOR_HEADER: key} if key else {})}

    def send():
        LAST.update(_claimed(room_url, name, post(url, body, headers=headers)))

    LAST.clear()
    thread = threading.Thread(target=send, name="explainer-room-report", daemon=True)
    thread.start()
    if wait:
        thread.join(TIMEOUT + 0.1)
        if thread.is_alive() or "error" in LAST:
            why = LAST.get("error", f"no answer within {TIMEOUT:g} s")
            print(f"room: report not sent: {why}", file=sys.stderr)
    return thread
