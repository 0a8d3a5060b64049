"""Pilot tests of the dashboard's row keys: errors with supervisor rows, fork asks, filter, bookmarks, copy, export,
and the footer per mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from textual.actions import parse as parse_action

from supervisor.tui.app import make_app
from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.help_screen import HelpScreen
from supervisor.tui.key_footer import KeyFooter
from supervisor.tui.prompt import Prompt

from .conftest import caught_up, copy_run, until

SIZE = (120, 36)


def _line(**rec: Any) -> bytes:
    return orjson.dumps(rec) + b"\n"


def troubled_run(tmp_path: Path, status: str = "failed") -> Path:
    """Three attempts: a failed step, a crash (exit 1), a hang, then a give-up; 4 successful steps."""
    run = tmp_path / "troubled"
    run.mkdir(mode=0o700)
    recs: list[dict[str, Any]] = []

    def add(**r: Any) -> None:
        r.setdefault("ts", f"2026-11-29T10:00:{len(recs):02d}.000Z")
        r["seq"] = len(recs)
        recs.append(r)

    add(kind="start", attempt=1, pid=11, resume=False)
    add(kind="step", step="plan", pos=0, attempt=1, output="p")  # 1
    add(kind="step", step="search:a", pos=1, attempt=1, error={"type": "Timeout", "message": "slow"})  # 2
    add(kind="step", step="search:a", pos=1, attempt=1, output=["a"])  # 3
    add(kind="start", attempt=2, pid=12, resume=True)  # 4
    add(kind="step", step="search:b", pos=2, attempt=2, output=["b"])  # 5
    add(kind="start", attempt=3, pid=13, resume=True)  # 6
    add(kind="step", step="summarize", pos=3, attempt=3, output="done")  # 7
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    events = [
        dict(ts="2026-11-29T10:00:00.000Z", event="spawn", attempt=1, pid=11),
        dict(ts="2026-11-29T10:00:04.000Z", event="exit", attempt=1, pid=11, code=1, signal=None, step="search:b"),
        dict(ts="2026-11-29T10:00:04.100Z", event="restart", attempt=2, reason="crash"),
        dict(ts="2026-11-29T10:00:04.200Z", event="spawn", attempt=2, pid=12),
        dict(ts="2026-11-29T10:00:06.000Z", event="hang", attempt=2, pid=12, reason="no record for 300s"),
        dict(ts="2026-11-29T10:00:06.100Z", event="exit", attempt=2, pid=12, code=None, signal=9),
        dict(ts="2026-11-29T10:00:06.200Z", event="spawn", attempt=3, pid=13),
        dict(ts="2026-11-29T10:00:09.000Z", event="exit", attempt=3, pid=13, code=1, signal=None),
        dict(ts="2026-11-29T10:00:09.100Z", event="give-up", attempt=3, status="failed"),
    ]
    (run / "supervisor.jsonl").write_bytes(b"".join(_line(**e) for e in events))
    (run / "run.json").write_bytes(orjson.dumps({
        "id": "troubled", "format": 1, "status": status, "command": ["python", "-c", "pass"], "cwd": ".", "attempts": 3,
    }))
    return run


def dash(app: Any) -> DashboardScreen:
    assert isinstance(app.screen, DashboardScreen), app.screen
    return app.screen


def notes(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


def what(d: DashboardScreen) -> str:
    """The selected row: ``#seq`` or the supervisor event's name."""
    return rows(d)[d.timeline.cursor]


def rows(d: DashboardScreen) -> list[str]:
    """Every row the timeline shows, as ``what`` names them."""
    out = []
    for r in range(d.model.rows):
        kind, i = d.model.row_item(r)
        if kind == "event":
            ev = d.model.events[i].data
            out.append(f"{ev['event']}:{ev.get('code', ev.get('signal'))}" if ev["event"] == "exit" else str(ev["event"]))
        else:
            out.append(f"#{i}")
    return out


def shown_keys(d: DashboardScreen) -> set[str]:
    """The keys the footer shows now."""
    return {k for k, ab in d.active_bindings.items() if ab.binding.show and ab.enabled}


def footer_line(d: DashboardScreen) -> str:
    """The footer's line as drawn now."""
    return d.query_one(KeyFooter).render().plain


async def test_errors_reach_failed_steps_crashes_hangs_and_give_ups(tmp_path: Path) -> None:
    app = make_app(troubled_run(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        await pilot.press("home")
        seen = []
        for _ in range(6):
            await pilot.press("e")
            seen.append(what(d))
        # the failed step, the crash, the hang and the kill that followed it, the last crash, the give-up
        assert seen == ["#2", "exit:1", "hang", "exit:None", "exit:1", "give-up"]
        await pilot.press("e")
        await until(pilot, lambda: any("no next error" in n for n in notes(app)), what="end of errors")
        back = []
        for _ in range(5):
            await pilot.press("E")
            back.append(what(d))
        assert back == ["exit:1", "exit:None", "hang", "exit:1", "#2"]
        await pilot.press("G", "exclamation_mark")
        assert what(d) == "#2"


async def test_first_error_may_be_a_crash_row(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        assert not d.model.error_seqs  # no failed step: the crash row is the first error
        await pilot.press("exclamation_mark")
        assert what(d) == "exit:1"
        assert not any("no errors" in n for n in notes(app))


async def test_fork_asks_first_and_one_confirmation_makes_one_fork(tmp_path: Path) -> None:
    run = copy_run("rolled_back_run", tmp_path)
    forks = lambda: sorted(p.name for p in tmp_path.iterdir() if "-fork-" in p.name)  # noqa: E731
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        await pilot.press("colon", *"5", "enter", "F")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="fork asks first")
        assert "rolled_back_run-fork-5" in app.screen.body_text and "not changed" in app.screen.body_text
        await pilot.press("n")
        assert forks() == []
        await pilot.press("F")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="fork asks again")
        await pilot.press("y")
        await until(pilot, lambda: any("forked at #5" in n for n in notes(app)), what="fork notice")
        assert forks() == ["rolled_back_run-fork-5"]


async def test_filter_shows_matching_rows_follows_new_records_and_esc_clears(tmp_path: Path) -> None:
    run = troubled_run(tmp_path)
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        everything = d.model.rows
        await pilot.press("ampersand", *"kind:nope", "enter")
        await until(pilot, lambda: any("unknown kind 'nope'" in n for n in notes(app)), what="bad filter said")
        assert d.model.filter is None
        await pilot.press("ampersand", *"errors", "enter")
        await until(pilot, lambda: d.model.filter is not None, what="filter applied")
        assert rows(d) == ["#2", "exit:1", "hang", "exit:None", "exit:1", "give-up"]
        bar = str(d.query_one("#filter-bar").render())
        assert "filter: errors" in bar and "6 rows" in bar and d.query_one("#filter-bar").display
        # new records: a failed step joins the filtered rows, a successful one does not
        with open(run / "journal.jsonl", "ab") as f:
            f.write(_line(kind="step", step="late", pos=4, attempt=3, error={"message": "late"}, seq=8))
            f.write(_line(kind="step", step="late", pos=4, attempt=3, output=1, seq=9))
        d.files_changed()
        await until(pilot, lambda: d.model.count == 10 and d.filter_pass is not None and d.filter_pass.cursor.seq == 10,
                    what="filter read the new records")
        await until(pilot, lambda: d.model.rows == 7, what="the failed step's row")
        assert d.model.filter_seqs.tolist() == [2, 8]
        # & again shows the filter to edit; a text term narrows it
        await pilot.press("ampersand")
        assert d.query_one("#prompt").value == "errors"
        await pilot.press("space", *"late", "enter")
        await until(pilot, lambda: d.model.filter is not None and d.model.filter.text == "errors late", what="edited")
        assert d.model.rows == 1 and what(d) == "#8"
        # Esc clears the filter (it never leaves the screen nor quits); the cursor keeps its record
        await pilot.press("escape")
        assert d.model.filter is None and app.screen is d and d.model.rows == everything + 2
        assert what(d) == "#8" and not d.query_one("#filter-bar").display
        await pilot.press("ampersand", *"!kind:event", "enter")
        await until(pilot, lambda: d.model.filter is not None, what="filter out")
        assert d.model.rows == d.model.count
        await pilot.press("escape")
        assert d.model.filter is None and app.screen is d
        await pilot.press("escape")  # nothing open: Esc says that q quits, and stays
        await until(pilot, lambda: any("q quits" in n for n in notes(app)), what="the hint")
        assert app.screen is d and app.is_running


async def test_bookmarks_copy_and_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = troubled_run(tmp_path)
    raw = (run / "journal.jsonl").read_bytes().splitlines()
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        await pilot.press("u")
        await until(pilot, lambda: any("no bookmarks" in n for n in notes(app)), what="no bookmarks yet")
        # bookmark #7, the hang row and #1
        await pilot.press("colon", *"7", "enter", "B", "home", "e", "e", "e")
        assert what(d) == "hang"
        await pilot.press("B", "colon", *"1", "enter", "B")
        assert len(d.bookmarks) == 3
        await pilot.press("u")
        assert what(d) == "hang"
        await pilot.press("u")
        assert what(d) == "#7"
        await pilot.press("u")
        assert what(d) == "#1"  # wraps around
        await pilot.press("U")
        assert what(d) == "#7"
        # the first cell of a bookmarked row shows it
        row = d.timeline.cursor - int(d.timeline.scroll_y)
        assert d.timeline.render_line(row).text.startswith("●")
        # y copies the record as its journal line, Y the value
        await pilot.press("y")
        assert orjson.loads(app.clipboard) == orjson.loads(raw[7])
        await pilot.press("Y")
        assert app.clipboard == "done"  # the step's output, a string as its text
        await pilot.press("colon", *"2", "enter", "Y")
        assert orjson.loads(app.clipboard) == {"type": "Timeout", "message": "slow"}
        await pilot.press("s")
        await until(pilot, lambda: d.state_shown is not None, what="state shown")
        await pilot.press("Y")
        assert orjson.loads(app.clipboard) == d.state_shown[0]  # type: ignore[index]
        assert any("copied the state as of #2" in n for n in notes(app))
        # W writes the bookmarked rows, in row order; the supervisor row as supervisor.jsonl holds it
        await pilot.press("W")
        assert d.query_one("#prompt").value == "troubled-rows.jsonl"
        await pilot.press("enter")
        out = tmp_path / "troubled-rows.jsonl"
        await until(pilot, lambda: any(f"wrote 3 rows to {out}" in n for n in notes(app)), what="export")
        lines = out.read_bytes().splitlines()
        assert lines[0] == raw[1] and orjson.loads(lines[1])["event"] == "hang" and lines[2] == raw[7]
        # with a filter, W writes the filtered rows; an existing file is replaced only when confirmed
        await pilot.press("ampersand")
        d.query_one(Prompt).value = "kind:step !errors"
        await pilot.press("enter")
        await until(pilot, lambda: d.model.filter is not None, what="filter")
        await pilot.press("W", "enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="replace asks")
        await pilot.press("n")
        assert out.read_bytes().splitlines() == lines
        await pilot.press("W", "enter", "y")
        await until(pilot, lambda: any("wrote 4 rows" in n for n in notes(app)), what="filtered export")
        assert out.read_bytes().splitlines() == [raw[1], raw[3], raw[5], raw[7]]
        await pilot.press("W")
        d.query_one(Prompt).value = str(tmp_path / "nowhere" / "x.jsonl")  # as typed (a key a character is slow)
        await pilot.press("enter")
        await until(pilot, lambda: any("no directory" in n for n in notes(app)), what="bad path said")


async def test_footer_shows_only_the_keys_that_work(tmp_path: Path) -> None:
    run = troubled_run(tmp_path, status="succeeded")
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        keys = shown_keys(d)
        assert {"f", "slash", "ampersand", "colon", "d", "q"} <= keys
        assert "S" not in keys and "r" not in keys  # succeeded; no checkpoint
        assert d.active_bindings["escape"].binding.action.startswith("app.notify(")  # nothing to close: a hint
        # the footer draws those keys, in the bindings' order, each action once, the palette's key on the right
        line = footer_line(d)
        assert " ? Help  f Follow  / Search  & Filter " in line and " d Diff " in line and " q Back " in line
        assert " S Start again" not in line and " r Rollback" not in line and " Esc " not in line
        assert line.rstrip().endswith("▏^p palette") and len(line) == SIZE[0]
        await pilot.click(KeyFooter, offset=(line.index(" ? Help") + 1, 0))  # a click on a key presses it
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen from the footer")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is d, what="back from the help")
        await pilot.press("colon")
        keys = shown_keys(d)
        assert "slash" not in keys and "f" not in keys and {"enter", "escape"} <= keys  # the prompt's keys only
        await until(pilot, lambda: " / Search" not in footer_line(d), what="the footer in the prompt")
        await pilot.press("escape", "ampersand", *"errors", "enter")
        await until(pilot, lambda: d.model.filter is not None, what="filter")
        assert d.active_bindings["escape"].binding.action == "close"  # the filter
        # the palette says what each key does, not its name again
        titles = {c.title: c.help for c in app.get_system_commands(d)}
        assert all(not t.startswith("(") for t in titles), titles  # every entry named (no "(S)" of a hidden key)
        for b in DashboardScreen.BINDINGS:
            assert not isinstance(b, tuple)
            if b.action.startswith("app.") or d.check_action(*parse_action(b.action)[1:]) is False:
                continue  # an action that is off now is not offered, as in the footer
            key = b.key_display or b.key.split(",")[0]
            help_text = titles[f"{b.description} ({key})"]
            assert help_text != b.description and len(help_text) > len(b.description), b
    # a stopped run offers S; replay mode has no follow and no S
    (run / "run.json").write_bytes(orjson.dumps({"id": "troubled", "format": 1, "status": "stopped",
                                                 "command": ["python", "-c", "pass"]}))
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app) and dash(app).status.state == "stopped", what="status")
        assert "S" in shown_keys(dash(app))
    app = make_app(run, replay=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        keys = shown_keys(d)
        assert "f" not in keys and "S" not in keys and "slash" in keys
        assert " f Follow" not in footer_line(d) and " / Search" in footer_line(d)
        await pilot.press("f", "S", "r")  # not offered here: each says why in one line
        for says in ("follow is off", "S starts a stopped or failed run again", "no checkpoint to roll back to"):
            await until(pilot, lambda: any(says in n for n in notes(app)), what=says)
        assert not d.timeline.follow and not isinstance(app.screen, ConfirmScreen)


async def test_search_and_jumps_stay_within_the_filter(tmp_path: Path) -> None:
    app = make_app(troubled_run(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        await pilot.press("ampersand", *"kind:start", "enter")
        await until(pilot, lambda: d.model.filter is not None, what="filter")
        assert rows(d) == ["#0", "#4", "#6"]
        await pilot.press("home", "slash", *"attempt", "enter")  # every record holds it: the matches the filter shows
        await until(pilot, lambda: d.search_hits, what="search")
        assert what(d) == "#0"
        await pilot.press("n")
        assert what(d) == "#4"
        await pilot.press("n", "n")
        assert what(d) == "#0"  # wrapped
        await pilot.press("e")  # no error passes kind:start
        await until(pilot, lambda: any("no next error the filter shows" in n for n in notes(app)), what="no error")
        await pilot.press("colon", *"5", "enter")  # hidden by the filter: the next row it shows
        assert what(d) == "#6" and any("#5 is hidden by the filter" in n for n in notes(app))


async def test_a_journal_that_shrinks_under_the_dashboard_is_said_not_a_crash(tmp_path: Path) -> None:
    """Committed lines are never removed; when a journal is cut anyway, it is said in one notice and the rows past its
    new end are blank (the read raised a traceback out of the timeline's paint, and the reading worker read again and
    again at once, forever)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    journal = run / "journal.jsonl"
    with open(journal, "wb") as f:
        f.write(b"".join(orjson.dumps({"kind": "step", "step": f"s{i}", "pos": i, "output": "x" * 50, "seq": i,
                                       "ts": "2026-12-01T00:00:00.000Z"}) + b"\n" for i in range(8_000)))
    app = make_app(run, replay=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = dash(app)
        with open(journal, "r+b") as f:
            f.truncate(journal.stat().st_size // 10)
        await pilot.press("colon")
        d.query_one(Prompt).value = "6000"
        await pilot.press("enter")
        told = lambda: [n for n in notes(app) if "shrank while being read" in n or "fewer than the 8000 shown" in n]  # noqa: E731
        await until(pilot, told, what="the notice")
        assert app.is_running and isinstance(app.screen, DashboardScreen)
        await pilot.press("home")  # the lines still there are shown as before
        await until(pilot, lambda: "s0" in "".join(d.timeline.render_line(y).text for y in range(3)), what="the first rows")
        # said once; and the reading worker no longer reads again at once, round after round (it did, forever)
        reads = d.model.applied_reads
        await pilot.pause(0.3)
        assert len(told()) == 1 and d.model.applied_reads - reads <= 2, (told(), d.model.applied_reads - reads)
