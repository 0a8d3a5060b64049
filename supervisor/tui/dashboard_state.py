"""What the dashboard's key groups (mixins of ``DashboardScreen``, a module each) take from the screen.

The groups: ``dashboard_navigation`` (jumps, search, go to), ``dashboard_detail`` (the record and state panes),
``dashboard_files`` (the Files tab),
``dashboard_filter`` (``&``, Esc), ``dashboard_rows`` (bookmarks, copy, mark and diff), ``dashboard_export``
(``w``), ``dashboard_control`` (rollback, fork, restart, stop, start again) and ``dashboard_pauses`` (the open
pauses, their banner, ``p`` ``x`` ``P``). The bindings stay in
``DashboardScreen.BINDINGS`` (the palette lists that list); the state is made in its ``__init__``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.timer import Timer

    from ..core.records import Record
    from ..core.status import RunStatus
    from ..views.filters import FilterPass
    from ..views.timeline import TimelineModel
    from .bookmarks import Bookmarks
    from .prompt import Prompt
    from .timeline import TimelineView

    _Base = Screen[None]
else:
    _Base = object


class DashboardState(_Base):
    """What the mixins take from the dashboard (made in ``DashboardScreen.__init__``), and what they call of one
    another (declared for the type checker only: at run time each name is the mixin's or the screen's)."""

    model: TimelineModel
    path: Path
    run_dir: Path
    run_id: str
    meta: dict[str, Any]
    replay: bool
    status: RunStatus
    bookmarks: Bookmarks
    filter_pass: FilterPass | None
    _filter_lock: threading.Lock
    state_shown: tuple[Any, str] | None
    _start_proc: Any
    search_query: str
    search_hits: list[int]
    _state_timer: Timer | None
    paused: dict[tuple[str | None, int], Record]
    """The open pauses by (source, seq), in the order they were read (``dashboard_pauses``)."""
    _pauses_closed: set[tuple[str | None, int]]
    _pauses_told: set[tuple[str | None, int]]
    _pauses_given: dict[tuple[str | None, int], str]

    if TYPE_CHECKING:
        @property
        def timeline(self) -> TimelineView: ...
        @property
        def prompt(self) -> Prompt: ...
        def _pane(self, selector: str) -> Any: ...
        def files_changed(self) -> None: ...
        def poll_status(self) -> None: ...
        def refresh_status(self) -> None: ...
        def _keys_changed(self) -> None: ...
        def update_detail(self) -> None: ...
        def schedule_files(self) -> None: ...
        def apply_filter(self, text: str) -> None: ...
        def action_clear_filter(self) -> None: ...
        def export_to(self, text: str) -> None: ...
        def _startable(self) -> bool: ...
        def _bare(self) -> bool: ...
        def _seq_row(self, seqs: list[int], row: int, forward: bool, limit: int = 100_000) -> int | None: ...
