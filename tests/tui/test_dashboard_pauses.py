"""The dashboard on a real paused agent (issue 24): the banner and ``p`` while it follows the run, ``x`` on a row,
a question answered from the dashboard, and the keys in replay mode."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from textual.app import App
from textual.widgets import Static

from supervisor.core import pauses
from supervisor.core.journal_reader import JournalReader
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.key_footer import KeyFooter
from supervisor.tui.pause_screens import AskScreen, PauseScreen

from ..conftest import ROOT, clean_env, wait_for
from ..integration.supervisor_util import PY
from .conftest import caught_up, until

AGENT = ROOT / "tests" / "integration" / "break_agent.py"
SIZE = (120, 36)


@contextmanager
def _agent(run: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    p = subprocess.Popen([PY, str(AGENT), str(run), "--ledger", str(run.parent / "ledger.jsonl"), *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=30)


def _new_run(tmp: Path, *patterns: str) -> Path:
    run = tmp / "run"
    run.mkdir()
    (run / "run.json").write_text('{"format": 1, "id": "run"}')
    for p in patterns:
        pauses.change_breakpoints(run, add=[p])
    return run


def _banner(app: App[Any]) -> str | None:
    """The pause banner's text, ``None`` while it is hidden."""
    screen = app.screen_stack[0] if app.screen_stack else None
    if not isinstance(screen, DashboardScreen):
        return None
    bars = screen.query("#pause-bar")
    bar = bars.first(Static) if bars else None
    return str(bar.render()) if bar is not None and bar.display else None


def _notes(app: App[Any]) -> list[str]:
    return [str(n.message) for n in app._notifications]


def _footer(app: App[Any]) -> set[str]:
    """The actions of the keys the footer shows now."""
    shown = app.screen.query_one(KeyFooter).keys()
    return {b.action for b, _enabled, _tip in shown}


def _ledger(run: Path) -> list[dict[str, Any]]:
    path = run.parent / "ledger.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


@pytest.mark.timeout(60)
async def test_the_banner_shows_a_pause_and_p_continues_it(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "tool:*")
    with _agent(run) as proc:
        app = make_app(run, settings_path=tmp_path / "settings.json")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "tool:bash" in (_banner(app) or ""), what="the banner of the pause")
            text = _banner(app) or ""
            assert text.startswith("⏸ paused before step 'tool:bash' (breakpoint 'tool:*')"), text
            assert any("tool:bash" in n for n in _notes(app))
            assert "answer_pause" in _footer(app)
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, PauseScreen), what="the pause dialog")
            await pilot.press("c")
            # the next step matches too: the banner names it once the agent took the answer
            await until(pilot, lambda: "tool:edit" in (_banner(app) or ""), what="the next pause")
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, PauseScreen), what="the pause dialog")
            await pilot.press("c")
            await until(pilot, lambda: _banner(app) is None, what="the banner to go")
            assert "answer_pause" not in _footer(app)
            await pilot.press("p")
            await until(pilot, lambda: "no paused step" in _notes(app), what="p to say there is no pause")
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert [c["call"] for c in _ledger(run)] == ["plan", "tool:bash", "tool:edit", "after"]


@pytest.mark.timeout(60)
async def test_x_sets_a_breakpoint_on_the_rows_step_and_removes_it(tmp_path: Path) -> None:
    run = _new_run(tmp_path)
    with _agent(run) as proc:
        assert proc.wait(timeout=30) == 0
    seq = next(r["seq"] for r in map(orjson.loads, (run / "journal.jsonl").read_bytes().splitlines())
               if r.get("kind") == "step" and r.get("step") == "tool:edit")
    app = make_app(run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="the dashboard to catch up")
        await pilot.press("colon", *str(seq), "enter")
        await until(pilot, lambda: app.screen.timeline.selected_seq() == seq, what="the row")  # type: ignore[attr-defined]
        await pilot.press("x")
        await until(pilot, lambda: pauses.read_breakpoints(run)["patterns"] == ["tool:edit"], what="the breakpoint")
        await until(pilot, lambda: any(n.startswith("breakpoint: tool:edit") for n in _notes(app)), what="the notice")
        await pilot.press("x")
        await until(pilot, lambda: pauses.read_breakpoints(run)["patterns"] == [], what="the breakpoint removed")


@pytest.mark.timeout(60)
async def test_a_question_answered_from_the_dashboard_reaches_the_agent(tmp_path: Path) -> None:
    run = _new_run(tmp_path)
    with _agent(run, "--mode", "ask") as proc:
        app = make_app(run, settings_path=tmp_path / "settings.json")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: _banner(app), what="the banner of the question")
            assert (_banner(app) or "").startswith("? the agent asks: ship it? — p: answer")
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, AskScreen), what="the question dialog")
            await pilot.press("1")
            await until(pilot, lambda: _banner(app) is None, what="the banner to go")
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert orjson.loads(out)["result"][1] == "yes"
    assert _ledger(run)[-1] == {"call": "after", "args": ["yes"], "attempt": 1}


@pytest.mark.timeout(60)
async def test_replay_mode_shows_a_pause_and_says_the_keys_do_nothing(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "tool:*")
    with _agent(run):
        wait_for(lambda: _open(run), timeout=30, what="the agent paused")
    # the agent was killed while paused: the replayed run stopped in its pause
    app = make_app(run, replay=True, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app) and _banner(app), what="the banner")
        assert (_banner(app) or "").endswith("— replay mode is read-only")
        for key in ("p", "x", "P"):
            await pilot.press(key)
        await until(pilot, lambda: sum("replay mode is read-only" in n for n in _notes(app)) == 3, what="3 notices")
        assert isinstance(app.screen, DashboardScreen)
        assert pauses.read_breakpoints(run)["patterns"] == ["tool:*"]
        assert not (run / pauses.ANSWERS).exists()


def _open(run: Path) -> list[dict[str, Any]]:
    return pauses.open_pauses(e for e in JournalReader(run).load() if type(e) is dict) if (run / "journal.jsonl").exists() else []
