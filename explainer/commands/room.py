"""``python -m explainer room serve|join|status``: the instructor's live room board, and a learner joining it.

``serve [--port P] [--db FILE] [--listen ADDR] [--seats-per-client N]`` prints the board's URL with the room
token and the line learners run in their explainer folder (``LEARNER_PYTHON -m explainer room join URL --seat
NAME``: the interpreter of the venv `make lab` built, so it works with no venv active and where a system has no
``python`` command, as Debian has none); serves until Ctrl-C or SIGTERM (exit 0, the
room kept in the ``--db`` file: a restart shows the same board, same token). The file defaults to this user's
state folder (``$XDG_STATE_HOME/explainer/room.sqlite3``, else ``~/.local/state/...``), outside any checkout;
it is created 0600 and one board at a time serves it (a second refuses in one line). Loopback by default;
``--listen`` (e.g. ``0.0.0.0``) for a LAN, with a warning line. Every client (address), this machine too, claims
at most ``--seats-per-client`` new seats; the board's instructor key, kept in this user's room settings
(``room.client``), lets this user's folder grading (``workshop check ID DIR``) claim a seat per hand-in.

``join URL --seat NAME`` keeps the room and the seat for this user (``room.client``; outside the repository)
and claims the seat on the board, whose key is kept beside them: every later check, in a terminal or any
notebook kernel, reports there. Exit 0 joined, 1 kept but the board did not answer (the checks report once it
is up), 2 bad input or a seat the board refused. ``status`` prints the room and seat this user reports to.
This command path imports neither torch nor the engine (the room server must start in a moment on any laptop).
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import socket
import sys

from explainer.errors import UsageError
from explainer.room import client
from explainer.validation import parse_int

HELP = "the room board: serve the instructor's live board, or join it as a learner's seat"
ENGINE = False                     # the CLI skips the engine's environment check (it would import torch)
DEFAULT_PORT = 8765
LEARNER_PYTHON = ".venv/bin/python"  # what `make lab` builds, from the checkout's folder (scripts/setup.sh)


def this_python() -> str:
    """The interpreter running this command, as a learner can type it here: relative inside this folder."""
    rel = os.path.relpath(sys.executable)
    path = sys.executable if rel.startswith("..") else rel if os.sep in rel else f".{os.sep}{rel}"
    return shlex.quote(path)


def default_db() -> str:
    """``$XDG_STATE_HOME/explainer/room.sqlite3`` (default ``~/.local/state``): outside any checkout."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "explainer", "room.sqlite3")


def configure(parser):
    parser.add_argument("action", nargs="?", default="serve", metavar="ACTION",
                        help="serve (default; the instructor), join (a learner), status")
    parser.add_argument("url", nargs="?", metavar="URL", help="join: the board's URL that `room serve` printed")
    parser.add_argument("--seat", metavar="NAME", help="join: your seat's name on the board (e.g. your first name)")
    parser.add_argument("--port", default=str(DEFAULT_PORT), help=f"TCP port (default {DEFAULT_PORT}; 0: any free)")
    parser.add_argument("--db", default=None, metavar="FILE",
                        help="the room's SQLite file (default: this user's state folder; a restart keeps the room)")
    parser.add_argument("--listen", default="127.0.0.1", metavar="ADDR",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 for a LAN)")
    parser.add_argument("--seats-per-client", default="3", metavar="N",
                        help="new seats one client address may claim, this machine's too (default 3; this user's "
                             "folder grading: any)")


def listen_address(listen: str) -> str:
    try:
        return str(ipaddress.ip_address(listen))
    except ValueError:
        raise UsageError(f"--listen {listen!r}: expected an IP address such as 127.0.0.1 or 0.0.0.0") from None


def lan_address() -> str:
    """This machine's address on its LAN (a UDP socket's source address; nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return socket.gethostname()


def announce(listen: str):
    def on_ready(port: int, token: str, instructor: str) -> None:
        loopback = ipaddress.ip_address(listen).is_loopback
        host = listen if loopback or not ipaddress.ip_address(listen).is_unspecified else lan_address()
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{port}/?token={token}"
        if not loopback:
            print(f"warning: listening on {listen}: anyone on this network who has the URL can read the board "
                  "and post to it (plain HTTP)", file=sys.stderr)
        try:
            client.keep_instructor_key(url, instructor)      # this user's folder grading is not capped
        except OSError as exc:
            print(f"warning: the instructor key could not be kept in {client.settings_path()} ({exc.strerror}); "
                  f"grading a folder here claims at most --seats-per-client seats", file=sys.stderr)
        print(f"room board: {url}")
        print(f"learners run, in their explainer folder: {LEARNER_PYTHON} -m explainer room join '{url}' --seat <name>")
        print("stop: Ctrl-C (the room is kept in the --db file)", flush=True)
    return on_ready


def join(args) -> int:
    if not args.url or not args.seat:
        raise UsageError("join needs the board's URL and --seat NAME: room join 'http://HOST:PORT/?token=T' --seat ada")
    try:
        out = client.join(args.url, args.seat)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot keep the room in {client.settings_path()}: {exc.strerror or exc}") from None
    if out.joined:
        print(out)
        return 0
    if out.status:
        raise UsageError(f"room join: {out.error}")
    print(out, file=sys.stderr)
    return 1


def status() -> int:
    url = client.room()
    if not url:
        print(f"no room joined: {this_python()} -m explainer room join URL --seat NAME")
        return 0
    override = [v for v in (client.ENV_ROOM, client.ENV_SEAT) if os.environ.get(v)]
    seat = client.seat_name()
    key = "with its seat key" if client.seat_key(url, seat) else "no seat key yet (the first report claims the seat)"
    print(f"room {client.shown_room(url)}, seat {seat!r}, {key}" + (f" ({', '.join(override)} set)" if override else ""))
    return 0


def run(args) -> int:
    if args.action == "join":
        return join(args)
    if args.action == "status":
        return status()
    if args.action != "serve":
        raise UsageError(f"unknown action {args.action!r}; accepted: serve, join, status")
    port = parse_int("--port", args.port, 0, 65535)
    seats = parse_int("--seats-per-client", args.seats_per_client, 1, 500)
    listen = listen_address(args.listen)
    db = os.path.abspath(args.db) if args.db else default_db()
    if not args.db:
        os.makedirs(os.path.dirname(db), mode=0o700, exist_ok=True)
    if os.path.isdir(db) or not os.path.isdir(os.path.dirname(db)):
        raise UsageError(f"--db {args.db!r}: expected a file path in an existing folder")
    try:
        from explainer.room.board import server, store  # tornado: the instructor's machine only (explainer[room])
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("tornado"):
            raise UsageError("the room server needs tornado: pip install 'explainer[room]'") from None
        raise
    try:
        server.serve(db, port, listen, announce(listen), seats_per_client=seats)
    except store.InUse as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot serve on {listen}:{port} or open {db!r}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        print(f"room: stopped; the room is kept in {db}", file=sys.stderr)
    return 0
