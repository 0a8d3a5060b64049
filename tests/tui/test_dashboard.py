"""Pilot tests of the run dashboard: every key, follow, detail, search, diff, rollback, fork."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import Footer

from supervisor.tui.app import make_app
from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane
from supervisor.tui.diff_screen import DiffScreen
from supervisor.tui.help_screen import HelpScreen
from supervisor.tui.key_footer import KeyFooter
from supervisor.tui.timeline import TimelineView

from .conftest import caught_up, until

SIZE = (120, 36)


def dash(app) -> DashboardScreen:  # type: ignore[no-untyped-def]
    screen = app.screen
    assert isinstance(screen, DashboardScreen), screen
    return screen


def status_text(app) -> str:  # type: ignore[no-untyped-def]
    return str(dash(app).query_one("#status").render())


def notes(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.message) for n in app._notifications]


async def opened(pilot) -> DashboardScreen:  # type: ignore[no-untyped-def]
    await until(pilot, lambda: caught_up(pilot.app), what="scan")
    return dash(pilot.app)


async def test_opens_finished_run_at_the_end_with_follow(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        tl = d.timeline
        # 26 records + the supervisor events between them (spawn, exit, restart, rollback, ...)
        assert d.model.count == 26
        assert len(d.model.events) >= 8
        assert tl.cursor == d.model.rows - 1 and tl.selected_seq() == 25
        assert d.model.events[tl.selected()[1]].data["event"] == "succeeded"  # the last row: the run ended
        assert tl.follow
        s = status_text(app)
        assert "succeeded" in s and "steps 5 " in s and "checkpoints 2" in s and "records 26" in s
        assert "FOLLOW" not in s and "follow" not in s  # a finished run: the timeline follows, but nothing will come
        # the abandoned branch (seqs 4..14, after plan-done, before the rollback) is dimmed
        assert [s for s in range(26) if d.model.is_abandoned(s)] == list(range(4, 15))
        # the crash of attempt 1 is a row just before the start record of attempt 2
        row = d.model.row_of_seq(7)
        kind, i = d.model.row_item(row - 1)
        assert kind == "event" and d.model.events[i].data["event"] == "spawn"
        crash_rows = [e for e in d.model.events if e.data["event"] == "exit" and e.data["code"] == 1]
        assert crash_rows and crash_rows[0].before == 7


async def test_navigation_keys_and_follow(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        tl = d.timeline
        last = d.model.rows - 1
        await pilot.press("k")
        assert tl.cursor == last - 1 and not tl.follow  # moving up turns follow off, as in lnav
        assert "follow" not in status_text(app).lower()  # a finished run: no follow mode in the bar (a running one:
        # tests/tui/test_runs_list.py, test_status_bar_words)
        await pilot.press("up", "j", "down")
        assert tl.cursor == last
        await pilot.press("home")
        assert tl.cursor == 0 and not tl.follow
        await pilot.press("pagedown")
        assert tl.cursor > 5
        await pilot.press("pageup")
        assert tl.cursor == 0
        await pilot.press("space")  # less's paging keys too
        assert tl.cursor > 5
        await pilot.press("b")
        assert tl.cursor == 0
        await pilot.press("end")
        assert tl.cursor == last and tl.follow
        await pilot.press("home")
        assert tl.cursor == 0
        await pilot.press("G")
        assert tl.cursor == last and tl.follow
        await pilot.press("f")
        assert not tl.follow
        await pilot.press("f")
        assert tl.follow and tl.cursor == last
        # checkpoints: ] and [ jump between them; e/E/! between errors (here: the crash of attempt 1 only)
        await pilot.press("home", "right_square_bracket")
        assert tl.selected() == ("rec", 3)
        await pilot.press("right_square_bracket")
        assert tl.selected() == ("rec", 10)
        await pilot.press("left_square_bracket")
        assert tl.selected() == ("rec", 3)
        await pilot.press("e")
        kind, i = tl.selected()
        assert kind == "event" and d.model.events[i].data["event"] == "exit" and d.model.events[i].data["code"] == 1
        await pilot.press("e")
        await until(pilot, lambda: any("no next error" in n for n in notes(app)), what="no-error notice")
        # : goes to a seq; a negative seq counts from the end; a checkpoint name works too
        await pilot.press("colon", *"12", "enter")
        assert tl.selected() == ("rec", 12)
        await pilot.press("colon", *"-1", "enter")
        assert tl.selected() == ("rec", 25)
        assert not tl.follow
        await pilot.press("colon", *"plan-done", "enter")
        assert tl.selected() == ("rec", 3)
        await pilot.press("colon", *"999", "enter")
        await until(pilot, lambda: any("no record 999" in n for n in notes(app)), what="bad seq notice")
        assert tl.selected() == ("rec", 3)


async def test_mouse_click_selects_a_row(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        await pilot.press("home")
        await pilot.click(TimelineView, offset=(10, 3))
        assert d.timeline.cursor == 3


async def test_detail_state_and_agent_log_panes(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        await pilot.press("colon", *"9", "enter", "s")
        from supervisor.tui.pane_tabs import Panes, TabBar

        panes = d.query_one(Panes)
        assert panes.active == "state" and d.query_one("#state-pane").display and not d.query_one("#record-pane").display
        body = d.query_one("#state-pane", JsonPane)
        # the state after seq 9 (abandoned branch: findings from the first attempt)
        await until(pilot, lambda: "state as of #9" in body.text, what="state pane")
        text = body.text
        assert '"findings"' in text and "durable agents q1 result 0" in text
        await pilot.press("i")
        assert panes.active == "record" and d.query_one("#record-pane").display and not d.query_one("#state-pane").display
        rec = d.query_one("#record-pane", JsonPane).text
        assert "abandoned branch" in rec and '"search:q2"' in rec
        await pilot.press("l")
        assert panes.active == "agentlog"
        await pilot.click(TabBar, offset=(10, 0))  # " Record  State ": a click on a label shows its pane
        assert panes.active == "state" and d.query_one("#state-pane").display
        await pilot.press("l")
        from textual.widgets import Log

        assert any("crashing hard in search:q2" in line for line in d.query_one(Log).lines)


async def test_search_counts_matches_and_n_shift_n_move(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        await pilot.press("home", "slash", *"SEARCH:Q2", "enter")  # smart case: upper case is exact
        await until(pilot, lambda: any("no match" in n for n in notes(app)), what="no match")
        await pilot.press("slash", *"search:q2", "enter")
        await until(pilot, lambda: d.search_hits, what="search hits")
        lines = (rolled_back_run / "journal.jsonl").read_bytes().splitlines()
        expected = [i for i, line in enumerate(lines) if b"search:q2" in line]
        assert d.search_hits == expected and len(expected) == 8
        # a begin folded into its step's row is found through its step: counted and gone to once, begins stay folded
        shown = [s for s in expected if not d.model.is_folded_begin(s)]
        assert any(f"{len(shown)} matches" in n for n in notes(app)) and len(shown) < len(expected)
        assert d.timeline.selected() == ("rec", shown[0])
        await pilot.press("n")
        assert d.timeline.selected() == ("rec", shown[1])
        await pilot.press("N", "N")
        assert d.timeline.selected() == ("rec", shown[-1])  # wrapped around
        assert not d.model.show_begins
        await pilot.press("escape")  # Esc clears the search and never quits; q does
        assert not d.search_hits and not d.timeline.matches and app.is_running
        await pilot.press("q")
        await until(pilot, lambda: app.return_code is not None or not app.is_running, what="quit")


async def test_diff_against_previous_checkpoint_and_mark(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        await pilot.press("colon", *"20", "enter", "d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen), what="diff screen")
        diff = app.screen
        assert (diff.a, diff.b) == (3, 20)
        assert not diff.query(Footer)  # the dashboard's footer, the same look
        keys = diff.query_one(KeyFooter).render().plain
        assert "Back" in keys and "Changes" in keys and "Unified" in keys

        await until(pilot, lambda: diff.changes_plain, what="diff")
        text = diff.changes_plain
        assert "+ /findings:" in text or "+ /findings/0" in text
        await pilot.press("u")
        uni = diff.unified_plain
        assert uni.startswith("--- #3 checkpoint plan-done")
        await pilot.press("q")
        assert app.screen is d
        # mark a point, then diff the selection against it
        await pilot.press("colon", *"9", "enter", "m", "colon", *"25", "enter", "d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen), what="diff screen")
        assert (app.screen.a, app.screen.b) == (9, 25)
        await pilot.press("escape")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")
        assert app.screen is d


async def test_rollback_cancel_then_confirm_offline(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        before = (rolled_back_run / "journal.jsonl").read_bytes()
        await pilot.press("colon", *"20", "enter", "r")  # not a checkpoint: refused with a hint
        await until(pilot, lambda: any("select a checkpoint" in n for n in notes(app)), what="hint")
        await pilot.press("colon", *"21", "enter", "r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm modal")

        body = app.screen.body_text
        assert "4 records after it become an abandoned branch" in body and "#22 begin summarize" in body
        assert "offline" in body
        await pilot.press("n")
        assert app.screen is d
        assert (rolled_back_run / "journal.jsonl").read_bytes() == before
        await pilot.press("r", "y")
        await until(pilot, lambda: d.model.count == 27, what="rollback record on screen")
        data = (rolled_back_run / "journal.jsonl").read_bytes()
        assert data.startswith(before)  # appended, nothing rewritten
        rec = orjson.loads(data.splitlines()[-1])
        assert rec["kind"] == "rollback" and rec["checkpoint"] == "research-done" and rec["by"] == "user"
        await until(pilot, lambda: d.model.is_abandoned(25), what="new abandoned branch")
        assert [s for s in range(21, 27) if d.model.is_abandoned(s)] == [22, 23, 24, 25]
        assert d.timeline.follow and d.timeline.selected_seq() == 26


async def test_fork_and_live_only_keys(rolled_back_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        await opened(pilot)
        await pilot.press("colon", *"3", "enter", "F")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="fork asks first")
        await pilot.press("y")
        await until(pilot, lambda: any("forked at #3" in n for n in notes(app)), what="fork notice")
        msg = next(n for n in notes(app) if "forked at #3" in n)
        new = Path(msg.split(" into ", 1)[1])
        assert (new if new.is_absolute() else tmp_path / new).joinpath("journal.jsonl").exists()
        await pilot.press("R")
        await until(pilot, lambda: any("no supervisor is running" in n for n in notes(app)), what="restart refused")
        await pilot.press("X")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_new_records_appear_and_follow(tmp_path: Path) -> None:
    from supervisor.core.journal_writer import JournalWriter

    run = tmp_path / "live"
    w = JournalWriter(run, durable=False)
    try:
        for i in range(3):
            w.append({"kind": "step", "step": f"s{i}", "output": i})
        app = make_app(run)
        async with app.run_test(size=SIZE) as pilot:
            d = await opened(pilot)
            assert d.timeline.selected() == ("rec", 2)
            w.append({"kind": "step", "step": "fresh", "output": "hello"})
            await until(pilot, lambda: d.model.count == 4, what="new record")
            assert d.timeline.selected() == ("rec", 3)  # follow keeps the cursor at the end
            await pilot.press("k")
            for i in range(5):
                w.append({"kind": "step", "step": f"more{i}", "output": i})
            await until(pilot, lambda: d.model.count == 9, what="burst")
            assert d.timeline.selected() == ("rec", 2)  # follow off: the cursor stays
            await pilot.press("f")
            assert d.timeline.selected() == ("rec", 8)
    finally:
        w.close()


async def test_bad_input_is_shown_not_fatal(tmp_path: Path) -> None:
    run = tmp_path / "bad"
    run.mkdir(mode=0o700)
    big = orjson.dumps({"kind": "step", "step": "huge", "output": "x" * (50 * 1024 * 1024)})
    lines = [
        b'{"step": "ok", "output": 1}',
        b"this is not json",
        b"2026-11-29 10:00:01 | INFO | " + b'{"step": "prefixed", "output": 2}',
        bytes(range(256)).replace(b"\n", b""),
        big,
        b'{"step": "after", "output": 3}',
    ]
    (run / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n" + b'{"step": "torn", "outp')
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        assert d.model.count == 6  # the torn tail is not a record
        await pilot.press("home")
        ent = d.model.record(1)
        assert ent is not None and not isinstance(ent, dict) and ent.line == 2
        assert d.model.record(2)["step"] == "prefixed"  # type: ignore[index]
        await pilot.press("j", "j", "j", "j")  # through the binary line and onto the 50 MB line
        assert d.timeline.selected() == ("rec", 4)
        await pilot.press("j", "s")
        assert d.timeline.selected() == ("rec", 5)
        assert "bad lines" in status_text(app)


async def test_empty_and_deleted_run_directory(tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "empty"
    run.mkdir(mode=0o700)
    (run / "run.json").write_text('{"id": "empty", "format": 1, "status": "running"}')
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        assert d.model.count == 0
        await pilot.press("j", "k", "home", "G", "d", "r", "slash", "x", "enter", "e")
        shutil.rmtree(run)
        d.files_changed()
        await until(pilot, lambda: "DELETED" in status_text(app), what="deleted banner")
        await pilot.press("k", "home")


async def test_every_key_is_in_the_command_palette(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await opened(pilot)
        titles = [c.title for c in app.get_system_commands(d)]
        for action in ("Next checkpoint (])", "Next error (e)", "Rollback (r)", "Fork (F)", "Top (home)", "Gantt (g)", "Search (/)"):
            assert action in titles
        await pilot.press("home", "ctrl+p")
        await pilot.press(*"Next checkpoint")

        def best_hit() -> str:
            s = app.screen
            if not isinstance(s, CommandPalette):
                return ""
            hits = s.query_one(CommandList)
            return str(hits.get_option_at_index(0).prompt) if hits.option_count and hits.highlighted == 0 else ""

        await until(pilot, lambda: "Next checkpoint" in best_hit(), what="palette hit")
        await pilot.press("enter")
        await until(pilot, lambda: d.timeline.selected() == ("rec", 3), what="palette action ran")
