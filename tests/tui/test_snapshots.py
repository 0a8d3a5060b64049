"""Snapshot tests of the main screens (review the SVGs in __snapshots__ before updating them)."""

from __future__ import annotations

import time

from textual.pilot import Pilot

from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.diff_screen import DiffScreen

from .snapshot_app import sample_app

SIZE = (120, 34)


async def _ready(pilot: Pilot) -> None:
    """Wait for the scan and the state pane, so the picture does not depend on timing."""
    deadline = time.monotonic() + 10
    app = pilot.app
    while time.monotonic() < deadline:
        s = app.screen
        if isinstance(s, DashboardScreen) and s.model.scanned and "state as of" in s.query_one("#state-pane").text:
            break
        await pilot.pause(0.02)
    await pilot.pause(0.1)


def test_dashboard_finished_run(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=_ready)


def test_dashboard_abandoned_branch_and_state_tab(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("colon", *"9", "enter", "s")
        await _ready(pilot)

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=before)


def test_replay_mode_now_and_future(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("right_square_bracket", "j", "j")
        await _ready(pilot)

    assert snap_compare(sample_app(replay=True), terminal_size=SIZE, run_before=before)


def test_diff_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("colon", *"25", "enter", "d")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (isinstance(pilot.app.screen, DiffScreen) and pilot.app.screen.changes_plain):
            await pilot.pause(0.02)

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=before)


def test_rollback_modal(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("colon", *"3", "enter", "r")
        await pilot.pause(0.1)

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=before)


def test_help_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.1)

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=before)


def test_minimal_journal_replay(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("exclamation_mark")
        await _ready(pilot)

    assert snap_compare(sample_app("minimal.jsonl", replay=True), terminal_size=SIZE, run_before=before)
