"""The architecture as import contracts (``[tool.importlinter]`` in pyproject.toml), checked with import-linter.

The contracts: the core imports neither Textual nor the supervisor process nor a
front end; the SDK path imports only the core; views (the models both front ends
share) import no Textual and sit with the core; nothing below the front ends imports
them. And no import circle in the front ends or the views.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..conftest import ROOT

if TYPE_CHECKING:
    from grimp import ImportGraph


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run([str(lint)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout, res.stdout[-2000:]


def test_contracts_catch_a_violation(tmp_path: Path) -> None:
    """The contracts are not vacuous: a core module that imports Textual breaks them."""
    cfg = (ROOT / "pyproject.toml").read_text()
    pkg = tmp_path / "supervisor"
    import shutil

    shutil.copytree(ROOT / "supervisor", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "core" / "records.py").write_text((pkg / "core" / "records.py").read_text() + "\nimport textual  # noqa\n")
    (tmp_path / "pyproject.toml").write_text(cfg)
    lint = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run([str(lint)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert res.returncode != 0
    assert "supervisor.core.records -> textual" in res.stdout, res.stdout[-2000:]


def test_cli_entry_point_starts_without_textual() -> None:
    """Start-up cost, not layering: the CLI imports Textual only for the commands that draw."""
    code = (
        "import sys; import supervisor.cli.main, supervisor.supervise.supervisor, supervisor.cli.supervise_cmds\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr


def _circles(graph: ImportGraph, prefixes: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected groups of two or more modules among those under ``prefixes`` (Tarjan's algorithm,
    over every import a module makes: at the top, in a function, or under ``TYPE_CHECKING``)."""
    mods = sorted(m for m in graph.modules if m.startswith(prefixes))
    inside = set(mods)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v) & inside):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for m in mods:
        if m not in index:
            visit(m)
    return found


def test_no_import_circle_in_the_front_ends_and_views() -> None:
    """A screen does not import the app, a command module not the entry point: each module can be read (and
    imported) before the ones that use it."""
    import grimp

    graph = grimp.build_graph("supervisor")
    assert _circles(graph, ("supervisor.tui", "supervisor.views", "supervisor.cli")) == []
