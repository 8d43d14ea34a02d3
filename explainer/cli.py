"""``python -m explainer SUBCOMMAND``: one module per subcommand in ``explainer/commands/``.

Each command module exposes ``HELP`` (one line), ``configure(parser)`` and ``run(args) -> int``, and
``ENGINE = False`` if it never starts the engine (then the engine's ``EXPLAINER_*`` check, which loads torch,
is skipped). Only the command being run is configured, so ``room serve`` never imports torch.
Bad input raises ``UsageError`` (or ``ValueError``) and becomes a one-line message with exit code 2.
Ctrl-C or SIGTERM ends the rank processes, the forkserver and the resource tracker and exits 130 with
one line; a closed pipe (``... | head``) exits quietly (141, as a process killed by SIGPIPE). A terminal whose
encoding cannot show the marks (✓ ✗ · –: a Latin-1 or ASCII console) gets them in plain letters (``PLAIN``), so
a verdict is printed whatever the terminal.
"""

from __future__ import annotations

import argparse
import codecs
import importlib
import multiprocessing.util
import os
import pkgutil
import signal
import sys
import threading

import explainer.commands as commands
from explainer.errors import UsageError


PLAIN = {"✓": "ok", "✗": "x", "·": "-", "–": "-", "—": "-", "→": "->", "←": "<-", "×": "x", "…": "...",
         "≤": "<=", "≥": ">=", "≠": "!=", "●": "*", "↻": "~", "⏸": "||", "▸": ">", "≈": "~"}


def _plain(exc: UnicodeError):
    """The codec error handler ``explainer-plain``: a mark the terminal cannot show, in plain letters (else ?)."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(PLAIN.get(ch, "?") for ch in exc.object[exc.start:exc.end]), exc.end


codecs.register_error("explainer-plain", _plain)


def _plain_terminal() -> None:
    """stdout and stderr that cannot encode the marks write them in plain letters instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            "".join(PLAIN).encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError, AttributeError):
            try:
                stream.reconfigure(errors="explainer-plain")
            except (AttributeError, ValueError, OSError):
                pass


def _command_modules(only: str | None = None):
    """(name, module) of every command; with ``only`` naming one, just that one is imported, so ``doctor`` on
    a bare Python (no torch, no tornado) never imports another command's module."""
    names = sorted(info.name for info in pkgutil.iter_modules(commands.__path__) if not info.name.startswith("_"))
    for name in [only] if only in names else names:
        yield name, importlib.import_module(f"explainer.commands.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand; with ``only`` naming one, just that one (configuring ``train`` loads torch, so
    ``room serve`` configures only itself and stays free of torch)."""
    parser = argparse.ArgumentParser(
        prog="python -m explainer",
        description="Run the real mechanisms behind vLLM PRs #45828 and #40150 at toy scale.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _command_modules(only):
        sp = sub.add_parser(name, help=module.HELP, description=module.HELP)
        if only in (None, name):
            module.configure(sp)
        sp.set_defaults(_run=module.run, _engine_env=getattr(module, "ENGINE", True))
    return parser


def _check_environment() -> None:
    """Every EXPLAINER_* variable, before any command does work or starts a process (exit 2 on a bad one)."""
    from explainer.distributed.device_communicators.comm_config import validate_env
    validate_env()


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _quiet_stdout() -> None:
    """The reader went away: send whatever is still buffered nowhere, so exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    if argv is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)     # the real CLI: SIGTERM ends like Ctrl-C
        _plain_terminal()
    try:
        code = _main(argv)
        sys.stdout.flush()                                # a closed pipe shows here, not at interpreter exit
        return code
    except KeyboardInterrupt as exc:
        how = str(exc) or "SIGINT"
        if argv is None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        if "explainer.distributed.procs" in sys.modules:   # ranks are ended by launch(); now its helpers
            try:
                sys.modules["explainer.distributed.procs"].stop_helpers()
            except Exception:                             # noqa: BLE001 - exiting anyway
                pass
        print(f"\rinterrupted ({how}): rank processes, forkserver and resource tracker ended", file=sys.stderr)
        if argv is None:                                  # the real CLI: skip torch's slow interpreter teardown
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            try:                                          # what os._exit would skip: multiprocessing's finalizers
                multiprocessing.util._run_finalizers()
            except Exception:                             # noqa: BLE001 - exiting anyway
                pass
            os._exit(130)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141


def _main(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=words[0] if words and not words[0].startswith("-") else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        if args._engine_env:                  # a command without the engine (room) stays free of torch
            _check_environment()
        return int(args._run(args) or 0)
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
