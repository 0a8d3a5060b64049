"""Entry point of ``agent-supervisor``: builds the parser from each area's ``register``.

Only the area of the command being run is imported (``tui`` does not load the
supervisor, ``log`` does not load Textual): ``parser.AREAS`` says which module registers
which command. ``--help``, no command or an unknown one import every area, so
the list of commands is always complete. The parser lives in ``parser``, which the
command modules may import (``completion`` does) without importing this module back.

``tui RUN`` (the command word and one path, no option) is read without argparse:
the dashboard's first screen does not wait for argparse to be imported and the
parser built (2-4 ms); anything else goes through the parser.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from .._clash import check_command_line

check_command_line()  # before anything from supervisor/__init__.py, which may be supervisord's

from ..errors import SupervisorError  # noqa: E402  # deliberately after check_command_line()

EXIT_USAGE = 2  # parser.EXIT_USAGE, not imported from there: ``tui RUN`` loads no parser
EXIT_SIGPIPE = 141
"""The reader of our output went away (``log RUN | head``): as a shell reports a tool killed by SIGPIPE."""


def _tui_args(argv: Sequence[str]) -> Any:
    """``tui RUN`` read as the parser would read it (``None`` for any other line): the dashboard's fast start."""
    if len(argv) != 2 or argv[0] != "tui" or argv[1].startswith("-"):
        return None
    from pathlib import Path
    from types import SimpleNamespace

    from .tui_cmds import cmd_tui

    return SimpleNamespace(command="tui", path=Path(argv[1]), func=cmd_tui)


def main(argv: Sequence[str] | None = None) -> int:
    line = sys.argv[1:] if argv is None else argv
    if list(line) == ["--version"]:  # as the parser's version action prints it, without importing every area
        from .. import __version__

        print(f"agent-supervisor {__version__}")
        return 0
    args = _tui_args(line)
    if args is None:
        from .parser import build_parser, command_of  # not for ``tui RUN``: argparse is imported by the parser

        parser = build_parser(command_of(line))
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
