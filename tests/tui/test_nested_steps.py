"""Nested steps on the dashboard: a nested step's row indented under its parent's (which stays where the parent
began), ``z`` folding a parent's rows into it, and the same while a live run appends nested records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from supervisor.core.journal_writer import JournalWriter
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.key_footer import KeyFooter

from ..nested_runs import sample
from .conftest import caught_up, until

SIZE = (120, 30)


def _rows(d: DashboardScreen) -> list[str]:
    """The text of every row (the run fits on the screen)."""
    tl = d.timeline
    assert d.model.rows <= tl.scrollable_content_region.height
    return [tl.render_line(y).text.rstrip() for y in range(d.model.rows)]


def _seqs(d: DashboardScreen) -> list[int]:
    return [int(r.split()[0].lstrip("▸●")) for r in _rows(d)]


def _fold_key(d: DashboardScreen) -> bool:
    shown = KeyFooter.keys(d.query_one(KeyFooter))  # the footer's keys (a method, not a mapping's)
    return any(b.key == "z" for b, _, _ in shown)


def _tree_read(d: DashboardScreen, moved: int) -> bool:
    t = d.model.tree
    return caught_up(d.app) and t is not None and len(t.moved) >= moved


@pytest.mark.timeout(30)
async def test_nested_rows_are_indented_under_their_parent_and_fold(tmp_path: Path) -> None:
    run = sample(tmp_path / "run")
    app = make_app(run, replay=True)
    async with app.run_test(size=SIZE) as pilot:
        d: Any = app.screen
        await until(pilot, lambda: _tree_read(d, 2), 10, what="the tree")
        rows = _rows(d)
        # a finished parent's row is where it began and shows its step record; children indented under it
        assert _seqs(d) == [0, 8, 5, 4, 7, 10]
        assert "step       ▾ outer " in rows[1] and rows[1].endswith("✓ 14")
        assert "step       └ ▾ inner " in rows[2] and rows[2].endswith("✓ 6")
        assert "step         └ deep " in rows[3]
        assert "step       └ inner " in rows[4] and "step       flat " in rows[5]
        assert _fold_key(d)
        tl = d.timeline
        tl.move_to(1)
        await pilot.press("z")
        assert _seqs(d) == [0, 8, 10] and tl.selected() == ("rec", 8)
        assert "▸ outer" in _rows(d)[1] and "+3 rows folded" in _rows(d)[1]
        await pilot.press("z")
        assert _seqs(d) == [0, 8, 5, 4, 7, 10]
        tl.move_to(3)  # deep's row: z folds its parent, inner
        await pilot.press("z")
        assert _seqs(d) == [0, 8, 5, 7, 10] and tl.selected() == ("rec", 5) and "+1 row folded" in _rows(d)[2]
        tl.move_to_seq(4)  # going to a folded record unfolds it
        assert _seqs(d) == [0, 8, 5, 4, 7, 10] and tl.selected() == ("rec", 4)
        tl.move_to(1)
        await pilot.press("z", "a")  # every begin row: journal order, the fold kept
        assert _seqs(d) == [0, 1, 8, 9, 10]
        assert "begin      ▸ outer" in _rows(d)[1] and "+6 rows folded" in _rows(d)[1]
        await pilot.press("a")
        d.apply_filter("kind:step")  # a filter keeps the fold (rows in journal order)
        await until(pilot, lambda: d.model.filter is not None and not d.filter_pass.busy, 10, what="the filter")
        assert _seqs(d) == [8, 10]
        await pilot.press("z")
        assert _seqs(d) == [4, 5, 7, 8, 10]


@pytest.mark.timeout(30)
async def test_a_run_without_nesting_has_no_fold_key(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run, replay=True)
    async with app.run_test(size=SIZE) as pilot:
        d: Any = app.screen
        await until(pilot, lambda: caught_up(app), 10, what="scan")
        before = d.model.rows
        await pilot.press("z")
        assert d.model.tree is None and not _fold_key(d) and d.model.rows == before


@pytest.mark.timeout(30)
async def test_live_nested_records_while_following(tmp_path: Path) -> None:
    """A live run: the parent's begin row runs with its children's rows under it, stays there when it finishes;
    a folded parent hides the children that come after the fold and counts them; follow keeps the last row."""
    run = tmp_path / "live"
    w = JournalWriter(run, durable=False)
    try:
        w.append({"kind": "start", "attempt": 1, "pid": 1, "resume": False})
        outer = w.append({"kind": "begin", "step": "outer", "pos": 1, "attempt": 1, "inputs": {"args": []}})["id"]
        app = make_app(run)
        async with app.run_test(size=SIZE) as pilot:
            d: Any = app.screen
            await until(pilot, lambda: caught_up(app), 10, what="scan")
            tl = d.timeline

            def nest(name: str, pos: int, parent: str) -> str:
                rid = w.append({"kind": "begin", "step": name, "pos": pos, "attempt": 1, "parent": parent})["id"]
                w.append({"kind": "step", "step": name, "pos": pos, "attempt": 1, "parent": parent, "output": pos})
                return str(rid)

            nest("inner", 2, outer)
            await until(pilot, lambda: d.model.tree is not None and d.model.tree.parents and d.model.count == 4, 10,
                        what="the first child")
            await until(pilot, lambda: len(_rows(d)) == 3 and "└ inner" in _rows(d)[2], 10, what="its row")
            assert "▾ outer" in _rows(d)[1] and "running" in _rows(d)[1] and tl.follow and tl.cursor == 2
            assert _fold_key(d)
            w.append({"kind": "step", "step": "outer", "pos": 1, "attempt": 1, "output": "done"})
            await until(pilot, lambda: _tree_read(d, 1) and d.model.count == 5, 10, what="the parent's step")
            assert _seqs(d) == [0, 4, 3] and _rows(d)[1].endswith("✓ done") and tl.cursor == 2
            outer2 = w.append({"kind": "begin", "step": "outer2", "pos": 3, "attempt": 1})["id"]
            nest("c", 4, outer2)
            await until(pilot, lambda: d.model.count == 8 and _seqs(d) == [0, 4, 3, 5, 7], 10, what="a second parent")
            tl.move_to(4)
            await pilot.press("z")  # on its child: folds outer2
            assert _seqs(d) == [0, 4, 3, 5] and "+1 row folded" in _rows(d)[3]
            tl.follow = True
            nest("c", 5, outer2)
            await until(pilot, lambda: d.model.count == 10 and "+2 rows folded" in _rows(d)[3], 10, what="a folded child")
            assert _seqs(d) == [0, 4, 3, 5]
    finally:
        w.close()
