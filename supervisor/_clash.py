"""The clash with supervisord, whose PyPI package also installs a Python package named ``supervisor``.

Installed into one environment, the two overwrite each other's files: the
``supervisor/__init__.py`` of whichever came last wins. This module works under
either ``__init__``: it imports nothing from the package, so the command line
can say what happened in one line instead of an ImportError traceback.
"""

from __future__ import annotations

import os
import sys

MARKER = "__agent_supervisor__"
"""An attribute only our ``supervisor/__init__.py`` defines."""

FIX = (
    "install agent-supervisor-tui in a virtual environment of its own "
    "(python3 -m venv ~/.venvs/agent-supervisor && ~/.venvs/agent-supervisor/bin/pip install agent-supervisor-tui, "
    "or pipx install agent-supervisor-tui), and supervisord in another"
)


def clash_message() -> str:
    """The one line that says the imported ``supervisor`` is supervisord's, and the fix."""
    pkg = sys.modules.get("supervisor")
    where = os.path.dirname(getattr(pkg, "__file__", None) or "?")
    return (
        f"the Python package 'supervisor' in {where} is supervisord's, not agent-supervisor's "
        f"(the two projects share the import name and overwrite each other's files): {FIX}"
    )


def shares_with_supervisord() -> bool:
    """Our ``__init__`` won, but supervisord's files are in the same package directory (one stat)."""
    pkg = sys.modules.get("supervisor")
    return os.path.exists(os.path.join(os.path.dirname(getattr(pkg, "__file__", None) or "."), "supervisord.py"))


def check_command_line() -> None:
    """Before the command line imports anything from ``supervisor/__init__.py``: refuse supervisord's, in one line.

    Exit 2 as for any user error. If our ``__init__`` won but supervisord's files
    are beside it, both work today but uninstalling either breaks the other: warn.
    """
    import supervisor

    if not getattr(supervisor, MARKER, False):
        print(f"agent-supervisor: {clash_message()}", file=sys.stderr)
        raise SystemExit(2)
    if shares_with_supervisord():
        print(f"agent-supervisor: warning: supervisord's package shares this environment's 'supervisor' directory; {FIX}",
              file=sys.stderr)
