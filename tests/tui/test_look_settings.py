"""Settings (theme, layout, time format) kept in the user's config directory, and the keys that change them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor.tui import settings as settings_mod
from supervisor.tui.app import THEMES, make_app
from supervisor.tui.settings import DARK, LIGHT, Settings
from supervisor.tui.timeline import TimelineView, _relative, _time

from .conftest import caught_up, until


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def test_path_follows_xdg(config_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert settings_mod.config_path() == config_home / "agent-supervisor" / "settings.json"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # not absolute: ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path))
    assert settings_mod.config_path() == tmp_path / ".config" / "agent-supervisor" / "settings.json"


def test_round_trip_and_bad_files(config_home: Path) -> None:
    path = settings_mod.config_path()
    assert settings_mod.load() == Settings()  # no file: the defaults
    assert settings_mod.save(Settings(theme=LIGHT, layout="side", time="relative")) == ""
    assert settings_mod.load() == Settings(theme=LIGHT, layout="side", time="relative")
    assert json.loads(path.read_text())["layout"] == "side"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    path.write_text('{"layout": "diagonal", "time": "relative", "extra": 1}')
    assert settings_mod.load() == Settings(time="relative")  # a bad value keeps its default, the rest is taken
    assert settings_mod.save(Settings(wrap=False)) == "" and settings_mod.load() == Settings(wrap=False)
    path.write_text('{"wrap": "no"}')
    assert settings_mod.load() == Settings()  # wrap is a boolean or the default (wrapped)
    path.write_text("not json")
    assert settings_mod.load() == Settings()
    path.parent.chmod(0o500)
    try:
        problem = settings_mod.save(Settings(theme=LIGHT), path / "sub" / "settings.json")
        assert problem.startswith("settings not saved to ") and "sub" in problem
    finally:
        path.parent.chmod(0o700)


def test_time_cells() -> None:
    assert _time("2026-11-29T10:00:00Z") == "10:00:00"  # no milliseconds: not cut to "2026-11-29T1"
    assert _time("2026-11-29T10:00:00.123456+00:00") == "10:00:00.123"
    assert _time("2026-11-29T10:00:01.5Z") == "10:00:01"  # a short fraction: no half-read digits
    assert _time("yesterday") == "yesterday"
    origin = __import__("datetime").datetime.fromisoformat("2026-11-29T10:00:00+00:00")
    assert _relative("2026-11-29T10:01:02.345Z", origin) == "+01:02.345"
    assert _relative("2026-11-29T12:00:05Z", origin) == "+2:00:05"
    assert _relative("garbage", origin) == "garbage"


async def test_keys_change_and_keep_settings(rolled_back_run: Path, config_home: Path) -> None:
    """T (theme), L (layout) and t (times) act at once, are written to settings.json, and the next start takes them."""
    path = config_home / "agent-supervisor" / "settings.json"
    app = make_app(rolled_back_run)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        tl = app.screen.query_one(TimelineView)
        assert app.theme == DARK and not path.exists()
        first = tl.render_line(0).text
        assert "17.108" in first or "10:00:" in first
        await pilot.press("t")
        assert app.settings.time == "relative"
        await pilot.pause()
        rows = [tl.render_line(y).text for y in range(tl.size.height)]
        assert any(r.startswith("     7 +00:00.228 ") for r in rows), rows  # seq 7 (17.336) is 0.228 s after seq 0 (17.108)
        dark_rows = tl.render_line(0)
        await pilot.press("T")
        assert app.theme == LIGHT
        await pilot.pause()
        # the rows are drawn in the light theme's colours (the timeline's kept styles were taken again)
        light = next(t for t in THEMES if t.name == LIGHT)
        base = tl.render_line(0)
        assert base.text == dark_rows.text and base != dark_rows
        assert {s.style.bgcolor.name for s in base if s.style is not None and s.style.bgcolor} == {light.background}
        await pilot.press("L")  # auto -> side: side by side even at 120 columns
        await pilot.pause()
        assert app.screen.has_class("-wide")
        timeline, panes = app.screen.query_one("#timeline").region, app.screen.query_one("#panes").region
        assert timeline.right <= panes.x and timeline.y == panes.y
        await pilot.press("L")  # side -> stacked
        await pilot.pause()
        assert not app.screen.has_class("-wide")
        assert json.loads(path.read_text()) == {"theme": LIGHT, "layout": "stacked", "time": "relative", "wrap": True}
    app = make_app(rolled_back_run)
    assert (app.theme, app.settings.layout, app.settings.time) == (LIGHT, "stacked", "relative")
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        assert not app.screen.has_class("-wide")  # stacked even at 200 columns: the setting wins over the width


async def test_auto_layout_by_width(rolled_back_run: Path) -> None:
    """By default (auto) the detail goes beside the timeline from 160 columns; at 80x24 the status bar is one line."""
    app = make_app(rolled_back_run)
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        assert app.screen.has_class("-wide")
        timeline, panes = app.screen.query_one("#timeline").region, app.screen.query_one("#panes").region
        assert timeline.right <= panes.x and timeline.height > 40
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.screen.has_class("-wide")
        status = app.screen.query_one("#status")
        assert status.region.height == 1
        text = str(status.render())
        assert len(text) <= 78 and "succeeded" in text and "26" in text and "FOLLOW" not in text, text  # finished
        assert app.screen.query_one("#timeline").region.height >= 10
