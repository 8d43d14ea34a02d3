"""``python -m explainer SUBCOMMAND``: one module per subcommand in ``explainer/commands/``.

Each command module exposes ``HELP`` (one line), ``configure(parser)`` and ``run(args) -> int``.
Bad input raises ``UsageError`` (or ``ValueError``) and becomes a one-line message with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import explainer.commands as commands
from explainer.errors import UsageError


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield info.name, importlib.import_module(f"explainer.commands.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m explainer",
        description="Run the real mechanisms behind vLLM PRs #45828 and #40150 at toy scale.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _command_modules():
        sp = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.configure(sp)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
