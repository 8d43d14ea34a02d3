"""``python -m explainer hub serve|remove|board``: the room on one machine, a JupyterHub (``make hub`` first).

``serve [--listen ADDR] [--port P]`` (as root) starts the hub and prints one line: its URL and the room code.
Learners open the URL and sign in with a name of their choice and the room code; the instructor signs in as
``instructor`` with the code in ``STATE/instructor-code`` (the hub's admin; the board is under Services). It
serves until Ctrl-C or SIGTERM (exit 0), then stops every process it started. Loopback by default; ``--listen``
(e.g. ``0.0.0.0``) for a LAN, with a warning line. A restart on the same ``--state`` folder is the same room:
the same code, the same names, each learner's files, the board's history. More: ``--state DIR`` (default
/var/lib/explainer-hub), ``--prefix DIR`` (make hub's HUB_PREFIX), ``--homes DIR``, ``--account-prefix P``,
``--memory GIB`` and ``--processes N`` per learner, ``--max-learners N``, ``--cull-after SECONDS``.

``remove [--state DIR] --yes`` ends the workshop on this machine: every learner account (and its home and
processes) the hub made, and the state folder. ``board`` is what the hub runs as its board service.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import sys

from explainer.commands.room import lan_address, listen_address
from explainer.errors import UsageError
from explainer.hub import accounts
from explainer.hub.serve import HubError, serve, stop
from explainer.hub.state import DEFAULT_HOMES, DEFAULT_PREFIX, DEFAULT_STATE, Settings, State
from explainer.validation import parse_int

HELP = "the room on one machine: a JupyterHub where learners sign in with their name and the room code"
ENGINE = False


def configure(parser):
    parser.add_argument("action", nargs="?", default="serve", metavar="ACTION",
                        help="serve (default), remove (the end of the workshop), board (run by the hub)")
    parser.add_argument("--listen", default="127.0.0.1", metavar="ADDR",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 for a LAN)")
    parser.add_argument("--port", default="8000", help="TCP port of the hub (default 8000; 0: any free)")
    parser.add_argument("--state", default=DEFAULT_STATE, metavar="DIR",
                        help=f"the hub's own folder, kept across restarts (default {DEFAULT_STATE})")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, metavar="DIR",
                        help=f"where `make hub` set the hub up (HUB_PREFIX; default {DEFAULT_PREFIX})")
    parser.add_argument("--homes", default=DEFAULT_HOMES, metavar="DIR",
                        help=f"the learners' homes (default {DEFAULT_HOMES})")
    parser.add_argument("--account-prefix", default="exl-", metavar="P",
                        help="the start of every learner's Unix account name (default exl-)")
    parser.add_argument("--memory", default="2", metavar="GIB", help="memory per learner, GiB (default 2)")
    parser.add_argument("--processes", default="256", metavar="N", help="processes per learner (default 256)")
    parser.add_argument("--max-learners", default="60", metavar="N", help="names the room takes (default 60)")
    parser.add_argument("--cull-after", default="3600", metavar="SECONDS",
                        help="an idle server is stopped after this long (default 3600; its files stay)")
    parser.add_argument("--yes", action="store_true", help="remove: really remove the accounts and homes")


def settings_from(args) -> Settings:
    try:
        memory = float(args.memory)
    except ValueError:
        memory = -1.0
    if not 0.25 <= memory <= 1024:
        raise UsageError(f"--memory {args.memory!r}: expected GiB per learner, 0.25..1024")
    return Settings(prefix=os.path.abspath(args.prefix), homes=os.path.abspath(args.homes),
                    account_prefix=accounts.check_prefix(args.account_prefix), listen=listen_address(args.listen),
                    port=parse_int("--port", args.port, 0, 65535), memory=int(memory * (1 << 30)),
                    processes=parse_int("--processes", args.processes, 32, 100_000),
                    cull_after=parse_int("--cull-after", args.cull_after, 60, 7 * 86400),
                    max_learners=parse_int("--max-learners", args.max_learners, 1, 1000))


def announce(settings: Settings, state_dir: str):
    def on_ready(code: str, limits: str) -> None:
        listen = ipaddress.ip_address(settings.listen)
        host = settings.listen if listen.is_loopback or not listen.is_unspecified else lan_address()
        host = f"[{host}]" if ":" in host else host
        if not listen.is_loopback:
            print(f"warning: listening on {settings.listen}: anyone on this network can reach the sign-in page, "
                  "and names, codes and notebooks cross it unencrypted (plain HTTP)", file=sys.stderr)
        print(f"hub: http://{host}:{settings.port}/   room code: {code}", flush=True)
        print(f"hub: limits per learner: {limits}; instructor: sign in as {settings.instructor!r} with the code in "
              f"{os.path.join(state_dir, 'instructor-code')}; log: {os.path.join(state_dir, 'hub.log')}; "
              "stop: Ctrl-C", file=sys.stderr, flush=True)
    return on_ready


def remove(args) -> int:
    state_dir = os.path.abspath(args.state)
    try:
        settings = State(state_dir).settings()
    except (OSError, ValueError, TypeError):
        raise UsageError(f"--state {state_dir}: no hub settings there (was `hub serve` run with it?)") from None
    users = accounts.accounts_with(settings.account_prefix)
    if not args.yes:
        print(f"hub remove would delete {len(users)} accounts named {settings.account_prefix}* with their homes in "
              f"{settings.homes}, and {state_dir}; run it again with --yes")
        return 1
    ended = stop(None, State(state_dir), settings)        # a hub whose `hub serve` was killed still runs: end it first
    if ended:
        print(f"hub: ended {ended} process{'es' if ended > 1 else ''} of this hub that still ran")
    gone = accounts.remove_all(settings.account_prefix, settings.homes)
    shutil.rmtree(state_dir, ignore_errors=True)
    try:
        os.rmdir(settings.homes)
    except OSError:
        pass
    print(f"hub: removed {len(gone)} accounts ({settings.account_prefix}*), their homes and {state_dir}")
    return 0


def board() -> int:
    from explainer.hub import board_auth            # JupyterHub's and tornado's: only in the hub's venv
    from explainer.room.board import server
    state = State(os.environ["EXPLAINER_HUB_STATE"])
    settings = state.settings()
    try:
        server.serve(str(state.file("board.sqlite3")), settings.board_port,
                     settings.extra.get("board_listen", "127.0.0.1"), lambda *ready: None,   # port, token, instructor key: unused here
                     **board_auth.service())
    except KeyboardInterrupt:
        pass
    return 0


def run(args) -> int:
    if args.action == "board":
        return board()
    if args.action == "remove":
        return remove(args)
    if args.action != "serve":
        raise UsageError(f"unknown action {args.action!r}; accepted: serve, remove, board")
    settings = settings_from(args)
    try:
        serve(os.path.abspath(args.state), settings, announce(settings, os.path.abspath(args.state)))
    except HubError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        print(f"hub: stopped; the room (code, names, files, board) is kept in {os.path.abspath(args.state)}",
              file=sys.stderr)
    return 0
