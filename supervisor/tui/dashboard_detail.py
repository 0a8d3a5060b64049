"""The dashboard's detail panes: the record (or supervisor row) at the cursor, and the state as of it (a worker)."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.message import Message
from textual.worker import get_current_worker

from ..errors import SupervisorError
from .dashboard_state import DashboardState
from .detail import JsonPane
from .timeline import describe_event

STATE_DELAY = 0.05
"""Seconds the cursor rests before the state pane is recomputed."""


# a plain class, not a dataclass: each dataclass costs ~0.3 ms of the start
class StateComputed(Message):
    """The state pane's value at a seq, computed in a worker (``error``: why there is none)."""

    def __init__(self, value: Any, error: str, heading: str) -> None:
        self.value = value
        self.error = error
        self.heading = heading
        super().__init__()


class DetailPanes(DashboardState):
    """The record pane and the state pane follow the cursor."""

    def update_detail(self) -> None:
        kind, i = self.timeline.selected()
        pane = self.query_one("#record-pane", JsonPane)
        if kind == "event":
            ev = self.model.events[i].data
            pane.show_value(ev, describe_event(ev))
        elif kind == "call":
            call = self.model.calls[i]
            rec = call.data
            cseq = rec.get("seq")
            served = self.model.served.get(cseq, []) if isinstance(cseq, int) else []
            pane.show_call(rec, served, f"model call c{cseq} (llm.jsonl line {call.order + 1}, recorded by the proxy)")
        elif kind == "rec":
            ent = self.model.record(i)
            label = "abandoned branch (a later rollback cut it off)" if self.model.is_abandoned(i) else ""
            pane.show_entry(ent, label)
        else:
            pane.show_text("empty run: no records yet", "dim")
        self.schedule_state()
        self.schedule_files()

    def schedule_state(self) -> None:
        """Compute the state pane's value once the cursor rests a moment: holding j, or a burst in
        follow mode, starts one computation instead of hundreds."""
        if self._state_timer is not None:
            self._state_timer.stop()
        self.state_shown = None
        self._state_timer = self.set_timer(STATE_DELAY, lambda: self.compute_state(self.timeline.selected_seq()))

    @work(thread=True, exclusive=True, group="state", exit_on_error=False)
    def compute_state(self, seq: int | None) -> None:
        """The state as of ``seq`` (a thread: it may replay many patches); posts ``StateComputed``."""
        worker = get_current_worker()
        if seq is None:
            value: Any = None
            err = "no records"
        else:
            try:
                value, err = self.model.state_at(seq), ""
            except (ValueError, OSError, SupervisorError, KeyError, IndexError, TypeError) as e:
                value, err = None, f"state at #{seq} unavailable: {e}"
        if worker.is_cancelled:
            return
        self.post_message(StateComputed(value, err, f"state as of #{seq}" + (" (now)" if self.replay else "")))

    def on_state_computed(self, message: StateComputed) -> None:
        pane: JsonPane = self._pane("#state-pane")
        if message.error:
            self.state_shown = None
            pane.show_text(message.error, "yellow")
        else:
            self.state_shown = (message.value, message.heading)
            pane.show_value(message.value, message.heading)
