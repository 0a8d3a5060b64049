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
        # what step 20 changed, not step 18: the CLI's change, its value whole and a string quoted (as replay prints)
        change = orjson.loads(run_cli("diff", str(rolled_back_run), "18", "20", "--json").stdout)
        assert diff.changes_plain.strip() == f"+ {change['path']}: {orjson.dumps(change['new']).decode()}"


async def test_the_state_tab_of_a_step_shows_its_result_when_the_next_record_comes(tmp_path: Path) -> None:
    """Live: the record that carries a step's result is written after the step; the selected step's state follows."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    recs = [
        {"kind": "step", "seq": 0, "step": "a", "output": 1, "state_patch": [{"op": "add", "path": "/a", "value": 1}]},
        {"kind": "step", "seq": 1, "step": "b", "output": "b-out"},
        {"kind": "begin", "seq": 2, "step": "c"},
    ]
    journal = run / "journal.jsonl"
    journal.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        d = app.screen
        assert isinstance(d, DashboardScreen)
        await pilot.press("colon", "1", "enter", "s")
        assert d.timeline.selected_seq() == 1 and not d.timeline.follow
        state = d.query_one("#state-pane", JsonPane)
        await until(pilot, lambda: "state as of #1" in state.text, what="the state at 1")
        assert "b-out" not in state.text
        # the agent stores b's output, then step c ends: its record carries that change
        with open(journal, "ab") as f:
            f.write(orjson.dumps({"kind": "step", "seq": 3, "step": "c", "output": 3,
                                  "state_patch": [{"op": "add", "path": "/b", "value": "b-out"}]}) + b"\n")
        await until(pilot, lambda: "b-out" in state.text, timeout=15, what="the state at 1 to show b's result")
        assert d.timeline.selected_seq() == 1
