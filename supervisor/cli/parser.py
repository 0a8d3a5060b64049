"""The ``agent-supervisor`` parser, built from each area's ``register``: ``AREAS`` says which module registers which command.

Apart from ``main`` so that a command module may build the parser (``completion`` does) without
importing the entry point that imports it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

from .. import __version__

AREAS: dict[str, tuple[str, ...]] = {
    # module in supervisor.cli -> the commands its register() adds, in the order --help lists them
    "supervise_cmds": ("supervise", "status", "rollback"),
    "ops_cmds": ("runs", "stop", "restart", "logs", "completion"),
    "tui_cmds": ("tui", "demo"),
    "inspect_cmds": ("log", "state", "diff"),
    "replay_cmds": ("replay", "fork"),
    "export_cmds": ("export",),
    "files_cmds": ("files",),
    "compare_cmds": ("compare",),
    "pause_cmds": ("break", "continue", "answer"),
    "cost_cmds": ("cost",),
    "proxy_cmds": ("llm-proxy",),
}

EXIT_USAGE = 2
"""The exit status of a command line the parser refuses."""


def _parser_class() -> type[argparse.ArgumentParser]:
    """The parser class: argparse is imported when a parser is built, not with this module."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            self.print_usage(sys.stderr)
            print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
            raise SystemExit(EXIT_USAGE)

    return _Parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command named on the line (the first word that is not an option); the top level takes no values."""
    for a in argv:
        if a == "--":
            return None
        if not a.startswith("-"):
            return a
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only the area that registers it (every area if none does)."""
    parser_class = _parser_class()
    parser = parser_class(
        prog="agent-supervisor",
        description="Supervise long-running AI agents, and inspect, replay and roll back their runs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=parser_class)
    areas = [name for name, commands in AREAS.items() if command in commands] or list(AREAS)
    for name in areas:
        importlib.import_module(f"{__package__}.{name}").register(sub)
    return parser
