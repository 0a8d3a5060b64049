"""Snapshot tests of the main screens (review the SVGs in __snapshots__ before updating them)."""

from __future__ import annotations

from textual.pilot import Pilot

from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.diff_screen import DiffScreen
from supervisor.tui.help_screen import HelpScreen

from .conftest import settled, until
from .snapshot_app import sample_app

SIZE = (120, 34)


async def _ready(pilot: Pilot) -> None:
    """Wait for the scan, the read after it and the state pane, so the picture does not depend on timing."""
    await until(pilot, lambda: settled(pilot.app), what="the dashboard to settle")


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
        await until(pilot, lambda: isinstance(pilot.app.screen, DiffScreen) and pilot.app.screen.changes_plain, what="the diff")

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=before)


def test_rollback_modal(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("colon", *"3", "enter", "r")
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), what="the rollback modal")

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=before)


def test_help_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), what="the help screen")

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=before)


def test_minimal_journal_replay(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("exclamation_mark")
        await _ready(pilot)

    assert snap_compare(sample_app("minimal.jsonl", replay=True), terminal_size=SIZE, run_before=before)
