"""The architecture as import contracts (``[tool.importlinter]`` in pyproject.toml), checked with import-linter.

The contracts: the core imports neither Textual nor the supervisor process nor a
front end; the SDK path imports only the core; the TUI's models import no Textual;
nothing below the front ends imports them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT


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
