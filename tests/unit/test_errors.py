"""A user's mistake is one line and exit 2; a bug of ours is not dressed up as one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from supervisor import errors
from supervisor.cli import inspect_cmds
from supervisor.cli import main as cli_main
from supervisor.errors import InternalError, InvalidTransition, SupervisorError


def test_every_exception_class_lives_in_errors_py() -> None:
    import importlib
    import pkgutil

    import supervisor

    found = []
    for m in pkgutil.walk_packages(supervisor.__path__, "supervisor."):
        if m.name.startswith("supervisor.tui") or m.name.endswith("__main__") or m.name in ("supervisor.demo_agent", "supervisor.Run"):
            # the TUI has no exception classes; __main__ runs the CLI when imported; the demo agent's fake
            # model error is the agent's own, as in any user's agent; supervisor.Run raises when imported
            continue
        mod = importlib.import_module(m.name)
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == m.name:
                found.append(f"{m.name}.{obj.__name__}")
    assert found == [n for n in found if n.startswith("supervisor.errors.")], found
    assert issubclass(InvalidTransition, InternalError) and not issubclass(InternalError, SupervisorError)
    assert issubclass(errors.ControlUnavailable, SupervisorError)


def test_user_error_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["log", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-supervisor: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_bug_of_ours_is_not_reported_as_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def buggy(args: argparse.Namespace) -> int:
        raise InvalidTransition("supervisor bug: no transition from stopped to running")

    monkeypatch.setattr(inspect_cmds, "cmd_log", buggy)
    with pytest.raises(InvalidTransition):  # the interpreter prints its traceback and exits 1
        cli_main.main(["log", "."])
