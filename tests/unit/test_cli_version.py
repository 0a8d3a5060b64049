"""``--version`` answers without importing the command areas (issue 28, item 23), with the parser's own words."""

from __future__ import annotations

import subprocess
import sys

import pytest

from supervisor.cli.main import main
from supervisor.cli.parser import build_parser


def test_version_prints_what_the_parser_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    fast = capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--version"])
    assert e.value.code == 0
    assert fast == capsys.readouterr().out and fast.startswith("agent-supervisor ")


def test_version_imports_no_command_area() -> None:
    code = ("import sys\nfrom supervisor.cli.main import main\nmain(['--version'])\n"
            "print(sorted(m for m in sys.modules if m.startswith(('supervisor.cli.', 'argparse', 'supervisor.supervise'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.splitlines()[-1] == "['supervisor.cli.main']"
