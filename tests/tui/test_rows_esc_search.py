"""Rows that say what they are, search and filters scoped to a field, and Esc that closes what is open but never
quits (as in lazygit, k9s and lnav; ``q`` quits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen

from .conftest import caught_up, until

HISTORY = {"kwargs": {"messages": [{"role": "user", "content": "research durable agents, then word_count notes.md"}]}}
MODEL = {"kind": "model", "model": "gpt-4o", "provider": "openai"}


def _tool(name: str, arg: str) -> dict[str, Any]:
    return {"step": f"tool:{name}", "inputs": {"kwargs": {"query" if name == "search" else "path": arg}},
            "call": {"kind": "tool", "tool": name}}


def _run(root: Path) -> Path:
    """Model calls that carry the conversation, two searches told apart by their query, a tool call asked for by
    the model, a checkpoint with a long name, a failed fetch, a second attempt."""
    steps: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"step": "model:gpt-4o", "inputs": HISTORY, "call": MODEL}, {"output": {"content": "The test plan: search twice.",
                                                                                 "role": "assistant"}}),
        (_tool("search", "durable agents"), {"output": [{"title": "Durable execution", "url": "https://a.invalid"}]}),
        (_tool("search", "crash recovery"), {"output": []}),
        ({"step": "model:gpt-4o", "inputs": HISTORY, "call": MODEL},
         {"output": {"content": "", "tool_calls": [{"name": "word_count", "args": {"path": "notes.md"}}]}}),
        (_tool("word_count", "notes.md"), {"output": 42}),
    ]
    recs: list[dict[str, Any]] = [{"kind": "start", "attempt": 1, "pid": 1}]
    for pos, (call, end) in enumerate(steps):
        recs += [{"kind": "begin", **call, "pos": pos, "attempt": 1}, {"kind": "step", **call, "pos": pos, "attempt": 1, **end}]
    recs.append({"kind": "checkpoint", "name": "after-the-long-research-phase", "pos": 5,
                 "file": "0001-after-the-long-research-phase.json"})
    fetch = _tool("fetch", "https://example.invalid/a")
    recs += [{"kind": "begin", **fetch, "pos": 5, "attempt": 1},
             {"kind": "step", **fetch, "pos": 5, "attempt": 1, "error": {"type": "TimeoutError", "message": "timed out"}},
             {"kind": "start", "attempt": 2, "pid": 2, "resume": True},
             {"kind": "begin", **fetch, "pos": 5, "attempt": 2},
             {"kind": "step", **fetch, "pos": 5, "attempt": 2, "output": "<html>Durable</html>"}]
    run = root / "run"
    run.mkdir(mode=0o700)
    lines = [orjson.dumps({**r, "seq": k, "id": f"r{k}", "ts": f"2026-11-29T10:00:{k:02d}.000Z"}) + b"\n"
             for k, r in enumerate(recs)]
    (run / "journal.jsonl").write_bytes(b"".join(lines))
    return run


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _dash(app: Any) -> DashboardScreen:
    assert isinstance(app.screen, DashboardScreen), app.screen
    return app.screen


def _notes(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def _ask(pilot: Any, d: DashboardScreen, key: str, text: str) -> None:
    """Open the search (``slash``) or filter (``ampersand``) prompt, put ``text`` in it (as typed: a key a character
    is slow) and press Enter."""
    from supervisor.tui.prompt import Prompt

    await pilot.press(key)
    d.query_one(Prompt).value = text
    await pilot.press("enter")


def _rows(d: DashboardScreen) -> list[str]:
    tl = d.timeline
    return [tl.render_line(y).text.rstrip() for y in range(min(d.model.rows, tl.size.height))]


async def test_rows_name_what_they_are_at_80x24(tmp_path: Path) -> None:
    """Each row shows the seqs it stands for (its folded begin, then its step: the numbers skip none), a tool call
    its query or path, a model call its answer's text or the tool call it asked for, a checkpoint its full name."""
    app = make_app(_run(tmp_path), replay=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = _dash(app)
        await pilot.press("home")
        await pilot.pause()
        assert _rows(d) == [
            "     0 10:00:00.000 ▶ start                               attempt 1 pid 1",
            "   1-2 10:00:02.000 ◇ model    gpt-4o                   ✓ The test plan: search",
            "   3-4 10:00:04.000 ⚙ tool     search                   ✓ durable agents → title",
            "   5-6 10:00:06.000 ⚙ tool     search                   ✓ crash recovery",
            "   7-8 10:00:08.000 ◇ model    gpt-4o                   ✓ → word_count(path=note",
            "  9-10 10:00:10.000 ⚙ tool     word_count               ✓ notes.md → 42",
            "    11 10:00:11.000 ◆ checkpt  after-the-long-research-phase   0001-after-the-lo",
            " 12-13 10:00:13.000 ⚙ tool     fetch                    ✗ https://example.invali",
            "    14 10:00:14.000 ▶ start                               attempt 2 pid 2 (resum",
            " 15-16 10:00:16.000 ⚙ tool     fetch                    ✓ https://example.invali",
        ]
        await pilot.resize_terminal(120, 24)  # the name column has room for the tool call's argument
        await pilot.pause()
        assert "  9-10 10:00:10.000 ⚙ tool     word_count notes.md            ✓ 42" in _rows(d)
        await pilot.press("a")  # every begin its own row: the plain seqs, no range
        await until(pilot, lambda: d.model.show_begins, what="begins shown")
        await pilot.pause()
        assert [r.split()[0] for r in _rows(d)][:4] == ["0", "1", "2", "3"]


async def test_scoped_search_and_filter_keep_begins_folded(tmp_path: Path) -> None:
    app = make_app(_run(tmp_path), replay=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = _dash(app)
        # a plain word: not in the conversation every model call carries; the call that asked, and the tool
        await _ask(pilot, d, "slash", "word_count")
        await until(pilot, lambda: d.search_hits, what="search")
        assert [s for s in d.search_hits if not d.model.is_folded_begin(s)] == [8, 10]
        assert any(n.startswith("2 matches for 'word_count'") for n in _notes(app))
        assert d.timeline.selected() == ("rec", 8) and not d.model.show_begins  # begin rows stay folded
        await pilot.press("n")
        assert d.timeline.selected() == ("rec", 10)
        await _ask(pilot, d, "slash", "inputs:word_count")  # the conversation, when asked for
        await until(pilot, lambda: d.search_query == "inputs:word_count" and 2 in d.search_hits, what="scoped search")
        assert any(n.startswith("2 matches for inputs has 'word_count'") for n in _notes(app))
        # the same terms filter the rows
        for query, seqs in (("attempt:2", [14, 16]), ("model:gpt", [2, 8]), ("error:timed", [13]),
                            ("output:durable step:tool:*", [4, 16]), ("word_count", [8, 10])):
            await _ask(pilot, d, "ampersand", query)
            await until(pilot, lambda q=query: d.model.filter is not None and d.model.filter.text == q, what=query)
            assert [i for k, i in (d.model.row_item(r) for r in range(d.model.rows)) if k == "rec"] == seqs, query
        await _ask(pilot, d, "slash", "attempt:x")
        await until(pilot, lambda: any("not an attempt number" in n for n in _notes(app)), what="a one-line error")


async def test_esc_closes_what_is_open_and_never_quits(tmp_path: Path) -> None:
    app = make_app(_run(tmp_path), replay=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = _dash(app)
        await _ask(pilot, d, "slash", "durable")
        await _ask(pilot, d, "ampersand", "kind:step")
        await until(pilot, lambda: d.search_hits and d.model.filter is not None, what="search and filter")
        d.query_one("#record-pane").focus()  # focus in the detail pane
        await pilot.pause()
        await pilot.press("escape")  # the innermost first: the pane's focus
        assert d.focused is d.timeline and d.search_hits and d.model.filter is not None
        await pilot.press("escape")  # the search
        assert not d.search_hits and not d.timeline.matches and d.model.filter is not None
        await pilot.press("escape")  # the filter
        assert d.model.filter is None and d.filter_pass is None
        await pilot.press("escape", "escape")  # nothing open: a hint, and the app stays
        await until(pilot, lambda: any("q quits" in n for n in _notes(app)), what="the hint")
        assert app.is_running and app.screen is d
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="q quits")


async def test_esc_on_the_runs_list_does_not_quit_and_closes_an_opened_run(tmp_path: Path) -> None:
    _run(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: not isinstance(app.screen, DashboardScreen) and app.screen.is_mounted, what="runs")
        runs = app.screen
        await pilot.press("escape")
        await pilot.pause()
        assert app.is_running and app.screen is runs
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and caught_up(app), what="the dashboard")
        await pilot.press("escape")  # a screen opened from the list: Esc closes it
        await until(pilot, lambda: app.screen is runs, what="back on the list")
        assert app.is_running
