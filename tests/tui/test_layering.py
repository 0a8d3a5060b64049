"""The TUI's models (scan, timeline model, status, runs) import no Textual, like the core."""

from __future__ import annotations

import subprocess
import sys


def test_tui_models_do_not_import_textual() -> None:
    code = (
        "import sys\n"
        "import supervisor.tui.scan, supervisor.tui.timeline_model, supervisor.tui.status, supervisor.tui.runs_model\n"
        "import supervisor.cli.tui_cmds\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
