"""The room board's web server: reports in, the summary and the live board out, one room token on every request.

Tornado, because it is a well-kept asynchronous server with no dependencies of its own (it is what Jupyter
runs on, so every workshop machine with JupyterLab already has it), serves a long-lived server-sent-events
stream per board without a thread each, and caps request sizes itself. The server is one process and one
thread: the SQLite store is written from the event loop only.

Routes (every one needs ``?token=T`` or ``Authorization: Bearer T``: 401 without, 403 wrong):
``GET /`` the board page (HTML, CSS and JS from this package, nothing from outside); ``POST /api/report``
one verdict (``intake.parse``; 4xx and nothing stored when refused; 429 past the seat's rate);
``GET /api/summary`` the room in numbers; ``GET /api/board`` what the page draws (its polling fallback);
``GET /api/events`` the same as server-sent events, pushed at most every ``PUSH_EVERY`` seconds after a change.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from importlib import resources

import tornado.httpserver
import tornado.ioloop
import tornado.iostream
import tornado.netutil
import tornado.web

from explainer.room.board import intake
from explainer.room.board.store import MAX_SEATS, RoomFull, Store
from explainer.workshop.exercises import EXERCISES

PUSH_EVERY = 0.1          # seconds between two pushes of a changing board (coalesces a burst of reports)
PING_EVERY = 15.0         # an idle stream's keep-alive comment (proxies and browsers drop silent streams)
MAX_LISTENERS = 50        # open boards (the projector, a few laptops); beyond it 503
MAX_SERVER_BODY = 65536   # tornado refuses larger bodies before reading them; intake caps reports at 2 KiB


class Room:
    """The server's state: the store, the rate limit, the open event streams."""

    def __init__(self, db: str, rate: float | None = intake.RATE):
        self.store = Store(db, list(EXERCISES))
        self.limit = intake.RateLimit(rate)
        self.listeners: set[Events] = set()
        self.pushed_seq = -1
        self.page = _page()

    def board_json(self) -> str:
        state = self.store.board()
        state["exercises"] = [{"id": e.id, "function": e.function, "minutes": e.minutes}
                              for e in EXERCISES.values()]
        return json.dumps(state)

    def push(self) -> None:
        """Send the board to every stream if it changed; a stream still flushing the last push is skipped."""
        now = time.monotonic()
        changed = self.store.seq != self.pushed_seq
        if changed:
            self.pushed_seq = self.store.seq
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


class Base(tornado.web.RequestHandler):
    def initialize(self, room: Room):
        self.room = room

    def prepare(self):
        token = self.get_query_argument("token", None)
        auth = self.request.headers.get("Authorization", "")
        if token is None and auth.startswith("Bearer "):
            token = auth[len("Bearer "):]
        if not token:
            self.refuse(401, "this room needs its token: open the URL `room serve` printed (?token=...)")
        elif not hmac.compare_digest(token.encode(), self.room.store.token.encode()):
            self.refuse(403, "wrong room token")

    def refuse(self, status: int, message: str):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))

    def write_error(self, status_code, **kwargs):
        self.refuse(status_code, self._reason)

    def set_default_headers(self):
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")


class Page(Base):
    def get(self):
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", "default-src 'none'; connect-src 'self'; "
                        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'self' data:")
        self.finish(self.room.page)


class Report(Base):
    def post(self):
        try:
            report = intake.parse(self.request.body, EXERCISES)
            store = self.room.store
            if report["seat"] not in store.seats and len(store.seats) >= MAX_SEATS:
                raise intake.Refused(409, f"the room holds {MAX_SEATS} seats already")
            if not self.room.limit.allow(report["seat"]):
                self.set_header("Retry-After", "1")
                raise intake.Refused(429, f"at most {intake.RATE:g} reports per second per seat")
            seq = store.add(report, time.time())
        except intake.Refused as exc:
            return self.refuse(exc.status, str(exc))
        except RoomFull as exc:
            return self.refuse(409, str(exc))
        self.finish({"seq": seq})


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


def make_app(room: Room) -> tornado.web.Application:
    routes = [(r"/", Page), (r"/api/report", Report), (r"/api/summary", Summary), (r"/api/board", BoardState),
              (r"/api/events", Events)]
    return tornado.web.Application([(path, handler, {"room": room}) for path, handler in routes],
                                   log_function=_log)


def _log(handler) -> None:
    """Only the server's own failures, without the query (it holds the token); refusals are the answer."""
    if handler.get_status() >= 500:
        print(f"room: {handler.get_status()} {handler.request.method} {handler.request.path}", flush=True)


def serve(db: str, port: int, listen: str, on_ready, rate: float | None = intake.RATE) -> None:
    """Bind, call ``on_ready(port, token)``, serve until KeyboardInterrupt (Ctrl-C or SIGTERM via the CLI)."""
    room = Room(db, rate)
    sockets = tornado.netutil.bind_sockets(port, listen)
    server = tornado.httpserver.HTTPServer(make_app(room), max_body_size=MAX_SERVER_BODY,
                                           max_buffer_size=1 << 20, idle_connection_timeout=60)
    server.add_sockets(sockets)
    loop = tornado.ioloop.IOLoop.current()
    pusher = tornado.ioloop.PeriodicCallback(room.push, PUSH_EVERY * 1000)
    pusher.start()
    try:
        on_ready(sockets[0].getsockname()[1], room.store.token)
        loop.start()
    finally:
        pusher.stop()
        server.stop()
        for listener in list(room.listeners):
            listener.on_connection_close()
        room.store.close()
