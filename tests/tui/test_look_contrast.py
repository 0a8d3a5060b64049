"""Text contrast of the dashboard's themes: every text colour on its background is at least 4.5:1 (WCAG AA).

The screen is rendered as the terminal gets it (the compositor's segments, true colour) and every cell
that shows a character is checked: its foreground against its background, with the WCAG 2 formula.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.segment import Segment
from textual.app import App
from textual.pilot import Pilot

from supervisor.tui.app import make_app
from supervisor.tui.settings import DARK, LIGHT

from .conftest import settled, until

AA = 4.5


def _channel(c: int) -> float:
    """sRGB channel (0-255) to linear light, as WCAG 2.x defines it."""
    s = c / 255
    return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4


def luminance(rgb: tuple[int, int, int]) -> float:
    r, g, b = (_channel(x) for x in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg: tuple[int, int, int], bg: tuple[int, int, int]) -> float:
    """(L1 + 0.05) / (L2 + 0.05), L1 the lighter."""
    a, b = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def test_formula_against_known_values() -> None:
    assert contrast((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    assert contrast((255, 255, 255), (255, 255, 255)) == pytest.approx(1.0)
    assert contrast((0x76, 0x76, 0x76), (255, 255, 255)) == pytest.approx(4.54, abs=0.01)  # the classic AA grey


_NOT_TEXT = {chr(c) for c in range(0x2500, 0x25A0)} | {" ", "▸"} | {chr(c) for c in range(0x2800, 0x2900)}
"""Box drawing, blocks (borders, scrollbars, tab underlines) and blanks: not text."""


def low_contrast(app: App[Any]) -> list[str]:
    """Every (text, foreground, background) on screen under AA, described; the screen as the terminal gets it."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    lines = Segment.split_and_crop_lines(console.render(update), app.size.width, pad=False)
    # a modal (the help, a confirmation): its own box only; the screen behind it is faded on purpose
    box = app.screen.children[0].region if app.screen.is_modal and app.screen.children else app.screen.region
    bad: dict[tuple[Any, ...], str] = {}
    cells = ((y, x, seg) for y, line in enumerate(lines) for x, seg in _with_x(line))
    for y, x, seg in cells:
        if seg.control or seg.style is None or not box.contains(x, y):
            continue
        text = "".join(ch for ch in seg.text if ch not in _NOT_TEXT and ch != "\n")
        if not text.strip():
            continue
        st = seg.style
        assert not st.dim, f"dim text {seg.text!r}: its colour depends on the terminal"
        assert st.color is not None and st.bgcolor is not None, f"{seg.text!r} takes the terminal's default colours"
        fg, bg = st.color.get_truecolor(), st.bgcolor.get_truecolor()
        r = contrast(tuple(fg), tuple(bg))  # type: ignore[arg-type]
        if r < AA:
            bad.setdefault((fg, bg), f"{r:.2f}:1 {fg.hex} on {bg.hex}: {seg.text.strip()[:40]!r}")
    return list(bad.values())


def _with_x(line: list[Segment]) -> list[tuple[int, Segment]]:
    out, x = [], 0
    for seg in line:
        out.append((x, seg))
        x += seg.cell_length
    return out


async def _check(app: App[Any], pilot: Pilot, what: str, problems: list[str]) -> None:
    await pilot.pause(0.05)
    problems += [f"{app.theme}, {what}: {p}" for p in low_contrast(app)]


@pytest.mark.parametrize("theme", [DARK, LIGHT])
async def test_every_text_colour_meets_aa(theme: str, rolled_back_run: Path, tmp_path: Path) -> None:
    """The dashboard on a run with a crash, failed steps, an abandoned branch and checkpoints: cursor on a step,
    on a supervisor row, on a failed step, a search match, the state tab, the help screen, replay mode."""
    problems: list[str] = []
    app = make_app(rolled_back_run, settings_path=tmp_path / "settings.json")
    app.theme = theme
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: settled(app), what="the dashboard to settle")
        await _check(app, pilot, "last row", problems)
        await pilot.press("exclamation_mark")
        await _check(app, pilot, "first failed step", problems)
        await pilot.press("home", "j", "j", "j", "j", "j")
        await _check(app, pilot, "rows near the top", problems)
        await pilot.press("slash", *"summarize", "enter")
        await until(pilot, lambda: app.screen.timeline.matches, what="the search")  # type: ignore[attr-defined]
        await _check(app, pilot, "search matches", problems)
        await pilot.press("s")
        await _check(app, pilot, "state tab", problems)
        await pilot.press("question_mark")
        await _check(app, pilot, "help", problems)
    app = make_app(rolled_back_run, replay=True, settings_path=tmp_path / "settings.json")
    app.theme = theme
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: settled(app), what="the replay screen to settle")
        await pilot.press("right_square_bracket", "j")
        await _check(app, pilot, "replay (future rows)", problems)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("theme", [DARK, LIGHT])
async def test_model_and_tool_rows_meet_aa(theme: str, tmp_path: Path) -> None:
    """Model and tool rows, the token and cost columns, the run's totals, a traceback shown as code."""
    import shutil

    from supervisor.tui.status_bar import StatusBar

    from .conftest import DATA

    run = tmp_path / "model_run"
    shutil.copytree(DATA / "model_run", run)
    problems: list[str] = []
    app = make_app(run, settings_path=tmp_path / "settings.json")
    app.theme = theme
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: settled(app), what="the dashboard to settle")
        bar = app.screen.query_one(StatusBar)
        await until(pilot, lambda: bar.usage is not None and bar.usage.cost is not None, what="the run's totals")
        await _check(app, pilot, "model run", problems)
        await pilot.press("colon", "9", "enter")
        await until(pilot, lambda: settled(app), what="the failed tool call")
        await _check(app, pilot, "traceback", problems)
    assert not problems, "\n".join(problems)
