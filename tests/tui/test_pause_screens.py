"""The dashboard's pause, question and breakpoint dialogs (issue 24) on a real paused agent: each answer reaches
the agent through the run directory and is journaled as a ``choice`` by the dashboard."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from textual.app import App
from textual.widgets import Input

from supervisor.core import pauses
from supervisor.core.journal_reader import JournalReader
from supervisor.tui.pause_screens import AskScreen, BreakpointsScreen, PauseScreen

from ..conftest import ROOT, clean_env, wait_for
from ..integration.supervisor_util import PY
from .conftest import until

AGENT = ROOT / "tests" / "integration" / "break_agent.py"


class Host(App[None]):
    """An empty app to open one dialog on."""


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


def _open(run: Path) -> list[dict[str, Any]]:
    return pauses.open_pauses(e for e in JournalReader(run).load() if type(e) is dict) if (run / "journal.jsonl").exists() else []


def _new_run(tmp: Path, *patterns: str) -> Path:
    run = tmp / "run"
    run.mkdir()
    (run / "run.json").write_text('{"format": 1, "id": "run"}')
    for p in patterns:
        pauses.change_breakpoints(run, add=[p])
    return run


@pytest.mark.timeout(60)
async def test_the_pause_dialog_edits_the_inputs_then_skips_a_step(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "tool:*")
    with _agent(run) as proc:
        wait_for(lambda: _open(run), timeout=30, what="the agent paused")
        app = Host()
        async with app.run_test(size=(120, 40)) as pilot:
            app.push_screen(PauseScreen(run, _open(run)[0]))
            await pilot.pause()
            await pilot.press("e")
            editor = app.screen.query_one("#pause-editor")
            editor.text = "{not json"  # type: ignore[attr-defined]
            await pilot.press("ctrl+s")
            assert isinstance(app.screen, PauseScreen)  # refused, said, still open
            editor.text = '{"args": ["pwd"]}'  # type: ignore[attr-defined]
            await pilot.press("ctrl+s")
            await until(pilot, lambda: not isinstance(app.screen, PauseScreen), what="the dialog to close")
        wait_for(lambda: (lambda o: o and o[0]["step"] == "tool:edit")(_open(run)), timeout=30, what="the next pause")
        app = Host()
        async with app.run_test(size=(120, 40)) as pilot:
            app.push_screen(PauseScreen(run, _open(run)[0]))
            await pilot.pause()
            await pilot.press("o")
            app.screen.query_one("#pause-editor").text = '"written by a person"'  # type: ignore[attr-defined]
            await pilot.press("ctrl+s")
            await until(pilot, lambda: not isinstance(app.screen, PauseScreen), what="the dialog to close")
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    assert orjson.loads(out)["result"] == ["plan(1)", "tool:bash(pwd)", "written by a person", "after(2)"]
    choices = [(r["choice"], r["by"]) for r in JournalReader(run).load() if type(r) is dict and r.get("kind") == "choice"]
    assert choices == [("inputs", "dashboard"), ("output", "dashboard")]


@pytest.mark.timeout(60)
async def test_the_question_dialog_answers_by_key_and_the_breakpoints_dialog(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with _agent(run, "--mode", "ask") as proc:
        wait_for(lambda: _open(run), timeout=30, what="the question")
        app = Host()
        async with app.run_test(size=(120, 40)) as pilot:
            app.push_screen(AskScreen(run, _open(run)[0]))
            await pilot.pause()
            await pilot.press("2")  # the second choice: "no"
            await until(pilot, lambda: not isinstance(app.screen, AskScreen), what="the dialog to close")
        out, _ = proc.communicate(timeout=30)
    assert orjson.loads(out)["result"][1] == "no"
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(BreakpointsScreen(run))
        await pilot.pause()
        await pilot.press("a")
        app.screen.query_one("#bp-input", Input).value = "llm:*"
        await pilot.press("enter")
        await pilot.press("a")
        app.screen.query_one("#bp-input", Input).value = "tool:bash"
        await pilot.press("enter")
        assert pauses.read_breakpoints(run)["patterns"] == ["llm:*", "tool:bash"]
        await pilot.pause()
        await pilot.press("d")  # the highlighted one: the first
        assert pauses.read_breakpoints(run)["patterns"] == ["tool:bash"]
        await pilot.pause()
        await pilot.press("C")
        assert pauses.read_breakpoints(run)["patterns"] == []
        await pilot.press("escape")
