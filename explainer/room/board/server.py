"""The room board's web server: seats and reports in, the summary and the live board out, the room token first.

Tornado, because it is a well-kept asynchronous server with no dependencies of its own (it is what Jupyter
runs on, so every workshop machine with JupyterLab already has it), serves a long-lived server-sent-events
stream per board without a thread each, and reads request bodies as they arrive. The server is one process
and one thread: the SQLite store is written from the event loop only.

Every route needs ``?token=T`` or ``Authorization: Bearer T`` (401 without, 403 wrong), checked as soon as the
headers are in, before any body is read; bodies are then read under a deadline and a 2 KiB cap
(``guard.py`` bounds connections and logs). Routes: ``GET /`` the board page (HTML, CSS and JS from this
package, nothing from outside); ``POST /api/join`` claim a seat ({seat, seat_key}; the answer holds the seat's
key the first time); ``POST /api/report`` one verdict (``intake.parse``; the seat's first report claims it too;
4xx and nothing stored when refused; 429 past the seat's rate); ``GET /api/summary`` the room in numbers;
``GET /api/board`` what the page draws (its polling fallback); ``GET /api/events`` the same as server-sent
events, pushed at most every ``PUSH_EVERY`` seconds after a change; ``/favicon.ico`` 204, without a token and
without a log line. A new seat counts against its client's cap unless the request carries the instructor's key
(``client.INSTRUCTOR_HEADER``: the instructor's folder grading).
"""

from __future__ import annotations

import asyncio
import hmac
from html import escape
import json
import time
from importlib import resources

import tornado.ioloop
import tornado.iostream
import tornado.netutil
import tornado.web

from explainer.room.board import guard, intake
from explainer.room.board.store import SEATS_PER_CLIENT, Store
from explainer.room.client import INSTRUCTOR_HEADER
from explainer.workshop.catalog import EXERCISES

PUSH_EVERY = 0.1          # seconds between two pushes of a changing board (coalesces a burst of reports)
PING_EVERY = 15.0         # an idle stream's keep-alive comment (proxies and browsers drop silent streams)
MAX_LISTENERS = 50        # open boards (the projector, a few laptops); beyond it 503
MAX_SERVER_BODY = 65536   # tornado refuses a larger Content-Length itself (400); a route takes intake.MAX_BODY


class RoomToken:
    """Who may use the board on a laptop: whoever has the room token (``?token=T`` or ``Bearer T``); a report's
    seat is the one it names (its seat key proves it). A hub's board uses ``explainer.hub.board_auth`` instead."""

    def __init__(self, token: str):
        self.token = token

    async def admit(self, handler) -> str | None:
        """None when the request may go on (its seat: the body's), else the handler has refused it."""
        token = handler.get_query_argument("token", None)
        auth = handler.request.headers.get("Authorization", "")
        if token is None and auth.startswith("Bearer "):
            token = auth[len("Bearer "):]
        if not token:
            handler.refuse(401, "this room needs its token: open the URL `room serve` printed (?token=...)")
        elif not hmac.compare_digest(token.encode(), self.token.encode()):
            handler.refuse(403, "wrong room token")
        return None

    def page_fields(self, handler) -> dict[str, str]:
        """What the page says where it differs by room: the check value its requests carry (none on a laptop: the
        token is in the URL) and the line shown before any seat."""
        return {"xsrf": "", "empty": "No seats yet. Learners run <code>python -m explainer room join URL --seat NAME"
                "</code> with this page's URL, then their checks."}


class Room:
    """The server's state: the store, the rate limit, the open event streams, the log, who may come in."""

    def __init__(self, db: str, rate: float | None = intake.RATE, seats_per_client: int = SEATS_PER_CLIENT,
                 auth=None):
        self.store = Store(db, list(EXERCISES), seats_per_client)
        self.auth = auth or RoomToken(self.store.token)
        self.limit = intake.RateLimit(rate)
        self.log = guard.OneLine(self.store.token)
        self.listeners: set[Events] = set()
        self.pushed = -1
        self.page = _page()

    def board_json(self) -> str:
        state = self.store.board()
        state["exercises"] = [{"id": e.id, "function": e.function, "minutes": e.minutes}
                              for e in EXERCISES.values()]
        return json.dumps(state)

    def push(self) -> None:
        """Send the board to every stream if it changed; a stream still flushing the last push is skipped."""
        now = time.monotonic()
        changed = self.store.version != self.pushed
        if changed:
            self.pushed = self.store.version
            data = f"data: {self.board_json()}\n\n"
        for listener in list(self.listeners):
            if changed:
                listener.send(data, now)
            elif now - listener.last_sent > PING_EVERY:
                listener.send(": ping\n\n", now)


def _page() -> str:
    static = resources.files("explainer.room.board") / "static"
    html = (static / "board.html").read_text(encoding="utf-8")
    return (html.replace("/*BOARD_CSS*/", (static / "board.css").read_text(encoding="utf-8"))
                .replace("/*BOARD_JS*/", (static / "board.js").read_text(encoding="utf-8")))


@tornado.web.stream_request_body
class Base(tornado.web.RequestHandler):
    """The token before anything else; a body only where a route takes one, at most ``intake.MAX_BODY``."""
    takes_body = False

    def initialize(self, room: Room):
        self.room, self.body = room, bytearray()

    async def prepare(self):
        self.identity = await self.room.auth.admit(self)      # a hub name, or None (the seat the body names)
        if self._finished:
            return
        if not self.request.headers.get("Content-Length", "0").isdigit():
            self.refuse(400, "Content-Length: expected a number of bytes")
        elif int(self.request.headers.get("Content-Length", "0")) > intake.MAX_BODY:
            self.refuse(413, f"bodies are capped at {intake.MAX_BODY} bytes")           # refused unread

    def data_received(self, chunk: bytes):
        if self._finished:
            return
        self.body += chunk
        if not self.takes_body:
            self.refuse(400, "this route takes no body")
        elif len(self.body) > intake.MAX_BODY:
            self.refuse(413, f"bodies are capped at {intake.MAX_BODY} bytes")

    def refuse(self, status: int, message: str):
        """The answer to a refused request: JSON, and one (rate-limited) line of log without the query."""
        self.room.log.line(f"refused {status} {self.request.method} {self.request.path} from "
                           f"{self.request.remote_ip}: {message}")
        if self._finished:
            return
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))

    def write_error(self, status_code, **kwargs):
        self.refuse(status_code, self._reason)

    def log_exception(self, typ, value, tb):
        """An error of the server's own: one line naming its type, never a traceback or the request's query."""
        self.room.log.line(f"error {self.request.method} {self.request.path}: {typ.__name__ if typ else '?'}")

    def set_default_headers(self):
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")

    def counted(self) -> bool:
        """This request's new seats count against its client's cap: all but the instructor's folder grading,
        which sends the instructor's key (``client.INSTRUCTOR_HEADER``)."""
        given = self.request.headers.get(INSTRUCTOR_HEADER, "")
        return not (given and hmac.compare_digest(given.encode(), self.room.store.instructor.encode()))


class Page(Base):
    def get(self):
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", "default-src 'none'; connect-src 'self'; "
                        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'self' data:")
        fields = self.room.auth.page_fields(self)
        self.finish(self.room.page.replace("/*XSRF*/", escape(fields["xsrf"], quote=True))
                    .replace("/*EMPTY*/", fields["empty"]))


class Join(Base):
    takes_body = True

    def post(self):
        try:
            seat = intake.parse_join(bytes(self.body))
            key = self.room.store.claim(seat["seat"], seat["seat_key"], self.request.remote_ip, time.time(),
                                        self.counted())
        except intake.Refused as exc:
            return self.refuse(exc.status, str(exc))
        self.finish({"seat": seat["seat"], "seat_key": key})


class Report(Base):
    takes_body = True

    def post(self):
        try:
            report = intake.parse(bytes(self.body), EXERCISES)
            store = self.room.store
            if self.identity is not None:                   # a hub's board: the seat is who the hub says
                if report["seat"] != self.identity:
                    raise intake.Refused(403, f"a report for {report['seat']!r} from {self.identity!r}: "
                                              "a learner reports only for themselves")
                key = store.hub_seat(self.identity, time.time())
            else:
                key = store.claim(report["seat"], report["seat_key"], self.request.remote_ip, time.time(),
                                  self.counted())
            if not self.room.limit.allow(report["seat"]):
                self.set_header("Retry-After", "1")
                raise intake.Refused(429, f"at most {intake.RATE:g} reports per second per seat")
            seq = store.add(report, time.time())
        except intake.Refused as exc:
            return self.refuse(exc.status, str(exc))
        self.finish({"seq": seq, "seat": report["seat"], "seat_key": key})


class Summary(Base):
    def get(self):
        self.finish(self.room.store.summary())


class BoardState(Base):
    def get(self):
        self.set_header("Content-Type", "application/json")
        self.finish(self.room.board_json())


class Events(Base):
    """One server-sent-events stream: the board now, then after every change."""

    async def get(self):
        if len(self.room.listeners) >= MAX_LISTENERS:
            return self.refuse(503, f"at most {MAX_LISTENERS} boards may be open at once")
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("X-Accel-Buffering", "no")
        self.closed = asyncio.get_running_loop().create_future()
        self.flushing = None
        self.send("retry: 2000\n" + f"data: {self.room.board_json()}\n\n", time.monotonic())
        self.room.listeners.add(self)
        try:
            await self.closed
        finally:
            self.room.listeners.discard(self)

    def send(self, data: str, now: float) -> None:
        if self.flushing is not None and not self.flushing.done():
            return                                  # a slow board: it gets the next push instead
        self.last_sent = now
        try:
            self.write(data)
            self.flushing = self.flush()
        except tornado.iostream.StreamClosedError:
            self.on_connection_close()

    def on_connection_close(self):
        if hasattr(self, "closed") and not self.closed.done():
            self.closed.set_result(None)


def make_app(room: Room, prefix: str = "/", handlers=(), settings=None) -> tornado.web.Application:
    """The routes under ``prefix`` (a hub serves its board at /services/board/), then ``handlers`` as they are."""
    routes = [("", Page), ("api/join", Join), ("api/report", Report), ("api/summary", Summary),
              ("api/board", BoardState), ("api/events", Events)]
    return tornado.web.Application([(prefix + path, handler, {"room": room}) for path, handler in routes]
                                   + [(prefix + "favicon.ico", Favicon)] + list(handlers), log_function=lambda handler: None,
                                   default_handler_class=NotFound, default_handler_args={"room": room},
                                   **(settings or {}))


class Favicon(tornado.web.RequestHandler):
    """A browser asks for ``/favicon.ico`` without the token (the page names none: ``rel="icon"`` is empty data):
    answered 204, nothing logged, nothing shown."""

    def get(self):
        self.set_status(204)
        self.finish()


class NotFound(Base):
    async def prepare(self):
        await super().prepare()
        if not self._finished:
            self.refuse(404, "no such page")


def serve(db: str, port: int, listen: str, on_ready, rate: float | None = intake.RATE,
          seats_per_client: int = SEATS_PER_CLIENT, auth=None, prefix: str = "/", handlers=(), settings=None) -> None:
    """Bind, call ``on_ready(port, token, instructor_key)``, serve until KeyboardInterrupt (Ctrl-C or SIGTERM via the CLI).
    ``store.InUse`` when another board serves ``db``. A hub's board passes its ``auth``, ``prefix``, the OAuth
    callback among ``handlers`` and the cookie secret among ``settings``."""
    max_open = guard.max_connections()
    room = Room(db, rate, seats_per_client, auth)
    guard.quiet_libraries(room.log)
    sockets = tornado.netutil.bind_sockets(port, listen)
    server = guard.RoomServer(make_app(room, prefix, handlers, settings), log=room.log, max_open=max_open, max_body_size=MAX_SERVER_BODY,
                              max_header_size=8192, max_buffer_size=1 << 20,
                              idle_connection_timeout=guard.HEADER_TIMEOUT, body_timeout=guard.BODY_TIMEOUT)
    server.add_sockets(sockets)
    loop = tornado.ioloop.IOLoop.current()
    loop.asyncio_loop.set_exception_handler(lambda _, ctx: room.log.line(f"error: {ctx.get('message', '?')}"))
    pusher = tornado.ioloop.PeriodicCallback(room.push, PUSH_EVERY * 1000)
    pusher.start()
    try:
        on_ready(sockets[0].getsockname()[1], room.store.token, room.store.instructor)
        loop.start()
    finally:
        pusher.stop()
        server.stop()
        for listener in list(room.listeners):
            listener.on_connection_close()
        room.store.close()
