"""The TUI's State tab and diff screen show the state at a step after its result, as ``state --at`` and ``diff`` print it."""

from __future__ import annotations

from pathlib import Path

import orjson

from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane
from supervisor.tui.diff_screen import DiffScreen

from ..conftest import run_cli
from .conftest import caught_up, until

SIZE = (120, 36)


async def test_state_tab_and_diff_screen_agree_with_the_cli(rolled_back_run: Path) -> None:
    # in this run #18 is the step search:q1 and #20 search:q2 (after the rollback to plan-done)
    cli = run_cli("diff", str(rolled_back_run), "18", "20")
    assert cli.returncode == 0 and cli.stdout == "+ /findings/1: durable agents q2 result 0\n", cli.stdout
    at20 = orjson.loads(run_cli("state", str(rolled_back_run), "--at", "20").stdout)
    assert at20["findings"] == ["durable agents q1 result 0", "durable agents q2 result 0"]

    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        d = app.screen
        assert isinstance(d, DashboardScreen)
        await pilot.press("colon", *"20", "enter", "s")
        state = d.query_one("#state-pane", JsonPane)
        await until(pilot, lambda: "state as of #20" in state.text, what="the state at 20")
        shown = orjson.loads(state.text.split("\n", 1)[1])
        assert shown == at20  # the step's own finding is there

        await pilot.press("colon", *"18", "enter", "m", "colon", *"20", "enter", "d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.changes_plain, what="the diff")
        diff = app.screen
        assert (diff.a, diff.b) == (18, 20)
        assert diff.changes_plain.strip() == cli.stdout.strip()  # what step 20 changed, not step 18
