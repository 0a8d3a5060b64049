"""The dashboard on a run with proxied model calls (``llm.jsonl``): rows in the one timeline, the detail pane, live."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane
from supervisor.tui.timeline import TimelineView

from .conftest import caught_up, until
from .llm_run import make_llm_run

SIZE = (160, 45)
pytestmark = pytest.mark.timeout(60)


def _line(tl: TimelineView, row: int) -> str:
    return "".join(seg.text for seg in tl.render_line(row - int(tl.scroll_y)))


async def test_calls_are_rows_by_time_with_their_marks_and_a_readable_detail(tmp_path: Path) -> None:
    run = make_llm_run(tmp_path)
    app = make_app(run, replay=True, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = app.screen
        assert isinstance(d, DashboardScreen)
        tl = d.timeline
        # the status bar's totals count the calls (1.2k + 1.3k in, 34 + 5 out); the prices are loaded then
        bar = d.query_one("#status")
        await until(pilot, lambda: "tokens 2.5k" in str(bar.render()), what="the totals with the calls")
        assert "saved by resume 1.2k" in str(bar.render())  # attempt 2 was served call 0
        kinds = [d.model.row_item(r)[0] for r in range(d.model.rows)]
        assert kinds == ["rec", "rec", "call", "rec", "call", "call", "call", "rec"]
        lines = [_line(tl, r) for r in range(d.model.rows)]
        assert "plan" in lines[1] and "search:q1" in lines[3] and "summarise" in lines[7]
        c0, c1, c2, c4 = lines[2], lines[4], lines[5], lines[6]
        assert "c0" in c0 and "◇ llm" in c0 and "gpt-4o-mini" in c0 and "812ms" in c0
        assert "1.2k→34" in c0 and "served→a2" in c0 and "→ tool call" in c0
        assert "⇶" in c1 and "live" in c1 and "Durable agents res" in c1 and "⇶" not in c0
        assert "✗ 429 HTTPError: Too Many Requests" in c2
        assert "≠ llm" in c4 and "#1" in c4
        # the failed call is red as a failed step's tail is
        err_style = tl.get_component_rich_style("timeline--error")
        strip = tl.render_line(5 - int(tl.scroll_y))
        assert any("429" in seg.text and seg.style is not None and seg.style.color == err_style.color for seg in strip)
        # the streamed call's detail: the assembled answer first, the facts, the request's messages; raw on demand
        await pilot.press("i", "j", "j", "j", "j")
        assert tl.selected() == ("call", 1)
        pane = d.query_one("#record-pane", JsonPane)
        await until(pilot, lambda: "model call c1" in pane.text, what="the call's detail")
        text = pane.text
        order = ["── answer", "Durable agents resume.", "── usage", "status  200", "tokens  1.3k in → 5 out", "latency",
                 "model  openai gpt-4o-mini (chat API)", "streamed  yes", "answer  live", "── conversation",
                 "system: You are a careful research assistant.", "user: find durable agents",
                 "tool: ← tool result [call_1]: two results", "▸ raw record"]
        at = [text.find(s) for s in order]
        assert -1 not in at and at == sorted(at), list(zip(order, at, strict=True))
        assert '"events"' not in text  # the raw record on demand (v)
        pane.action_toggle_raw()
        await until(pilot, lambda: '"events"' in pane.text, what="the raw record")
        assert '\\"content\\"' not in pane.text.split("── raw record")[0]  # readable, not an escaped JSON string
        pane.action_toggle_raw()
        # the call an attempt was served from, and the failed one
        await pilot.press("k", "k")
        await until(pilot, lambda: "model call c0" in pane.text, what="c0's detail")
        assert "served  from this record to attempt 2" in pane.text
        assert "── tool calls (1)" in pane.text and '→ web_search({"q":"durable"})  [call_1]' in pane.text
        await pilot.press("j", "j", "j")
        await until(pilot, lambda: "model call c2" in pane.text, what="c2's detail")
        assert "✗ rate_limit_error: Rate limit reached" in pane.text
        assert "status  429 ✗ HTTPError: Too Many Requests" in pane.text


async def test_a_call_appended_while_the_dashboard_runs_appears(tmp_path: Path) -> None:
    run = make_llm_run(tmp_path)
    app = make_app(run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = app.screen
        assert isinstance(d, DashboardScreen)
        n = d.model.rows
        ts = orjson.loads((run / "journal.jsonl").read_bytes().splitlines()[-1])["ts"]
        rec = {"kind": "step", "seq": 5, "ts": ts, "dur_ms": 5.0, "step": "llm:anthropic:claude-x", "attempt": 3,
               "call": {"kind": "model", "via": "proxy", "provider": "anthropic", "model": "claude-x", "api": "messages",
                        "stream": False},
               "inputs": {"method": "POST", "path": "/v1/messages", "body": {"messages": [{"role": "user", "content": "hi"}]}},
               "output": {"status": 200, "body": {"type": "message", "role": "assistant",
                                                  "content": [{"type": "text", "text": "Hello from Claude"}]}}}
        with open(run / "llm.jsonl", "ab") as f:
            f.write(orjson.dumps(rec) + b"\n")
        await until(pilot, lambda: d.model.rows == n + 1, what="the new call's row")
        assert d.model.row_item(d.model.rows - 1)[0] == "call"  # after the last record, by its time
        await until(pilot, lambda: "model call c5" in d.query_one("#record-pane", JsonPane).text, what="follow shows it")
        assert "── answer\nHello from Claude" in d.query_one("#record-pane", JsonPane).text
