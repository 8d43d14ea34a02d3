"""What keeps one hostile client from holding the board: bounded connections, survived accept errors, deadlines,
and at most one line of log per second.

* ``RoomServer`` (tornado's ``HTTPServer``): at most ``PER_CLIENT`` open connections per client address and
  ``max_connections`` in all (below the process's file limit, raised to its hard limit first); a connection
  beyond either is closed at once. When ``accept`` fails anyway (no file descriptor left) the listener pauses
  for ``PAUSE`` seconds instead of spinning, and says so once.
* Deadlines (``HEADER_TIMEOUT``, ``BODY_TIMEOUT``): a request's headers, and then its body, must arrive in
  time; an idle connection is closed after ``HEADER_TIMEOUT``. Bodies larger than the server's cap are refused
  from their ``Content-Length``, unread.
* ``OneLine``: every refusal and every error tornado or asyncio would log becomes one line, ``room: ...``, never
  a traceback, with the room token replaced by ``<token>``; at most one line per ``EVERY`` seconds (the next
  line says how many were left out).
"""

from __future__ import annotations

import errno
import logging
import resource
import sys
import time

import tornado.httpserver
import tornado.ioloop
import tornado.netutil

PER_CLIENT = 64           # open connections per client address (a laptop needs 2: a report and maybe a board)
HEADER_TIMEOUT = 10.0     # seconds for a request's headers (and an idle keep-alive connection)
BODY_TIMEOUT = 10.0       # seconds for a request's body once the headers are in
PAUSE = 0.5               # seconds the listener rests when accept() finds no file descriptor
EVERY = 1.0               # seconds between two log lines


class OneLine:
    """The server's log: one line each, ``room: ...``, at most one per ``EVERY`` s, the token never shown."""

    def __init__(self, secret: str = "", stream=None):
        self.secret, self.stream = secret, sys.stderr if stream is None else stream
        self.last, self.left_out = -EVERY, 0

    def line(self, text: str) -> None:
        now = time.monotonic()
        if now - self.last < EVERY:
            self.left_out += 1
            return
        first = (str(text).splitlines() or [""])[0][:300]
        if self.secret:
            first = first.replace(self.secret, "<token>")
        more = f" (and {self.left_out} more left out)" if self.left_out else ""
        self.last, self.left_out = now, 0
        print(f"room: {''.join(ch if ch.isprintable() else '?' for ch in first)}{more}", file=self.stream, flush=True)


class LogToOneLine(logging.Handler):
    """tornado's and asyncio's own log records (e.g. an accept error, a malformed request) as ``OneLine``s."""

    def __init__(self, log: OneLine):
        super().__init__(logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        self.log.line(f"{record.name}: {record.getMessage()}" + (f" ({type(exc).__name__})" if exc else ""))


def quiet_libraries(log: OneLine) -> None:
    handler = LogToOneLine(log)
    for name in ("tornado", "asyncio"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.WARNING)
        logger.propagate = False


def max_connections(margin: int = 64, cap: int = 4096) -> int:
    """Raise this process's open-file limit to its hard limit; the connections that leave ``margin`` free."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(16, min(cap, soft - margin))


class RoomServer(tornado.httpserver.HTTPServer):
    """tornado's HTTP server with connection bounds per client and in all, and an accept that cannot spin."""

    def initialize(self, *args, log: OneLine, max_open: int, **kwargs):
        super().initialize(*args, **kwargs)
        self.log, self.max_open = log, max_open
        self.open_by: dict[str, int] = {}

    def add_sockets(self, sockets) -> None:
        for sock in sockets:
            self._sockets[sock.fileno()] = sock
            self._handlers[sock.fileno()] = self._listen(sock)

    def _listen(self, sock):
        loop = tornado.ioloop.IOLoop.current()

        def accept(fd, events) -> None:
            for _ in range(128):
                try:
                    connection, address = sock.accept()
                except BlockingIOError:
                    return
                except ConnectionAbortedError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        raise
                    self.log.line(f"no file descriptor left to accept a connection; pausing {PAUSE:g} s")
                    loop.remove_handler(sock)
                    loop.call_later(PAUSE, lambda: loop.add_handler(sock, accept, tornado.ioloop.IOLoop.READ))
                    return
                self._handle_connection(connection, address)

        loop.add_handler(sock, accept, tornado.ioloop.IOLoop.READ)
        return lambda: loop.remove_handler(sock)

    def handle_stream(self, stream, address) -> None:
        client = address[0] if isinstance(address, tuple) else str(address)
        if self.open_by.get(client, 0) >= PER_CLIENT or len(self._connections) >= self.max_open:
            self.log.line(f"refused a connection from {client}: {PER_CLIENT} per client, {self.max_open} in all")
            stream.close()
            return
        self.open_by[client] = self.open_by.get(client, 0) + 1
        super().handle_stream(stream, address)

    def on_close(self, server_conn) -> None:
        client = server_conn.context.address[0] if isinstance(server_conn.context.address, tuple) else \
            str(server_conn.context.address)
        left = self.open_by.get(client, 1) - 1
        if left > 0:
            self.open_by[client] = left
        else:
            self.open_by.pop(client, None)
        super().on_close(server_conn)
