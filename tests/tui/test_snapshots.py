"""Snapshot tests of the main screens (review the SVGs in __snapshots__ before updating them)."""

from __future__ import annotations

from textual.pilot import Pilot

from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.diff_screen import DiffScreen
from supervisor.tui.help_screen import HelpScreen
from supervisor.tui.settings import LIGHT
from supervisor.tui.status_bar import StatusBar

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


async def _priced(pilot: Pilot) -> None:
    """Settled, and the run's totals (tokens, cost, saved by resume) computed with the prices loaded."""
    await _ready(pilot)

    def done() -> bool:
        usage = pilot.app.screen.query_one(StatusBar).usage
        return usage is not None and usage.cost is not None

    await until(pilot, done, what="the run's totals")
    await pilot.pause()


def test_model_run_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """80x24: one status line with the totals and saved by resume; model rows with tokens and cost after the ✓."""
    assert snap_compare(sample_app("model_run"), terminal_size=(80, 24), run_before=_priced)


def test_model_run_side_by_side_200x50(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """200x50: timeline and detail side by side; token and cost columns; the failed tool call's traceback as code."""

    async def before(pilot: Pilot) -> None:
        await _priced(pilot)
        await pilot.press("colon", "9", "enter")
        await _ready(pilot)

    assert snap_compare(sample_app("model_run"), terminal_size=(200, 50), run_before=before)


def test_light_theme_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The light theme (WCAG AA like the dark one), the cursor on a supervisor row: the first crash."""

    async def before(pilot: Pilot) -> None:
        await _ready(pilot)
        await pilot.press("home", *"jjjjjj")  # spawn, start, plan, checkpoint, search:q1, search:q2 (interrupted), the exit
        await _ready(pilot)

    assert snap_compare(sample_app(theme=LIGHT), terminal_size=(80, 24), run_before=before)
