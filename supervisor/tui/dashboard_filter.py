"""The dashboard's row filter (``&``, Esc): a forward pass over the journal in a worker, as records come."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import work
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker

from ..views.scan import SeqBits
from .dashboard_state import DashboardState

if TYPE_CHECKING:
    # the filter module loads when a filter is first applied
    from ..views.filters import FilterPass


class FilterFound(Message):
    """A filter pass read the journal up to ``upto``: the seqs that pass (``first``: its whole first pass, as the
    bitmap the timeline keeps, built in the worker: 500,000 matches took 64 ms of the UI thread).

    A plain class, not a dataclass: one costs ~0.3 ms of the dashboard's start."""

    def __init__(self, run: FilterPass, seqs: list[int] | SeqBits, upto: int, first: bool) -> None:
        self.run = run
        self.seqs = seqs
        self.upto = upto
        self.first = first
        super().__init__()


class FilterKeys(DashboardState):
    """``&`` filters the rows, Esc clears the filter."""

    # ------------------------------------------------------------------ filter
    def action_filter(self) -> None:
        from ..views.filters import SYNTAX

        current = self.filter_pass.flt.text if self.filter_pass is not None else ""
        self.prompt.open("filter", f"filter rows: {SYNTAX}; Enter applies (empty: clears), Esc cancels",
                         current, allow_empty=True)

    def apply_filter(self, text: str) -> None:
        """Parse ``text`` and start the filter's first pass (a worker); the rows change when it ends."""
        from ..views.filters import new_pass, parse_filter

        try:
            flt = parse_filter(text)
        except ValueError as e:
            self.notify(str(e), severity="error", timeout=8)
            return
        if self.filter_pass is not None:
            self.filter_pass.cancelled = True
        run = new_pass(flt, self.path)
        self.filter_pass = run
        self._show_filter_bar("filtering…")
        self.refresh_bindings()
        run.busy = True
        self.run_filter(run, True)

    def _filter_more(self) -> None:
        """Read what came since the filter's last pass (one worker at a time; a busy one reads again)."""
        run = self.filter_pass
        if run is None:
            return
        with self._filter_lock:
            if run.busy:
                run.again = True  # the running pass reads again before it ends
                return
            run.busy = True
        self.run_filter(run, False)

    @work(thread=True, group="filter", exit_on_error=False)
    def run_filter(self, run: FilterPass, first: bool) -> None:
        """Test the journal's lines against the filter from where it stands (a thread: a million lines take seconds)."""
        worker = get_current_worker()
        try:
            while True:
                seqs, upto = run.advance(lambda: worker.is_cancelled)
                if run.cancelled or worker.is_cancelled:
                    return
                self.post_message(FilterFound(run, SeqBits(seqs) if first else seqs, upto, first))
                first = False
                with self._filter_lock:
                    if not run.again:
                        run.busy = False
                        return
                    run.again = False
        finally:
            with self._filter_lock:
                run.busy = False

    def on_filter_found(self, message: FilterFound) -> None:
        """Show the rows a filter pass found (the first pass: the filter's rows replace every row)."""
        if message.run is not self.filter_pass:
            return  # a filter since replaced or cleared
        tl = self.timeline
        kind, i = tl.selected()
        seq = tl.selected_seq()
        if message.first:
            self.model.set_filter(message.run.flt, message.seqs)
            if tl.follow or seq is None:
                tl.rows_changed()  # following: the last row that passes
            else:  # the selected row, else the next one that passes
                tl.virtual_size = tl.virtual_size.with_height(self.model.rows)
                row = (self.model.row_of_event(i) if kind == "event" else self.model.row_of_call(i) if kind == "call"
                       else self.model.row_of_seq(seq))
                tl.move_to(row if row is not None else self.model.row_of_seq(seq))
            self.notify(f"{self.model.rows} row{'s' if self.model.rows != 1 else ''} pass the filter", timeout=3)
        else:
            self.model.add_filtered(cast(list[int], message.seqs))
            tl.rows_changed()
        self._show_filter_bar()
        self.update_detail()
        self._keys_changed()

    def _show_filter_bar(self, extra: str = "") -> None:
        bar: Static = self._pane("#filter-bar")  # mounted after the first frame
        run = self.filter_pass
        if run is None:
            bar.remove_class("-active")
            bar.update("")
            return
        n = self.model.rows
        rows = f"{n} row{'s' if n != 1 else ''}" if self.model.filter is run.flt else ""
        parts = [f"filter: {run.flt.describe()}", rows, extra, "& edits, Esc clears"]
        bar.update(Text(" · ".join(p for p in parts if p)))
        bar.add_class("-active")

    def action_clear_filter(self) -> None:
        run = self.filter_pass
        if run is None:
            return
        run.cancelled = True
        self.filter_pass = None
        tl = self.timeline
        kind, i = tl.selected()
        seq = tl.selected_seq()
        had = self.model.filter is not None
        self.model.clear_filter()
        if had:  # the cursor keeps its row; follow only if that is the last one
            tl.virtual_size = tl.virtual_size.with_height(self.model.rows)
            if kind in ("event", "call"):
                row = self.model.row_of_event(i) if kind == "event" else self.model.row_of_call(i)
                tl.move_to(row if row is not None else 0)
            elif seq is not None:
                tl.move_to(self.model.row_of_seq(seq))
            tl.refresh()
        self._show_filter_bar()
        self.refresh_bindings()
        self.notify("filter cleared: every row shows", timeout=2)
