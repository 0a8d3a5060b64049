"""The core does not know the UI exists: no core module imports Textual."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import supervisor

from .conftest import ROOT


def test_core_modules_import_no_textual() -> None:
    core = [
        f"supervisor.{m.name}"
        for m in pkgutil.iter_modules(supervisor.__path__)
        if m.name not in ("tui", "__main__")
    ] + ["supervisor.cli.main"]
    assert len(core) > 10
    code = (
        "import importlib, sys\n"
        f"for name in {core!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(len(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0", "a core module (or the CLI entry point) imports Textual at import time"
