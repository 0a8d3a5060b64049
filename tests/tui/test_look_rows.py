"""How rows look: full-row selection, model and tool steps, run totals, tracebacks as code, begin rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rich.segment import Segment

from supervisor.tui.app import make_app
from supervisor.tui.detail import JsonPane
from supervisor.tui.status_bar import StatusBar, UsageTotals
from supervisor.tui.timeline import TimelineView

from .conftest import DATA, caught_up, settled, until


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def model_run(tmp_path: Path) -> Path:
    """Model and tool calls with usage (gpt-4o, claude-sonnet-4-5), a failed tool call, a crash, a resume."""
    target = tmp_path / "model_run"
    shutil.copytree(DATA / "model_run", target)
    target.chmod(0o700)
    return target


def _row_of(tl: TimelineView, prefix: str) -> int:
    for y in range(tl.size.height):
        if tl.render_line(y).text.startswith(prefix):
            return y
    raise AssertionError(f"no row starts with {prefix!r}")


def _backgrounds(segments: list[Segment]) -> set[str]:
    return {s.style.bgcolor.name if s.style and s.style.bgcolor else "default" for s in segments if s.text}


async def test_selection_covers_the_whole_row(rolled_back_run: Path) -> None:
    """The cursor row is one background from the first cell to the last (time, ✓ and preview cells too),
    on a record row and on a supervisor row; other rows keep the timeline's background."""
    app = make_app(rolled_back_run)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        tl = app.screen.query_one(TimelineView)
        await pilot.press("home")
        cursor_bg = tl.get_component_rich_style("timeline--cursor").bgcolor
        for key in ("j", "j", "j"):  # start row, then step rows with ✓
            await pilot.press(key)
            await pilot.pause()
            y = tl.cursor - int(tl.scroll_y)
            segs = list(tl.render_line(y))
            assert _backgrounds(segs) == {cursor_bg.name}, (tl.render_line(y).text, _backgrounds(segs))  # type: ignore[union-attr]
            other = list(tl.render_line(y + 1))
            assert cursor_bg.name not in _backgrounds(other)  # type: ignore[union-attr]
        # a supervisor row (a crash): selectable like any other, the same full-row background
        kind = ""
        while kind != "event":
            await pilot.press("j")
            kind, _ = tl.selected()
        await pilot.pause()
        segs = list(tl.render_line(tl.cursor - int(tl.scroll_y)))
        assert "supervisor:" in "".join(s.text for s in segs)
        assert _backgrounds(segs) == {cursor_bg.name}  # type: ignore[union-attr]
        assert "── supervisor:" in app.screen.query_one("#record-pane", JsonPane).text  # the detail shows the event


async def test_model_and_tool_rows_and_run_totals(model_run: Path) -> None:
    """Model calls show the model and tokens (and cost once the prices are loaded, after the first screen),
    tool calls the tool; the status bar sums tokens and cost and says what resuming saved."""
    app = make_app(model_run)
    async with app.run_test(size=(140, 36)) as pilot:
        await until(pilot, lambda: settled(app), what="the dashboard to settle")
        bar = app.screen.query_one(StatusBar)
        await until(pilot, lambda: bar.usage is not None and bar.usage.cost is not None, what="the run's totals")
        # 1200+340 + 2600+510 (gpt-4o, attempt 1) + 4100+900 (claude, attempt 2); attempt 2 resumed and served
        # the two gpt-4o calls from the journal: 4650 tokens saved
        assert bar.usage is not None
        assert (bar.usage.tokens, bar.usage.saved_tokens) == (9650, 4650)
        assert bar.usage.cost == pytest.approx(0.04252, abs=1e-5)  # EXPORT's pricing tests check the figures by hand
        text = str(bar.render())
        assert "tokens 9.7k $0.04" in text and "saved by resume 4.7k $0.02" in text, text
        tl = app.screen.query_one(TimelineView)
        await pilot.pause()
        # each row shows the seqs it stands for (its folded begin, then its step): no gap in the numbers
        row = tl.render_line(_row_of(tl, "   1-2 ")).text
        assert "◇ model" in row and " gpt-4o " in row and "1.2k→340" in row and "$0.0064" in row, row
        row = tl.render_line(_row_of(tl, "   3-4 ")).text  # the query, then the results without JSON's quotes
        assert "⚙ tool" in row and " web_search " in row and "✓ durable agents → title: Durable execution, url: " in row, row
        row = tl.render_line(_row_of(tl, " 13-14 ")).text
        assert "claude-sonnet-4-5" in row and "4.1k→900" in row, row
        row = tl.render_line(_row_of(tl, " 15-16 ")).text
        assert "write_report" in row and "→" not in row  # a plain step: no tokens
        # at 80 columns the tokens follow the ✓, and the status bar is still one line with the totals
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        row = tl.render_line(_row_of(tl, " 13-14 ")).text
        assert "claude-sonnet-4… " in row and "✓ 4.1k→900 $0.03 # Rep" in row, row  # the seq range takes two columns
        text = str(bar.render())
        assert bar.region.height == 1 and "9.7k tok $0.04" in text and "saved 4.7k" in text, text


async def test_traceback_is_code_and_begin_rows_have_no_null(model_run: Path) -> None:
    app = make_app(model_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: settled(app), what="the dashboard to settle")
        await pilot.press("colon", "9", "enter")
        await pilot.pause()
        text = app.screen.query_one("#record-pane", JsonPane).text
        lines = text.splitlines()
        assert lines[0] == "── arguments"  # a tool call: its arguments, then its error
        at = lines.index("✗ TimeoutError: fetch_page timed out after 30s")
        assert lines[at + 1] == "Traceback (most recent call last):"
        assert lines[at + 2] == '  File "agent.py", line 41, in fetch_page'  # real lines, not one escaped JSON string
        assert "\\n" not in text and '"traceback": "(the traceback is shown above, as code)"' in text
        tl = app.screen.query_one(TimelineView)
        await pilot.press("a", "home")  # begin rows shown
        await pilot.pause()
        rows = [tl.render_line(y).text for y in range(tl.size.height)]
        begin = next(r for r in rows if r.startswith("  15 "))  # write_report's begin: no inputs at all
        assert "write_report" in begin and "null" not in begin, begin
        begin = next(r for r in rows if r.startswith("   8 "))  # fetch_page("https://example.invalid/a")
        assert '… "https://example.invalid/a"' in begin, begin


def test_status_bar_figures() -> None:
    from supervisor.views.fmt import fmt_cost, fmt_tokens

    assert [fmt_tokens(n) for n in (950, 1234, 123_456, 4_100_000)] == ["950", "1.2k", "123k", "4.1M"]
    assert [fmt_cost(c) for c in (None, 0, 0.0064, 0.0425, 1234.5)] == ["", "$0", "$0.0064", "$0.04", "$1,234"]
    assert UsageTotals().tokens == 0
    # the usage worker pushes totals to the UI only when they differ from the ones shown (each round makes new ones)
    assert UsageTotals(1200, 0.004, 50, None) == UsageTotals(1200, 0.004, 50, None)
    assert UsageTotals(1200, 0.004, 50, None) != UsageTotals(1200, 0.004, 50, 0.0)
    assert UsageTotals(1200) != UsageTotals(1201) and UsageTotals() != (0, None, 0, None)


async def test_totals_follow_a_live_run(rolled_back_run: Path) -> None:
    """A run without usage shows no totals (nothing parsed for them); a model call appended later brings them."""
    from supervisor.core.journal_writer import JournalWriter

    app = make_app(rolled_back_run)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: settled(app), what="the dashboard to settle")
        bar = app.screen.query_one(StatusBar)
        assert bar._usage_started and bar.usage is None and "tokens" not in str(bar.render())
        bar.USAGE_POLL_S = 0.05
        bar._usage_wake.set()  # the worker's next round comes at once
        with JournalWriter(rolled_back_run, durable=False) as w:
            w.append({"kind": "step", "step": "model:gpt-4o", "pos": 5, "output": "ok",
                      "call": {"kind": "model", "model": "gpt-4o", "provider": "openai"},
                      "usage": [{"model": "gpt-4o", "provider": "openai", "input_tokens": 1000, "output_tokens": 200}]})
        await until(pilot, lambda: bar.usage is not None, what="the totals of the appended model call")
        assert bar.usage is not None and (bar.usage.tokens, bar.usage.saved_tokens) == (1200, 0)
        await until(pilot, lambda: "tokens 1.2k" in str(bar.render()), what="the status bar")
