"""TUI test helpers: copies of the recorded runs, and waiting on the app without sleeping."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

DATA = Path(__file__).parent / "data"


async def until(pilot: Pilot, cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> object:
    """Let the app run until ``cond()`` is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.02)


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
