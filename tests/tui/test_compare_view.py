"""The compare view (issue 24): two runs aligned row by row, ``]``/``[`` between differences, the selected step's
inputs and outputs side by side; opened by ``tui RUN_A --compare RUN_B`` and from the runs list (``m``, ``m``, ``c``).

The runs (tests/tui/data/compare_a, compare_b) are ``tests/integration/nested_agent.py``'s: A crashed inside round 1's
task and resumed; B calls each task's second tool ``tool2``.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from supervisor.tui.app import make_app
from supervisor.tui.compare_screen import CompareScreen, detail_text

from .conftest import until

DATA = Path(__file__).parent / "data"


def _copies(tmp: Path) -> tuple[Path, Path]:
    for name in ("compare_a", "compare_b"):
        shutil.copytree(DATA / name, tmp / name)
    return tmp / "compare_a", tmp / "compare_b"


def _plain(renderable: object) -> str:
    console = Console(width=140, file=io.StringIO(), color_system=None)
    console.print(renderable)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return str(out)


def _loaded(pilot: Pilot) -> bool:
    s = pilot.app.screen
    return isinstance(s, CompareScreen) and s.comparison is not None


@pytest.mark.timeout(60)
async def test_rows_jumps_and_the_side_by_side_detail(tmp_path: Path) -> None:
    a, b = _copies(tmp_path)
    app = make_app(a, compare=b, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: _loaded(pilot), what="the comparison")
        s: CompareScreen = app.screen  # type: ignore[assignment]
        table = s.query_one(DataTable)
        assert table.row_count == 18
        first = s.selected()
        assert first is not None and (first.name, first.verdict) == ("task > tool2", "only in B")  # selected at once
        title = str(s.query_one("#compare-title", Static).render())
        assert "first divergence: 'task > tool2' (only in B)" in title and "2 attempts" in title
        await pilot.press("right_square_bracket")
        r = s.selected()
        assert r is not None and r.verdict == "inputs differ" and (r.a and r.a.pos, r.b and r.b.pos) == (3, 4)
        detail = _plain(detail_text(r))
        assert "inputs, A → B:" in detail and "output, A → B:" in detail and "~ /args/1: 1 → 2" in detail
        await pilot.press("right_square_bracket", "right_square_bracket")
        r = s.selected()
        assert r is not None and r.verdict == "only in B" and r.b is not None and r.b.pos == 11  # past 6 same rows
        await pilot.press("left_square_bracket")
        r = s.selected()
        assert r is not None and r.verdict == "only in A"
        await pilot.press("k")
        r = s.selected()
        assert r is not None and r.verdict == "inputs differ"
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")


@pytest.mark.timeout(60)
async def test_the_runs_list_compares_two_marked_runs(tmp_path: Path) -> None:
    _copies(tmp_path)
    app = make_app(tmp_path, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.screen.query(DataTable) and app.screen.query_one(DataTable).row_count == 2,
                    what="the runs list")
        await pilot.press("c")  # nothing marked: says how
        await pilot.press("m", "j", "m", "c")
        await until(pilot, lambda: _loaded(pilot), what="the compare view")
        s: CompareScreen = app.screen  # type: ignore[assignment]
        assert {s.run_a.name, s.run_b.name} == {"compare_a", "compare_b"}
        await pilot.press("escape")  # back to the list, not out of the app
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen), what="the runs list again")
        assert app.is_running


def test_compare_view_snapshot(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = _copies(tmp_path)

    async def before(pilot: Pilot) -> None:
        await until(pilot, lambda: _loaded(pilot), what="the comparison")
        await pilot.press("right_square_bracket")

    assert snap_compare(make_app(a, compare=b, settings_path=tmp_path / "settings.json"), terminal_size=(120, 34),
                        run_before=before)
