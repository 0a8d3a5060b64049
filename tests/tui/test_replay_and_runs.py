"""Replay mode (the cursor is "now"), the runs list, and the CLI entry points."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
from textual.widgets import Footer

from supervisor.errors import RunDirError
from supervisor.tui.app import make_app
from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane
from supervisor.tui.key_footer import KeyFooter
from supervisor.tui.runs_screen import RunsScreen

from ..conftest import run_agent, run_cli
from .conftest import caught_up, until

SIZE = (120, 36)


async def _opened(pilot) -> DashboardScreen:  # type: ignore[no-untyped-def]
    await until(pilot, lambda: caught_up(pilot.app), what="scan")
    return pilot.app.screen  # type: ignore[no-any-return]


async def test_replay_moves_now_and_shows_the_state_as_of_now(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run, replay=True)
    async with app.run_test(size=SIZE) as pilot:
        d = await _opened(pilot)
        tl = d.timeline
        assert tl.cursor == 0 and not tl.follow  # a recording starts at its beginning
        state = d.query_one("#state-pane", JsonPane)
        assert "REPLAY now #0" in str(d.query_one("#status").render())
        # step forward to the first checkpoint: the state as of now has the plan
        await pilot.press("right_square_bracket")
        assert tl.selected() == ("rec", 3)
        await until(pilot, lambda: "state as of #3 (now)" in state.text, what="state at 3")
        assert '"plan"' in state.text and '"findings"' not in state.text
        # rows after now are 'future' (dimmed), rows before are not
        assert tl._is_future(tl.cursor + 1) and not tl._is_future(tl.cursor - 1)
        await pilot.press("j")
        assert tl.selected() == ("rec", 5)  # one row per step: search:q1's begin (4) is folded into its step's row
        await pilot.press("k")
        assert tl.selected() == ("rec", 3)
        await pilot.press("f")  # no follow in replay
        assert not tl.follow
        await pilot.press("colon", *"19", "enter")
        await until(pilot, lambda: "state as of #19 (now)" in state.text, what="state at 19")
        assert "durable agents q2 result 0" not in state.text  # search:q2 begins: its finding is not there yet
        await pilot.press("colon", *"20", "enter")
        await until(pilot, lambda: "state as of #20 (now)" in state.text, what="state at 20")
        assert "durable agents q2 result 0" in state.text  # the state at a step is after its result
        # restart / stop are refused in replay mode (read-only)
        await pilot.press("R")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_replay_offline_rollback_asks_and_appends(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run, replay=True)
    async with app.run_test(size=SIZE) as pilot:
        d = await _opened(pilot)
        before = (rolled_back_run / "journal.jsonl").read_bytes()
        await pilot.press("right_square_bracket", "r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm")
        assert "offline" in app.screen.body_text
        await pilot.press("escape")
        assert (rolled_back_run / "journal.jsonl").read_bytes() == before
        await pilot.press("r", "y")
        await until(pilot, lambda: d.model.count == 27, what="rollback appended")
        data = (rolled_back_run / "journal.jsonl").read_bytes()
        assert data.startswith(before)
        assert orjson.loads(data.splitlines()[-1])["checkpoint"] == "plan-done"


async def test_replay_of_a_minimal_journal_without_run_json(minimal_journal: Path) -> None:
    for target in (minimal_journal, minimal_journal / "journal.jsonl"):
        app = make_app(target, replay=True)
        async with app.run_test(size=SIZE) as pilot:
            d = await _opened(pilot)
            assert d.model.count == 5 and d.model.error_seqs == [2]
            await pilot.press("exclamation_mark")  # the first error
            assert d.timeline.selected() == ("rec", 2)
            await pilot.press("e")
            assert d.timeline.selected() == ("rec", 2)  # no other error
            await pilot.press("E", "G")
            assert d.timeline.selected() == ("rec", 4)
            rec = d.query_one("#record-pane", JsonPane)
            assert '"store"' in rec.text


async def test_replay_of_a_crashed_sample_run(tmp_path: Path) -> None:
    run = tmp_path / "crashed"
    res = run_agent(run, "--crash-in", "search:q2")
    assert res.returncode == 1
    app = make_app(run, replay=True)
    async with app.run_test(size=SIZE) as pilot:
        d = await _opened(pilot)
        assert d.model.count == 7
        await pilot.press("G")
        rec = d.query_one("#record-pane", JsonPane)
        assert '"begin"' in rec.text and '"search:q2"' in rec.text  # the step a crash interrupted


async def test_runs_list_opens_a_run_and_goes_back(rolled_back_run: Path, minimal_journal: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    shutil.move(str(rolled_back_run), root / "20261129-100016-aaaa")
    shutil.move(str(minimal_journal), root / "minimal")
    (root / "not-a-run").mkdir()
    app = make_app(root)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(app.screen.runs) == 2, what="runs")
        runs = app.screen.runs
        by_id = {r.id: r for r in runs}
        assert by_id["s1"].status == "succeeded" and by_id["s1"].attempts == "3" and by_id["s1"].steps == "5"
        assert by_id["minimal"].steps == "4" and not by_id["minimal"].live
        # the dashboard's footer (one widget, the keys that work), not Textual's Footer
        assert not app.screen.query(Footer)
        keys = app.screen.query_one(KeyFooter).render().plain
        assert "Open" in keys and "Quit" in keys and "Help" in keys
        await pilot.press("j", "k")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen), what="dashboard")
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="back to the list")
        await pilot.press("question_mark", "escape", "q")
        await until(pilot, lambda: not app.is_running, what="quit")


def test_bad_paths_are_one_line_errors(tmp_path: Path) -> None:
    import pytest

    with pytest.raises(RunDirError):
        make_app(tmp_path / "nope")
    with pytest.raises(RunDirError):
        make_app(tmp_path, replay=True)  # a directory without a journal
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    res = run_cli("tui", str(f))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    res = run_cli("tui", str(tmp_path / "missing"))
    assert res.returncode == 2 and "no such run directory" in res.stderr
    res = run_cli("tui", cwd=tmp_path)
    assert res.returncode == 2 and "agent-supervisor demo" in res.stderr


SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs" / "runs"


async def test_replay_opens_every_recorded_sample_run(tmp_path: Path) -> None:
    from supervisor.core import history

    runs = sorted(p for p in SAMPLES.iterdir() if p.is_dir()) if SAMPLES.is_dir() else []
    assert runs, "sample_runs/runs holds the recorded runs"
    for src in runs:
        run = tmp_path / src.name
        shutil.copytree(src, run)  # a copy: replay must not need write access, but tests never touch the originals
        h = history.load(run)
        app = make_app(run, replay=True)
        async with app.run_test(size=SIZE) as pilot:
            d = await _opened(pilot)
            assert d.model.count == len(h.entries)
            assert d.model.effective_steps == len(h.steps)
            assert {s for s in range(d.model.count) if d.model.is_abandoned(s)} == h.abandoned_seqs
            state = d.query_one("#state-pane", JsonPane)
            last = h.effective[-1]["seq"]
            await pilot.press("colon", *str(last), "enter")
            await until(pilot, lambda: f"state as of #{last} (now)" in state.text, what=f"{src.name}: final state")
            want = history.state_at(run, h, last)
            assert orjson.loads(state.text.split("\n", 1)[1]) == want
            await pilot.press("home")
            assert d.timeline.selected_seq() == 0
