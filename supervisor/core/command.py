"""A run's recorded command and working directory, and pointing a command at another run directory.

``run.json`` records the agent's ``command`` and ``cwd``. A relative ``cwd`` is
taken from the run directory (the shipped sample runs record ``../..``, so they
work from any copy of ``sample_runs/``). ``replay`` runs the command against a
scratch copy and ``fork`` records it for the fork: both point the arguments
that name the original run directory at the new one, here (and a fork's, those
that name the original's workspace at the fork's, and its working directory too).
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
    out, changed = moved_command(command, [(run_dir, scratch)], cwd)
    notes = [
        f"the command names the run directory in {arg!r}: the agent gets the scratch copy {new}" for arg, new in changed
    ]
    return out, notes


def moved_command(
    command: list[str], moves: list[tuple[Path, Path]], cwd: Path, new_cwd: Path | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """``command`` for a copy of some of the directories it names: ``moves`` is ``(source, destination)``
    pairs (sources resolved); an argument naming a source or a path in it names the same place in its
    destination (the first source that holds it: list a directory before one it lies in).

    ``new_cwd``: the command will run there, not in ``cwd`` (a fork runs in its own workspace). A relative
    argument that lands where it should from there is left as it is (``src/app.py`` in a workspace that moved
    with the working directory: a task text such as ``"fix src/app.py"`` is never rewritten); one that names
    an existing path outside every source is written absolute, so it still names what it named. Returns the
    new command and the ``(old, new)`` arguments rewritten.
    """
    out: list[str] = []
    changed: list[tuple[str, str]] = []
    for i, arg in enumerate(command):
        if i == 0 or not arg:
            out.append(arg)
            continue
        prefix, value = "", arg
        if arg.startswith("-") and "=" in arg:
            prefix, _, value = arg.partition("=")
            prefix += "="
        new = _moved(value, moves, cwd, new_cwd if new_cwd != cwd else None)
        if new is None:
            out.append(arg)
        else:
            out.append(prefix + str(new))
            changed.append((arg, prefix + str(new)))
    return out, changed


def _moved(value: str, moves: list[tuple[Path, Path]], cwd: Path, new_cwd: Path | None) -> Path | None:
    """Where the argument ``value`` must point now, if it must be rewritten; ``None`` to leave it."""
    if not value or value.startswith("-"):
        return None
    try:
        expanded = os.path.expanduser(value)
        p = Path(os.path.normpath(cwd / expanded))
        resolved = p.resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    relative = not os.path.isabs(expanded)
    for src, dst in moves:
        if resolved != src and not resolved.is_relative_to(src):
            continue
        if resolved != src and "/" not in value and not os.path.lexists(p):
            return None  # a word such as 'summarize', not a path
        new = dst / resolved.relative_to(src)
        if relative and new_cwd is not None and Path(os.path.normpath(new_cwd / value)) == new:
            return None  # it follows the working directory there
        return new
    if relative and new_cwd is not None and os.path.lexists(p):
        return p
    return None


def moved_cwd(cwd: Path, source: Path, destination: Path) -> Path | None:
    """``cwd`` in ``destination`` if it is ``source`` or lies in it (``source`` resolved), else ``None``."""
    try:
        resolved = cwd.resolve()
    except (OSError, RuntimeError):
        return None
    if resolved == source or resolved.is_relative_to(source):
        return destination / resolved.relative_to(source)
    return None
