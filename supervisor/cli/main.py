"""Entry point of ``agent-supervisor``: builds the parser from each area's ``register``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .._clash import check_command_line

check_command_line()  # before anything from supervisor/__init__.py, which may be supervisord's

from .. import __version__
from ..errors import SupervisorError
from . import export_cmds, inspect_cmds, ops_cmds, replay_cmds, supervise_cmds, tui_cmds

EXIT_USAGE = 2
EXIT_SIGPIPE = 141
"""The reader of our output went away (``log RUN | head``): as a shell reports a tool killed by SIGPIPE."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agent-supervisor",
        description="Supervise long-running AI agents, and inspect, replay and roll back their runs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for area in (supervise_cmds, ops_cmds, tui_cmds, inspect_cmds, replay_cmds, export_cmds):
        area.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except SupervisorError as e:
        print(f"agent-supervisor: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `agent-supervisor log ... | head`: the reader went away. A quiet exit with the status a
        # shell reports for cat or grep killed by SIGPIPE (128 + 13); stdout goes to /dev/null so
        # the interpreter's final flush cannot fail again. (Before OSError, of which it is a subclass.)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_SIGPIPE
    except OSError as e:
        # a file the user pointed at cannot be read or written: say which and why, no traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"agent-supervisor: {where}{e.strerror or e}; check the path and its permissions", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
