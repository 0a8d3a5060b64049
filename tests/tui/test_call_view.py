"""Pilot tests of the record pane: long values wrap (``w``) or scroll sideways, ``/`` searches the pane, a model
call opens on its answer (then usage and cost, the conversation with its history folded, the raw record on
demand), a tool call shows its retries; snapshots of the call view at 80x24 and 200x50."""

from __future__ import annotations

from pathlib import Path

import orjson
from textual.pilot import Pilot

from supervisor.tui.agent_log_pane import AgentLogPane
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane

from .call_run import ASSERTION, LONG_MODULE, call_app, make_call_run
from .conftest import settled, until

SIZE = (100, 30)


async def _at(pilot: Pilot, seq: int) -> tuple[DashboardScreen, JsonPane]:
    await until(pilot, lambda: settled(pilot.app), what="the dashboard to settle")
    d = pilot.app.screen
    assert isinstance(d, DashboardScreen)
    await pilot.press("colon", *str(seq), "enter")
    pane = d.query_one("#record-pane", JsonPane)
    await until(pilot, lambda: d.timeline.selected_seq() == seq, what=f"#{seq} selected")
    return d, pane


def _shown(pane: JsonPane) -> str:
    """The pane's lines as drawn: the body's lines in the pane's visible window (scrolled down and sideways)."""
    x, y0 = int(pane.scroll_x), int(pane.scroll_y)
    w, h = pane.scrollable_content_region.size
    lines = [pane.body.render_line(y).text for y in range(y0, min(y0 + h, pane.body.size.height))]
    return "\n".join(ln[x:x + w].rstrip() for ln in lines)


async def test_long_values_wrap_and_w_turns_wrapping_off_for_sideways_scroll(tmp_path: Path) -> None:
    run = make_call_run(tmp_path)
    app = make_app(run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        d, pane = await _at(pilot, 1)
        await until(pilot, lambda: "qdrant_hybrid_backend" in pane.text, what="the setup step")
        # wrapped (the default): the module's name is on screen, not cut at the pane's edge
        await until(pilot, lambda: "hybrid_backend" in _shown(pane).replace("\n", ""), what="the wrapped value drawn")
        assert pane.max_scroll_x == 0
        await pilot.press("w")
        await until(pilot, lambda: not pane.wrap and pane.max_scroll_x > 0, what="wrapping off")
        assert orjson.loads((tmp_path / "settings.json").read_bytes())["wrap"] is False  # remembered
        assert "hybrid_backend" not in _shown(pane)  # off the right edge now...
        pane.focus()
        for _ in range(8):
            await pilot.press("right")
        await until(pilot, lambda: pane.scroll_x > 0, what="Right scrolls sideways")
        for _ in range(40):  # ... and reachable
            await pilot.press("right")
        await until(pilot, lambda: pane.scroll_x == pane.max_scroll_x, what="the right edge")
        assert "hybrid_backend" in _shown(pane)
        # the agent log: unwrapped, its long line is one line (it scrolls sideways); wrapped, cut at the pane's width
        log = d.query_one("#agent-log", AgentLogPane)
        await until(pilot, lambda: any("qdrant" in ln for ln in log.lines), what="the agent log read")
        assert any(LONG_MODULE in ln for ln in log.lines) and log.max_scroll_x > 0
        # the assertion message keeps its end
        await pilot.press("w")
        await until(pilot, lambda: pane.wrap, what="wrapping on again")
        await pilot.press("l")
        await until(pilot, lambda: log.wrap and log.max_scroll_x == 0 and not any(LONG_MODULE in ln for ln in log.lines),
                    what="the agent log wrapped")
        assert "(while loading the retrieval plugins)" in "".join(log.lines)
        await pilot.press("i")
        d.timeline.focus()
        await pilot.press("colon", "5", "enter")
        await until(pilot, lambda: ASSERTION in pane.text, what="the failed check")
        assert pane.text.splitlines()[0] == f"✗ {ASSERTION}"
        await until(pilot, lambda: "== 'hello-world'" in _shown(pane).replace("\n", ""), what="the assertion drawn whole")
    assert LONG_MODULE in (run / "journal.jsonl").read_text()


async def test_slash_in_the_pane_searches_its_text(tmp_path: Path) -> None:
    app = make_app(make_call_run(tmp_path), settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        d, pane = await _at(pilot, 2)
        await until(pilot, lambda: "── answer" in pane.text, what="the call view")
        pane.focus()
        await pilot.press("slash", *"zebra", "enter")  # smart case: lower case finds ZEBRA
        await until(pilot, lambda: pane.matches and pane.match_index == 0, what="the match")
        assert pane.text[pane.matches[0]:pane.matches[0] + 5] == "ZEBRA"
        assert d.search_query == ""  # the timeline's search was not started
        assert pane.has_focus
        await pilot.press("slash", "q", "escape")  # Esc closes the box only: not the screen, not the search
        assert pilot.app.screen is d and pane.has_focus and pane.query_text == "zebra"
        # a match far down: n goes to it and scrolls it into view
        await pilot.press("slash", *"part 2", "enter")
        await until(pilot, lambda: pane.query_text == "part 2", what="the second search")
        assert not pane.matches  # folded history is not shown, so not found
        await pilot.press("h")
        await until(pilot, lambda: bool(pane.matches), what="the history shown and searched")
        await pilot.press("n")
        await until(pilot, lambda: "part 2" in _shown(pane), what="the match scrolled into view")
        assert pane.scroll_y > 0
        await pilot.press("escape")  # no search box open: Esc is the screen's again
        d.timeline.focus()
        await pilot.press("n")  # the timeline's n: no timeline search yet
        assert pane.match_index >= 0


async def test_a_model_call_opens_on_its_answer_and_the_raw_record_on_demand(tmp_path: Path) -> None:
    app = make_app(make_call_run(tmp_path), settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        d, pane = await _at(pilot, 2)
        await until(pilot, lambda: "── answer" in pane.text, what="the call view")
        text = pane.text
        order = ["── answer", "## Plan", "ZEBRA-END", "── tool calls (2)", '→ search({"q":"journal format"})  [call_a]',
                 "── usage", "tokens  1.2k in → 34 out", "cost", "latency  812ms", "model  openai gpt-4o-mini",
                 "── conversation (75 messages)", "▸ 74 earlier messages folded", "user: Now write the plan, NEWEST-MESSAGE.",
                 "▸ raw record: v"]
        at = [text.find(s) for s in order]
        assert -1 not in at and at == sorted(at), list(zip(order, at, strict=True))
        assert "question 3" not in text and '"inputs_hash"' not in text  # history folded, bookkeeping not shown
        shown = _shown(pane)
        assert "Plan" in shown.splitlines()[0] + shown.splitlines()[1] and "ZEBRA-END" in shown  # the answer first
        pane.focus()
        await pilot.press("v")
        await until(pilot, lambda: '"inputs_hash"' in pane.text, what="the raw record")
        await pilot.press("h")
        await until(pilot, lambda: "question 3" in pane.text, what="the history")
        # a tool call: arguments, result, the earlier failed try
        d.timeline.focus()
        await pilot.press("colon", "4", "enter")
        await until(pilot, lambda: "── retries (1 earlier failed try)" in pane.text, what="the tool call")
        t = pane.text
        assert t.index("── arguments") < t.index("── result") < t.index("── retries") < t.index("── record")
        assert "TimeoutError: search timed out after 30s" in t


def _on_call(seq: int) -> object:
    async def before(pilot: Pilot) -> None:
        await until(pilot, lambda: settled(pilot.app), what="the dashboard to settle")
        await pilot.press("colon", *str(seq), "enter")
        pane = pilot.app.screen.query_one("#record-pane", JsonPane)
        await until(pilot, lambda: "── answer" in pane.text, what="the call view")
        await until(pilot, lambda: settled(pilot.app), what="the state pane")

    return before


def test_snapshot_call_view_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(call_app(), terminal_size=(80, 24), run_before=_on_call(2))


def test_snapshot_call_view_200x50(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(call_app(), terminal_size=(200, 50), run_before=_on_call(2))
