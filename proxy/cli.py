"""Command-line entry point: ``compaction-gate <subcommand> ...``.

Subcommands register themselves in :data:`COMMANDS`, a mapping of name to
:class:`Command` (help text, ``add_arguments(parser)``, ``run(args) -> exit code``).
To add one (e.g. ``check``) from its own module, without editing the others::

    # proxy/check_cli.py (any module)
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...

    # in proxy/cli.py, next to the other entries (keeps import lazy):
    register("check", "offline audit of one transition", "proxy.check_cli")

``register(name, help, module)`` imports ``module`` only when that subcommand runs
or its ``--help`` is built, so ``serve`` never pays for heavy imports. A module may
also call ``register_command(Command(...))`` directly.

Exit codes: 0 success, 2 usage or configuration error; subcommands may define more.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from proxy import __version__

__all__ = ["COMMANDS", "Command", "build_parser", "main", "register", "register_command"]

EXIT_OK = 0
EXIT_USAGE = 2
#: The reader of stdout went away before the output was written (``… | head``): the
#: shell's code for a process ended by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13


class _CommandModule(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class Command:
    """One subcommand: how to declare its arguments and how to run it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {}


def register_command(command: Command) -> None:
    """Add (or replace) a subcommand."""
    COMMANDS[command.name] = command


def register(name: str, help: str, module: str) -> None:
    """Register a subcommand whose ``add_arguments``/``run`` live in ``module``.

    The module is imported lazily, only when the parser for it is built.
    """

    def _load() -> _CommandModule:
        loaded: _CommandModule = importlib.import_module(module)
        return loaded

    register_command(
        Command(
            name=name,
            help=help,
            add_arguments=lambda parser: _load().add_arguments(parser),
            run=lambda args: _load().run(args),
        )
    )


# Built-in subcommands. Add new ones here, one line each.
register("serve", "run the proxy", "proxy.server.cli")
register("demo", "see what the gate does, offline, in one command", "proxy.demo")
register("replay", "audit recorded traffic (JSONL) offline", "proxy.replay")
register(
    "check",
    "offline audit of one transition (exit 0 safe, 3 destructive, 2 bad input)",
    "proxy.check",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser. Only subcommand ``only`` gets its arguments (its module is
    imported for that): ``--help``, ``--version`` and a bare ``compaction-gate`` import
    no subcommand module, aiohttp or the core."""
    parser = argparse.ArgumentParser(
        prog="compaction-gate",
        description="Transparent LLM API proxy that keeps agent compaction from "
        "dropping identifiers later steps need verbatim.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        if only == name:
            command.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(only=chosen if chosen in COMMANDS else None)
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code = EXIT_BROKEN_PIPE
    try:
        code = COMMANDS[args.command].run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # ``check … | head``: the reader has what it wanted; no traceback. stdout points at
        # /dev/null from here so the interpreter's final flush does not fail again. A
        # verdict computed before the pipe broke keeps its exit code.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
