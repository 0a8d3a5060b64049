"""The dashboard's first frame: the whole first screen at once (not a frame per widget as they come), and a status
socket that does not answer does not hold it."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from supervisor.core import rundir
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane

from .conftest import until

SIZE = (120, 36)


def _at_first_frame(app: Any, seen: dict[str, Any]) -> None:
    """Record what the first frame showed, when it is drawn (``after_first_frame`` callbacks run then)."""

    def drawn() -> None:
        d = app.screen
        assert isinstance(d, DashboardScreen)
        tl = d.timeline
        seen.update(
            drawn=not d.holding, status=d.status.state, record=d.query_one("#record-pane", JsonPane).text,
            cursor=tl.cursor, rows=d.model.rows, top=int(tl.scroll_y), height=tl.scrollable_content_region.height,
            hidden_mounted=d._hidden_mounted,
        )

    app.after_first_frame(drawn)


async def test_the_first_frame_is_the_whole_first_screen(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    seen: dict[str, Any] = {}
    _at_first_frame(app, seen)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: seen, what="the first frame")
    assert seen["drawn"] and seen["status"] == "succeeded"  # the status worker's answer, not "unknown"
    assert '"event": "succeeded"' in seen["record"]  # the record pane shows the selected row (the last event)
    # the end of the run on screen, following (not the top, then the end a frame later)
    assert seen["cursor"] == seen["rows"] - 1 and seen["top"] <= seen["cursor"] < seen["top"] + seen["height"]
    assert not seen["hidden_mounted"]  # the hidden tabs' panes and the prompt come after it


async def test_a_status_socket_that_does_not_answer_does_not_hold_the_first_frame(rolled_back_run: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a supervisor that accepts nothing and never answers
    sock.bind(str(rolled_back_run / rundir.CONTROL_SOCK))
    sock.listen(1)
    try:
        app = make_app(rolled_back_run)
        seen: dict[str, Any] = {}
        _at_first_frame(app, seen)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: seen, what="the first frame")
            # drawn without the status (its request waits 1 s for an answer), then the status from the files
            assert seen["drawn"] and seen["status"] == "unknown" and '"event": "succeeded"' in seen["record"]
            d = app.screen
            assert isinstance(d, DashboardScreen)
            await until(pilot, lambda: d.status.state != "unknown", what="the status from the files")
    finally:
        sock.close()
