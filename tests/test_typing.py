"""``mypy --strict`` on the whole package is the bar (as watchfiles and harlequin set it): checked by the suite."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_package_is_mypy_strict_clean() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", "/dev/null", "supervisor"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-1000:]
