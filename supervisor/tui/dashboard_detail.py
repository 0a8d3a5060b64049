"""The dashboard's detail panes: the record (or supervisor row) at the cursor, and the state as of it (a worker)."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.message import Message
from textual.worker import get_current_worker

from ..errors import SupervisorError
from . import settings as settings_mod
from .dashboard_state import DashboardState
from .detail import JsonPane
from .timeline import describe_event

STATE_DELAY = 0.05
"""Seconds the cursor rests before the state pane is recomputed."""
RETRY_LOOKBACK = 64
"""How many records before a tool call are looked at for its earlier failed tries."""


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
            pane.show_entry(ent, label, self.earlier_tries(i, ent))
        else:
            pane.show_text("empty run: no records yet", "dim")
        self.schedule_state()
        self.schedule_files()

    def earlier_tries(self, seq: int, ent: Any) -> list[dict[str, Any]]:
        """A tool call's earlier failed tries: the records of the same call (name, occurrence, parent) that failed,
        among the ``RETRY_LOOKBACK`` records before it (a retry follows its failure closely)."""
        call = ent.get("call") if isinstance(ent, dict) else None
        if not isinstance(call, dict) or call.get("kind") != "tool" or "step" not in ent:
            return []
        self.model.fetch(seq - RETRY_LOOKBACK, seq)
        same = (ent.get("step"), ent.get("k", 0), ent.get("parent"))
        out = []
        for s in range(max(0, seq - RETRY_LOOKBACK), seq):
            r = self.model.entry(s)
            if (isinstance(r, dict) and r.get("error") is not None and r.get("kind", "step") == "step"
                    and (r.get("step"), r.get("k", 0), r.get("parent")) == same):
                out.append(r)
        return out

    def action_toggle_wrap(self) -> None:
        """Wrap long values in every pane, or let them run off to the right (the panes scroll sideways); kept in
        settings.json."""
        settings = getattr(self.app, "settings", None)
        wrap = not (settings.wrap if settings is not None else JsonPane.wrap)
        if settings is not None:
            settings.wrap = wrap
            problem = settings_mod.save(settings, getattr(self.app, "settings_path", None))
            if problem:
                self.notify(problem, severity="warning")
        self.apply_wrap(wrap)
        self.notify("long values wrap" if wrap else "long values run off to the right: Left/Right scroll the focused pane",
                    timeout=2)

    def apply_wrap(self, wrap: bool) -> None:
        for pane in self.query(JsonPane):
            pane.set_wrap(wrap)
        for log in self.query("#agent-log"):
            set_wrap = getattr(log, "set_wrap", None)
            if set_wrap is not None:
                set_wrap(wrap)

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
