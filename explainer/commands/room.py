"""``python -m explainer room serve [--port P] [--db FILE] [--listen ADDR]``: the instructor's live room board.

Prints the board's URL with the room token and the line learners set (``EXPLAINER_ROOM=...``); serves until
Ctrl-C or SIGTERM (exit 0, the room kept in the ``--db`` file: a restart shows the same board, same token).
Loopback by default; ``--listen`` (e.g. ``0.0.0.0``) for a LAN, with a warning line. This command path
imports neither torch nor the engine (the room server must start in a moment on any laptop).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys

from explainer.errors import UsageError
from explainer.validation import parse_int

HELP = "the room board: serve the instructor's live board of the room's workshop checks"
ENGINE = False                     # the CLI skips the engine's environment check (it would import torch)
DEFAULT_PORT, DEFAULT_DB = 8765, "explainer-room.sqlite3"


def configure(parser):
    parser.add_argument("action", nargs="?", default="serve", metavar="ACTION", help="serve (default)")
    parser.add_argument("--port", default=str(DEFAULT_PORT), help=f"TCP port (default {DEFAULT_PORT}; 0: any free)")
    parser.add_argument("--db", default=DEFAULT_DB, metavar="FILE",
                        help=f"the room's SQLite file (default ./{DEFAULT_DB}; a restart keeps the room)")
    parser.add_argument("--listen", default="127.0.0.1", metavar="ADDR",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 for a LAN)")


def _address(listen: str) -> str:
    try:
        return str(ipaddress.ip_address(listen))
    except ValueError:
        raise UsageError(f"--listen {listen!r}: expected an IP address such as 127.0.0.1 or 0.0.0.0") from None


def _lan_address() -> str:
    """This machine's address on its LAN (a UDP socket's source address; nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return socket.gethostname()


def announce(listen: str):
    def on_ready(port: int, token: str) -> None:
        loopback = ipaddress.ip_address(listen).is_loopback
        host = listen if loopback or not ipaddress.ip_address(listen).is_unspecified else _lan_address()
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{port}/?token={token}"
        if not loopback:
            print(f"warning: listening on {listen}: anyone on this network who has the URL can read the board "
                  "and post to it (plain HTTP)", file=sys.stderr)
        print(f"room board: {url}")
        print(f"learners set: EXPLAINER_ROOM='{url}'  (and EXPLAINER_SEAT=<name>; default user@host)")
        print("stop: Ctrl-C (the room is kept in the --db file)", flush=True)
    return on_ready


def run(args) -> int:
    if args.action != "serve":
        raise UsageError(f"unknown action {args.action!r}; accepted: serve")
    port = parse_int("--port", args.port, 0, 65535)
    listen = _address(args.listen)
    db = os.path.abspath(args.db)
    if os.path.isdir(db) or not os.path.isdir(os.path.dirname(db)):
        raise UsageError(f"--db {args.db!r}: expected a file path in an existing folder")
    try:
        from explainer.room.board import server       # tornado: the instructor's machine only (explainer[room])
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("tornado"):
            raise UsageError("the room server needs tornado: pip install 'explainer[room]'") from None
        raise
    try:
        server.serve(db, port, listen, announce(listen))
    except OSError as exc:
        raise UsageError(f"cannot serve on {listen}:{port} or open {args.db!r}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        print(f"room: stopped; the room is kept in {db}", file=sys.stderr)
    return 0
