"""Pilot tests of the Gantt screen (``g``): an attempt's steps on a time axis, retries grouped, live growth;
snapshots at 80x24 and 200x50."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
from textual.pilot import Pilot

from supervisor.tui.app import SupervisorApp, make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.gantt_screen import GanttScreen
from supervisor.tui.help_screen import HelpScreen

from .conftest import caught_up, until
from .gantt_run import make_gantt_run

SIZE = (120, 34)


def _app(tmp_path: Path) -> SupervisorApp:
    return make_app(make_gantt_run(tmp_path), settings_path=tmp_path / "settings.json")


def _gantt(app: Any) -> GanttScreen | None:
    s = app.screen
    return s if isinstance(s, GanttScreen) and not s.loading and s.view.gantt.bars else None


async def _open(pilot: Pilot, *keys: str) -> GanttScreen:
    """Wait for the dashboard, press ``g`` (and ``keys``), wait for the Gantt screen's records."""
    await until(pilot, lambda: caught_up(pilot.app), what="the dashboard")
    await pilot.press("g", *keys)
    got = await until(pilot, lambda: _gantt(pilot.app), what="the Gantt screen's records")
    assert isinstance(got, GanttScreen)
    return got


def _names(g: GanttScreen) -> list[str]:
    return ["served" if i < 0 else g.view.gantt.bars[i].name for i in g.view.items]


async def test_opens_on_the_cursors_attempt_and_groups_retries(tmp_path: Path) -> None:
    async with _app(tmp_path).run_test(size=SIZE) as pilot:
        g = await _open(pilot)
        assert g.attempt == 2 and "attempt 2 of 2" in str(g.query_one("#gantt-title").render())
        assert _names(g) == ["served", "search:q7", "summarize", "llm:draft", "tool:publish"]
        assert g.view.gantt.served == 9 and g.view.gantt.bars[2].depth == 1  # llm:draft nested in summarize
        assert g.view.cursor == 0  # the dashboard's cursor is on the last record, a note: no step's, the first row
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: _gantt(pilot.app) and pilot.app.screen.attempt == 1, what="attempt 1")
        assert _names(g)[0] == "plan" and len(g.view.items) == 11  # 11 steps, the 3 tries of tool:fetch on one row
        fetch = g.view.items.index(next(i for i, b in enumerate(g.view.gantt.bars) if b.name == "tool:fetch"))
        bar = g.view.gantt.bars[g.view.items[fetch]]
        assert [t.failed for t in bar.tries] == [True, True, False] and bar.tries_label() == "3 tries, succeeded"
        title = str(g.query_one("#gantt-title").render())
        assert "at most 9 at once" in title and "1 retried" in title and "1 failed" in title and "1 interrupted" in title
        await pilot.press("home", *["j"] * fetch)
        assert "try 1 ✗" in str(g.query_one("#gantt-detail").render()) and "try 3 ✓" in str(g.query_one("#gantt-detail").render())
        await pilot.press("enter")  # the dashboard selects the step's record (its last try's) and the screen closes
        await until(pilot, lambda: isinstance(pilot.app.screen, DashboardScreen), what="the dashboard again")
        assert pilot.app.screen.timeline.selected_seq() == bar.seq == 21


async def test_escape_closes_without_quitting_and_help_lists_the_keys(tmp_path: Path) -> None:
    async with _app(tmp_path).run_test(size=SIZE) as pilot:
        await _open(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), what="the help")
        assert pilot.app.screen.keys[0][0] == "Gantt"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(pilot.app.screen, GanttScreen), what="back from the help")
        await pilot.press("right_square_bracket")  # no next attempt: says so, stays
        assert isinstance(pilot.app.screen, GanttScreen)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(pilot.app.screen, DashboardScreen), what="the dashboard")
        assert pilot.app.is_running
        await pilot.press("home")  # the timeline's first record: Home only now (g opens the Gantt view)
        assert pilot.app.screen.timeline.cursor == 0


async def test_a_live_attempt_grows_as_records_arrive(tmp_path: Path) -> None:
    run = make_gantt_run(tmp_path)
    async with make_app(run, settings_path=tmp_path / "settings.json").run_test(size=SIZE) as pilot:
        g = await _open(pilot)
        before = len(g.view.gantt.bars)
        lines = [
            {"kind": "step", "step": "tool:publish", "pos": 12, "attempt": 2, "output": "ok", "dur_ms": 600.0,
             "seq": 33, "id": "n33", "ts": "2026-11-30T10:00:04.200Z"},
            *({"kind": "begin", "step": f"fan:{i}", "pos": 13 + i, "attempt": 2, "seq": 34 + i, "id": f"n{34 + i}",
               "ts": "2026-11-30T10:00:04.300Z"} for i in range(3)),
        ]
        with (run / "journal.jsonl").open("ab") as f:
            f.write(b"".join(orjson.dumps(r) + b"\n" for r in lines))
        await until(pilot, lambda: len(g.view.gantt.bars) == before + 3, what="the new steps")
        publish = next(b for b in g.view.gantt.bars if b.name == "tool:publish")
        assert publish.outcome == "ok" and publish.seq == 33
        assert g.view.gantt.in_flight == 3 and g.view.gantt.most_in_flight() == 3


def _snap_app(size: str) -> SupervisorApp:
    tmp = Path(tempfile.mkdtemp(prefix=f"snap-gantt-{size}-"))
    atexit.register(shutil.rmtree, tmp, True)
    return _app(tmp)


async def _first_attempt(pilot: Pilot) -> None:
    await _open(pilot, "left_square_bracket")
    await until(pilot, lambda: _gantt(pilot.app) and pilot.app.screen.attempt == 1, what="attempt 1")
    await pilot.press("home", "j", "j", "j", "j", "j", "j", "j", "j", "j")  # tool:fetch, the retried step


def test_snapshot_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_snap_app("80"), terminal_size=(80, 24), run_before=_first_attempt)


def test_snapshot_200x50(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_snap_app("200"), terminal_size=(200, 50), run_before=_first_attempt)
