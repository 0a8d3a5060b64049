"""A run's recorded command and working directory, and pointing a command at another run directory.

``run.json`` records the agent's ``command`` and ``cwd``. A relative ``cwd`` is
taken from the run directory (the shipped sample runs record ``../..``, so they
work from any copy of ``sample_runs/``). ``replay`` runs the command against a
scratch copy and ``fork`` records it for the fork: both point the arguments
that name the original run directory at the new one, here.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any


def recorded_cwd(run_dir: Path, meta: dict[str, Any]) -> Path:
    """The working directory ``run.json`` recorded, a relative one taken from ``run_dir``; ``.`` if none."""
    raw = meta.get("cwd")
    cwd = Path(raw) if isinstance(raw, str) and raw else Path(".")
    if not cwd.is_absolute():
        cwd = Path(os.path.normpath(run_dir.resolve() / cwd))
    return cwd


_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def portable_program(program: str) -> str:
    """The interpreter that runs ``agent-supervisor`` for a recorded ``python``, ``python3`` or ``python3.N``.

    A bare name, or an absolute path that does not exist here (a run recorded on
    another machine, in another virtual environment): the SDK the replay needs is
    installed where this command runs, not necessarily in the ``python`` on PATH.
    Any other program is kept as recorded.
    """
    name = os.path.basename(program)
    if _PYTHON.fullmatch(name) and ("/" not in program or not os.path.exists(program)):
        return sys.executable
    return program


def retarget_command(command: list[str], run_dir: Path, scratch: Path, cwd: Path) -> tuple[list[str], list[str]]:
    """``command`` with every argument that names ``run_dir`` (or a path in it) pointed at ``scratch`` instead.

    ``replay`` points a command at its scratch copy, ``fork`` at the fork: left as
    it was, an explicit ``--run-dir ORIGIN`` would make the agent write to the original.
    ``run_dir`` is resolved.

    Also ``--opt=PATH``. Relative paths are taken from ``cwd``; an argument inside
    the run directory is rewritten if it looks like a path (it has a ``/``) or
    exists there, so a word such as ``summarize`` is left alone even when the
    agent runs in its run directory.
    Returns the new command and one note per rewritten argument.
    """
    out: list[str] = []
    notes: list[str] = []
    for i, arg in enumerate(command):
        if i == 0 or not arg:
            out.append(arg)
            continue
        prefix, value = "", arg
        if arg.startswith("-") and "=" in arg:
            prefix, _, value = arg.partition("=")
            prefix += "="
        new = _in_scratch(value, run_dir, scratch, cwd)
        if new is None:
            out.append(arg)
        else:
            out.append(prefix + str(new))
            notes.append(f"the command names the run directory in {arg!r}: the agent gets the scratch copy {prefix}{new}")
    return out, notes


def _in_scratch(value: str, run_dir: Path, scratch: Path, cwd: Path) -> Path | None:
    if value.startswith("-"):
        return None
    try:
        p = Path(os.path.normpath(cwd / os.path.expanduser(value)))
        resolved = p.resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if resolved == run_dir:
        return scratch
    if resolved.is_relative_to(run_dir) and ("/" in value or os.path.lexists(p)):
        return scratch / resolved.relative_to(run_dir)
    return None
