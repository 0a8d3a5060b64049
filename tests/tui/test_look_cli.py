"""The first screen's imports: ``tui`` loads only its own area of the CLI; ``--help`` still lists every command."""

from __future__ import annotations

import argparse
import subprocess
import sys

from supervisor.cli.main import AREAS, build_parser, command_of


def test_command_of() -> None:
    assert command_of(["tui", "runs/x"]) == "tui"
    assert command_of(["--version"]) is None
    assert command_of(["-h", "log", "RUN"]) == "log"
    assert command_of([]) is None


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_areas_name_every_command() -> None:
    """AREAS is the table main() trusts: every command any area registers is in it, under that area."""
    every = _commands(build_parser())
    assert every == [c for commands in AREAS.values() for c in commands]
    for commands in AREAS.values():
        for c in commands:
            assert c in _commands(build_parser(c))
    assert _commands(build_parser("no-such-command")) == every  # the error lists every command


def test_tui_imports_no_other_area() -> None:
    """``agent-supervisor tui`` (parser and the dashboard's modules) loads neither the supervisor, the replay runner,
    the exporters nor the prices: a fresh interpreter, as the command runs."""
    code = (
        "import sys\n"
        "from supervisor.cli.main import build_parser\n"
        "build_parser('tui')\n"
        "import supervisor.tui.app, supervisor.tui.dashboard\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('supervisor.supervise.supervisor', 'supervisor.replay',"
        " 'supervisor.export', 'supervisor.cli.supervise_cmds', 'supervisor.cli.replay_cmds', 'supervisor.cli.inspect_cmds',"
        " 'supervisor.cli.export_cmds', 'genai_prices', 'watchfiles', 'opentelemetry')))\n"
        "print(' '.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"imported before the first screen: {out}"
