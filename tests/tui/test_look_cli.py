"""The first screen's imports: ``tui`` loads only its own area of the CLI; ``--help`` still lists every command."""

from __future__ import annotations

import argparse
import subprocess
import sys

from supervisor.cli.main import _tui_args
from supervisor.cli.parser import AREAS, build_parser, command_of


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
        "from supervisor.cli.parser import build_parser\n"
        "build_parser('tui')\n"
        "import supervisor.tui.app, supervisor.tui.dashboard\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('supervisor.supervise.supervisor', 'supervisor.replay',"
        " 'supervisor.export', 'supervisor.cli.supervise_cmds', 'supervisor.cli.replay_cmds', 'supervisor.cli.inspect_cmds',"
        " 'supervisor.cli.export_cmds', 'genai_prices', 'watchfiles', 'opentelemetry')))\n"
        "print(' '.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    assert out == "", f"imported before the first screen: {out}"


def test_tui_run_is_read_as_the_parser_reads_it() -> None:
    """``tui RUN`` skips argparse (the dashboard's fast start) with the parser's answer; any other line is the
    parser's (an option, no path, a second path, another command)."""
    fast = _tui_args(["tui", "runs/x"])
    parsed = build_parser("tui").parse_args(["tui", "runs/x"])
    assert (fast.command, fast.path, fast.func) == (parsed.command, parsed.path, parsed.func)
    for line in (["tui"], ["tui", "-h"], ["tui", "--", "x"], ["tui", "a", "b"], ["log", "x"], ["x", "tui"]):
        assert _tui_args(line) is None, line


def test_tui_run_pauses_gc_and_imports_no_argparse(tmp_path: object) -> None:
    """A fresh interpreter, as ``agent-supervisor tui RUN`` starts: the collector is paused before Textual and the
    dashboard are imported (their allocations are the start's) and collects again when the command ends early
    (here: a path that is no run); neither the command nor the dashboard's modules import argparse (nor the other
    areas' commands, which do)."""
    code = (
        "import gc, sys\n"
        "seen = {}\n"
        "def hook(event, args):\n"
        "    if event == 'import' and args[0] == 'textual' and 'textual' not in seen:\n"
        "        seen['textual'] = gc.isenabled()\n"
        "sys.addaudithook(hook)\n"
        "from supervisor.cli.main import main\n"
        "code = main(['tui', sys.argv[1]])\n"
        "import supervisor.tui.app, supervisor.tui.dashboard\n"
        "bad = [m for m in sys.modules if m == 'argparse' or m.startswith('supervisor.cli.') and m not in"
        " ('supervisor.cli.main', 'supervisor.cli.tui_cmds')]\n"
        "print(code, seen.get('textual'), gc.isenabled(), ','.join(sorted(bad)) or '-')\n"
    )
    missing = str(tmp_path) + "/no-such-run"
    out = subprocess.run([sys.executable, "-c", code, missing], capture_output=True, text=True, check=True, timeout=30).stdout.split()
    assert out == ["2", "False", "True", "-"], out
