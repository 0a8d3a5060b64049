"""The runs list (names by directory, the dashboard's status colours, columns that use the width, its own help),
the status bar's words for a run no supervisor watches, and the palette's entries (each a named action)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable

from supervisor.core.rundir import JOURNAL_LOCK
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.help_screen import RUNS_KEYS, HelpScreen
from supervisor.tui.runs_screen import RunsScreen

from .conftest import caught_up, copy_run, until
from .runs_root import RUNS, make_runs_root


def _listed(pilot: Pilot) -> bool:  # type: ignore[type-arg]
    s = pilot.app.screen
    return isinstance(s, RunsScreen) and len(s.runs) == len(RUNS)


def _row(table: DataTable, i: int) -> list[str]:  # type: ignore[type-arg]
    return [str(c) for c in table.get_row_at(i)]


async def test_names_statuses_widths_and_help(tmp_path: Path) -> None:
    root = make_runs_root(tmp_path / "runs")
    app = make_app(root, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: _listed(pilot), what="the runs")
        s: RunsScreen = app.screen  # type: ignore[assignment]
        table = s.query_one(DataTable)
        assert {r.id for r in s.runs[:4]} == {"run"}  # what run.json says: one word for four runs
        # each named by its directory, middle cut on a narrow screen; each status whole (no "succeed")
        names = [_row(table, i)[0] for i in range(len(RUNS))]
        assert names[0].startswith("202611") and names[0].endswith("research") and "…" in names[0]
        assert len(set(names)) == len(RUNS)
        assert [_row(table, i)[1] for i in range(len(RUNS))] == ["crashed", "failed", "stopped", "succeeded", "unknown"]
        # the dashboard's colours: crashed and failed in the error colour, succeeded in the ok colour
        error = s.get_component_rich_style("status--error", partial=True).color
        ok = s.get_component_rich_style("status--ok", partial=True).color
        cells = [table.get_row_at(i)[1] for i in range(len(RUNS))]
        assert error is not None and ok is not None and error != ok
        assert [c.style.color for c in cells[:2]] == [error, error] and cells[3].style.color == ok  # type: ignore[union-attr]
        # the columns fill the width, none past it
        assert sum(c.get_render_width(table) for c in table.ordered_columns) == 80 - 2  # the scrollbar's room

        await pilot.resize_terminal(200, 24)  # wide: the commands whole, the room used
        await until(pilot, lambda: s.widths and s.widths[5] > 100, what="the wide layout")
        long = " ".join(RUNS[0][3])
        assert _row(table, 0)[0] == RUNS[0][0] and _row(table, 0)[5] == long
        assert sum(c.get_render_width(table) for c in table.ordered_columns) == 200 - 2

        await pilot.press("question_mark")  # the runs list's own keys, not the dashboard's
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        assert app.screen.keys is RUNS_KEYS
        await pilot.press("q")
        await until(pilot, lambda: app.screen is s, what="back")
        titles = [c.title for c in app.get_system_commands(s)]
        assert {"Open (enter)", "Mark (m)", "Compare (c)", "Help (?)"} <= set(titles), titles
        assert all(t and not t.startswith("(") for t in titles), titles


async def _bar(pilot: Pilot) -> str:  # type: ignore[type-arg]
    await until(pilot, lambda: caught_up(pilot.app), what="scan")
    d = pilot.app.screen
    assert isinstance(d, DashboardScreen)
    return str(d.query_one("#status").render())


async def test_status_bar_words_and_follow(tmp_path: Path) -> None:
    """An agent running by itself: "not supervised" and FOLLOW; a crashed run: "agent not running", no follow mode;
    a succeeded one says neither. The palette names every entry (no blank "(S)" of the keys that say why not)."""
    run = copy_run("rolled_back_run", tmp_path)
    fd = os.open(run / JOURNAL_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as an agent's journal writer holds it
        app = make_app(run, settings_path=tmp_path / "settings.json")
        async with app.run_test(size=(160, 30)) as pilot:
            text = await _bar(pilot)
            assert "running" in text and "not supervised" in text and "FOLLOW" in text, text
            assert "no supervisor" not in text
    finally:
        os.close(fd)
    meta = (run / "run.json").read_text().replace('"succeeded"', '"running"')  # its supervisor died with it
    (run / "run.json").write_text(meta)
    app = make_app(run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=(160, 30)) as pilot:
        text = await _bar(pilot)
        assert "crashed" in text and "agent not running" in text and "follow" not in text.lower(), text
        d = app.screen
        titles = [c.title for c in app.get_system_commands(d)]
        assert titles and all(t and not t.startswith("(") for t in titles), titles
        assert not any(c.help == "" for c in app.get_system_commands(d))
    (run / "run.json").write_text(meta.replace('"running"', '"succeeded"'))
    app = make_app(run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=(160, 30)) as pilot:
        text = await _bar(pilot)
        assert "succeeded" in text and "not running" not in text and "supervis" not in text and "FOLLOW" not in text


def test_runs_list_80x24(snap_compare, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    make_runs_root(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)  # the title names the root: a relative one is the same in every run

    async def before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await until(pilot, lambda: _listed(pilot), what="the runs")

    assert snap_compare(make_app(Path("runs"), settings_path=tmp_path / "s.json"), terminal_size=(80, 24),
                        run_before=before)


def test_runs_list_200x50(snap_compare, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    make_runs_root(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)

    async def before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await until(pilot, lambda: _listed(pilot), what="the runs")

    assert snap_compare(make_app(Path("runs"), settings_path=tmp_path / "s.json"), terminal_size=(200, 50),
                        run_before=before)
