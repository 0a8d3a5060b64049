"""TUI test helpers: copies of the recorded runs, and waiting on the app without sleeping."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot

from ..conftest import attempts

DATA = Path(__file__).parent / "data"


async def until(pilot: Pilot, cond: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> object:
    """Let the app run until ``cond()`` is truthy; fail after ``timeout`` seconds (``wait_for`` for Pilot).

    The default is long on purpose: a passing wait returns as soon as ``cond()`` holds, so only a failing
    test pays it, and a loaded CI machine no longer turns a slow scan into a failure."""
    for _ in attempts(timeout, what):
        value = cond()
        if value:
            return value
        await pilot.pause(0.02)  # the app runs meanwhile (a sleep would stop it)
    raise AssertionError("unreachable: attempts() fails the test")


def caught_up(app: App[Any]) -> bool:
    """The dashboard is open, scanned, and has applied the read that follows the scan."""
    from supervisor.tui.dashboard import DashboardScreen

    d = app.screen
    return isinstance(d, DashboardScreen) and d.model.scanned and d.model.applied_reads > 0


def settled(app: App[Any]) -> bool:
    """The dashboard is caught up: scanned, the read after the scan applied, the state pane showing the cursor's seq."""
    from supervisor.tui.dashboard import DashboardScreen
    from supervisor.tui.detail import JsonPane

    d = app.screen
    if not caught_up(app) or not isinstance(d, DashboardScreen):
        return False
    seq = d.timeline.selected_seq()
    text = d.query_one("#state-pane", JsonPane).text
    return seq is None or text.startswith((f"state as of #{seq}\n", f"state as of #{seq} "))


def copy_run(name: str, dst: Path) -> Path:
    """A private copy of a recorded run in ``tests/tui/data`` (tests may append to it)."""
    target = dst / name
    shutil.copytree(DATA / name, target)
    target.chmod(0o700)
    return target


@pytest.fixture
def rolled_back_run(tmp_path: Path) -> Path:
    """A supervised sample run: crash in search:q2, resume, then a rollback to plan-done and a rerun."""
    return copy_run("rolled_back_run", tmp_path)


@pytest.fixture
def minimal_journal(tmp_path: Path) -> Path:
    """A journal written by another program: only step and output (or error), no run.json."""
    d = tmp_path / "minimal"
    d.mkdir(mode=0o700)
    shutil.copy(DATA / "minimal.jsonl", d / "journal.jsonl")
    return d
