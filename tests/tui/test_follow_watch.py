"""Live follow: an appended record reaches the rows through the file watch, and stays in view as the run grows."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.core.journal_writer import JournalWriter
from supervisor.tui import dashboard
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen

from .conftest import caught_up, until

SIZE = (120, 36)


def _in_view(d: DashboardScreen) -> bool:
    """The selected row is among those drawn."""
    t = d.timeline
    top, h = int(t.scroll_y), t.scrollable_content_region.height
    return top <= t.cursor < top + h


@pytest.mark.timeout(30)
async def test_appended_record_arrives_by_the_file_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the reading worker's safety net an hour long, only the watcher wakes it: each record still comes."""
    monkeypatch.setattr(dashboard, "SAFETY_NET_S", 3600.0)
    run = tmp_path / "live"
    w = JournalWriter(run, durable=False)  # holds the journal lock: a running agent
    try:
        w.append({"kind": "step", "step": "s0", "output": 0})
        app = make_app(run)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: caught_up(app), what="scan")
            d: DashboardScreen = app.screen  # type: ignore[assignment]
            for i in range(1, 4):
                w.append({"kind": "step", "step": f"s{i}", "output": i})
                await until(pilot, lambda i=i: d.model.count == i + 1, 10, what=f"record {i} by the watch")  # type: ignore[misc]
                assert d.timeline.selected() == ("rec", i)
    finally:
        w.close()


@pytest.mark.timeout(60)
async def test_follow_keeps_the_new_row_in_view_when_the_rows_first_overflow(tmp_path: Path) -> None:
    """A run that starts short: the record that first overflows the timeline is drawn at once (it was selected but
    left under the bottom edge until the next record came)."""
    run = tmp_path / "grow"
    w = JournalWriter(run, durable=False)
    try:
        w.append({"kind": "step", "step": "s0", "output": 0})
        app = make_app(run)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: caught_up(app), what="scan")
            d: DashboardScreen = app.screen  # type: ignore[assignment]
            h = d.timeline.scrollable_content_region.height
            assert h > 0
            for i in range(1, h + 3):
                w.append({"kind": "step", "step": f"s{i}", "output": i})
                await until(pilot, lambda i=i: d.model.count == i + 1, 10, what=f"record {i}")  # type: ignore[misc]
                await pilot.pause()
                assert d.timeline.selected() == ("rec", i)
                assert _in_view(d), (f"record {i}: row {d.timeline.cursor} not in view "
                                     f"(top {d.timeline.scroll_y}, height {d.timeline.scrollable_content_region.height})")
    finally:
        w.close()
