"""The diff screen: side by side when wide, stacked when narrow (``L`` turns it over), strings with lines diffed as
text by the function ``replay --verify`` prints with, no value cut; and that one function's text."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from supervisor.tui.app import make_app
from supervisor.tui.diff_screen import DiffScreen
from supervisor.tui.help_screen import DIFF_KEYS, HelpScreen
from supervisor.views.value_diff import changed_spans, format_value_diff, pretty, side_rows

from .conftest import caught_up, until
from .diff_run import CODE_A, CODE_B, STATE_A, STATE_B, make_diff_run


def shown(screen: DiffScreen) -> list[str]:
    """The Changes tab's lines as drawn at its width (trailing blanks dropped)."""
    body = screen.query_one("#changes-body", Static)
    out = io.StringIO()
    Console(file=out, width=body.size.width, color_system=None).print(body.content)
    return [line.rstrip() for line in out.getvalue().splitlines()]


async def open_diff(pilot: Pilot) -> DiffScreen:  # type: ignore[type-arg]
    """The dashboard, then the diff of step #0 (marked) against step #1."""
    await until(pilot, lambda: caught_up(pilot.app), what="scan")
    await pilot.press("colon", "0", "enter", "m", "colon", "1", "enter", "d")
    await until(pilot, lambda: isinstance(pilot.app.screen, DiffScreen) and pilot.app.screen.changes_plain, what="diff")
    screen = pilot.app.screen
    assert isinstance(screen, DiffScreen)
    return screen


def _side_line(lines: list[str], left: str, right: str) -> str:
    """The one drawn line that holds ``left`` and then ``right`` (old beside new)."""
    found = [x for x in lines if left in x and right in x and x.index(left) < x.index(right)]
    assert len(found) == 1, (left, right, "\n".join(lines))
    return found[0]


async def test_side_by_side_when_wide_stacked_when_narrow(tmp_path: Path) -> None:
    app = make_app(make_diff_run(tmp_path), settings_path=tmp_path / "settings.json")
    async with app.run_test(size=(200, 50)) as pilot:
        diff = await open_diff(pilot)
        await until(pilot, lambda: diff.side_shown, what="side by side")
        lines = shown(diff)
        # code in a string: line beside line, numbered, the changed line beside the line it replaced
        row = _side_line(lines, "return http.get(url, timeout=10)", "return http.get(url, timeout=30)")
        assert row.split()[0] == "4" and " 4 │" in row
        _side_line(lines, 'log.warning("timeout on %s", url)', 'log.warning("timeout on %s (attempt %d)", url, attempt)')
        assert any("time.sleep(2 ** attempt)" in x and x.index("time.sleep") > 100 for x in lines)  # new side only
        assert not any("\\n" in x for x in lines)  # no line shows an escaped line break
        # no value cut: the long URL and the long note whole (wrapped, never "…")
        text = "".join(x.strip() for x in lines)
        assert STATE_B["sources"]["temporal"] in text.replace(" ", "").replace("│", "")
        assert "…" not in "\n".join(lines) and "nothing." in text
        _side_line(lines, "12000", "9000")
        _side_line(lines, '"first draft"', "(absent)")

        await pilot.resize_terminal(80, 24)  # narrow: stacked, texts as the unified diff replay --verify prints
        await until(pilot, lambda: not diff.side_shown, what="stacked")
        lines = shown(diff)
        assert "~ /code:" in lines and "    @@ -2,7 +2,8 @@" in lines
        assert "    -            return http.get(url, timeout=10)" in lines
        assert "    +            time.sleep(2 ** attempt)" in lines
        assert all(len(x) <= diff.query_one("#changes-body").size.width for x in lines)
        assert "~ /budget/tokens: 12000 → 9000" in lines and '- /draft: "first draft"' in lines

        await pilot.press("L")  # side by side anyway, on this screen
        await until(pilot, lambda: diff.side_shown, what="side by side at 80")
        _side_line(shown(diff), "timeout=10)", "timeout=30)")
        await pilot.press("L")
        await until(pilot, lambda: not diff.side_shown, what="stacked again")

        await pilot.press("question_mark")  # the diff screen's own keys
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        assert app.screen.keys is DIFF_KEYS
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is diff, what="back")

        # the palette offers the keys that work here, each named: no Files tab without a workspace
        titles = [c.title for c in app.get_system_commands(diff)]
        assert "Side/stacked (L)" in titles and not any(t.startswith("Files") for t in titles)
        assert all(t and not t.startswith("(") for t in titles), titles


async def test_the_layout_setting_decides_first(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"layout": "stacked"}')
    app = make_app(make_diff_run(tmp_path), settings_path=tmp_path / "settings.json")
    async with app.run_test(size=(200, 50)) as pilot:
        diff = await open_diff(pilot)
        await pilot.pause()
        assert not diff.side_shown and "    @@ -2,7 +2,8 @@" in shown(diff)


def test_one_string_diff_for_replay_and_the_screen() -> None:
    """``format_value_diff`` (``replay --verify``, ``compare``): the lines it always printed, whole values on request."""
    lines = format_value_diff(STATE_A, STATE_B)
    assert lines[0] == '    + /plan/2: "review"'
    assert lines[1:4] == ["    ~ /code:", "      --- recorded", "      +++ new"]
    assert "      -            return http.get(url, timeout=10)" in lines
    note = next(x for x in lines if x.startswith("    ~ /note:"))
    assert note == "    ~ /note:"  # a long string: a text diff, not two cut previews
    url = STATE_B["sources"]["temporal"]
    cut = next(x for x in lines if x.startswith("    + /sources: "))
    assert cut.endswith("…") and url not in cut  # the CLI's line stays one terminal line
    whole = next(x for x in format_value_diff(STATE_A, STATE_B, width=None) if x.startswith("    + /sources: "))
    assert url in whole
    assert format_value_diff({"a": 1}, {"a": 2}, indent="") == ["~ /a: 1 -> 2"]


def test_side_rows_pair_lines_and_mark_words() -> None:
    rows = side_rows(CODE_A, CODE_B)
    assert rows[0].tag == "gap" and rows[0].a == "⋯ 1 unchanged line"
    replaced = [r for r in rows if r.tag == "replace"]
    assert [(r.a_no, r.b_no) for r in replaced] == [(4, 4), (6, 6)]
    inserted = [r for r in rows if r.tag == "insert"]
    assert [(r.a_no, r.b_no, r.b) for r in inserted] == [(None, 7, "            time.sleep(2 ** attempt)")]
    assert rows[-1].tag == "gap" and rows[-1].a == "⋯ 3 unchanged lines"
    a, b = "return http.get(url, timeout=10)", "return http.get(url, timeout=30)"
    sa, sb = changed_spans(a, b)
    assert [a[x:y] for x, y in sa] == ["10"] and [b[x:y] for x, y in sb] == ["30"]
    assert side_rows("same", "same") == []


def test_pretty_shows_a_string_with_lines_as_its_lines() -> None:
    text = pretty({"code": "a\n  b\n", "n": [1, "x\ny"], "s": "one line"})
    assert text.splitlines() == ["{", '  "code": |', "    a", "      b", "    ", '  "n": [', "    1,", "    |", "      x",
                                 "      y", "  ],", '  "s": "one line"', "}"]


def _diff_snapshot(snap_compare, tmp_path: Path, size: tuple[int, int], keys: tuple[str, ...] = ()) -> bool:  # type: ignore[no-untyped-def]
    run = make_diff_run(tmp_path)

    async def before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        diff = await open_diff(pilot)
        await pilot.press(*keys)
        await until(pilot, lambda: diff.side_shown == (size[0] >= 120 or "L" in keys), what="the layout")
        pilot.app.clear_notifications()  # "marked #0": a toast whose time on screen depends on the machine's speed
        await pilot.pause()

    return bool(snap_compare(make_app(run, settings_path=tmp_path / "s.json"), terminal_size=size, run_before=before))


def test_diff_200x50_side_by_side(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert _diff_snapshot(snap_compare, tmp_path, (200, 50))


def test_diff_80x24_stacked(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert _diff_snapshot(snap_compare, tmp_path, (80, 24))


def test_diff_80x24_side_by_side(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert _diff_snapshot(snap_compare, tmp_path, (80, 24), ("L",))


def test_a_huge_diff_side_by_side_says_what_it_left_to_the_stacked_view() -> None:
    from supervisor.tui.diff_text import SIDE_ROWS_MAX, side_by_side
    from supervisor.views.value_diff import value_changes

    n = SIDE_ROWS_MAX  # two rows a change: half of them drawn
    changes = value_changes({f"k{i}": i for i in range(n)}, {f"k{i}": -i for i in range(1, n + 1)} | {"k0": 0})
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(side_by_side(changes, "A", "B"))
    text = out.getvalue()
    drawn = text.count("~ /k") // 2
    assert drawn == SIDE_ROWS_MAX // 2 and f"… {len(changes) - drawn} more changes: L shows them all stacked" in text
