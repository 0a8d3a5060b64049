"""The ruff configuration in pyproject.toml holds for the package, the tests and the sample runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_ruff_check_is_clean() -> None:
    """``ruff check`` finds nothing (the rule set and its justified ignores are in ``[tool.ruff]``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "supervisor", "tests", "sample_runs"],
        cwd=ROOT, capture_output=True, text=True, timeout=55,
    )
    assert proc.returncode == 0, f"ruff check found problems:\n{proc.stdout}{proc.stderr}"
