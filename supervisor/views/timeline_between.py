"""The rows between the journal's records: supervisor events and the proxy's calls, numbered among the records' rows.

``timeline_events.place`` and ``timeline_calls.place`` say which seq each event or call goes before; this merges
the two into one list in row order (by that seq, then by time, each list's own order kept at equal times) and gives
each its row: the records' row of its seq plus the rows between records before it. With a filter, the same among
the records and the events and calls that pass it. The work is per event or call, never per record.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.events import is_error_event
from .scan import SeqBits
from .timeline_calls import Call
from .timeline_events import Event

if TYPE_CHECKING:
    from .filters import RowFilter

Item = tuple[str, int]
"""``("event", i)`` (into the model's ``events``) or ``("call", j)`` (into its ``calls``)."""


@dataclass(slots=True)
class BetweenRows:
    """The events' and calls' order among the records and their rows, without a filter and with one (``shown_*``)."""

    items: list[Item] = field(default_factory=list)
    """Every event and call, in row order."""
    dirty: bool = False
    """``items`` is out of date: the events or calls changed since they were merged."""
    befores: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    event_rows: list[int] = field(default_factory=list)
    call_rows: list[int] = field(default_factory=list)
    shown: list[Item] = field(default_factory=list)
    """The events and calls that pass the filter, in row order (their ``befores`` and ``rows`` beside them)."""
    shown_befores: list[int] = field(default_factory=list)
    shown_rows: list[int] = field(default_factory=list)
    shown_events: list[int] = field(default_factory=list)
    shown_event_rows: list[int] = field(default_factory=list)
    shown_calls: list[int] = field(default_factory=list)
    shown_call_rows: list[int] = field(default_factory=list)
    shown_row_of: dict[Item, int] = field(default_factory=dict)
    """An event's or call's row among the filtered rows (those the filter shows)."""
    call_pass: dict[int, bool] = field(default_factory=dict)
    """A call's ``order`` -> whether it passes the filter (a call is tested once per filter)."""

    def place(
        self, events: list[Event], calls: list[Call], visible_index: Callable[[int], int],
        flt: RowFilter | None, fvis: SeqBits,
    ) -> None:
        """Give each event and call its row among the records' rows (``visible_index``), and with a filter ``flt``
        among the records that pass it (``fvis``)."""
        if self.dirty:
            self._merge(events, calls)
        items = self.items
        befores = [_before(x, events, calls) for x in items]
        rows = [visible_index(b) + i for i, b in enumerate(befores)]
        self.befores, self.rows = befores, rows
        self.event_rows = [0] * len(events)
        self.call_rows = [0] * len(calls)
        for (kind, k), r in zip(items, rows, strict=True):
            (self.event_rows if kind == "event" else self.call_rows)[k] = r
        if flt is not None:
            self._place_shown(events, calls, flt, fvis)

    def _merge(self, events: list[Event], calls: list[Call]) -> None:
        """Merge events and calls in one list: by the seq they precede, then by time (each list's order kept)."""
        if not calls:
            self.items = [("event", k) for k in range(len(events))]  # placed and ordered by ``place``
        else:
            evs = [(e.before, str(e.data.get("ts") or ""), 0, e.order, k) for k, e in enumerate(events)]
            cls = [(c.before, c.ts, 1, c.order, k) for k, c in enumerate(calls)]
            self.items = [("event" if src == 0 else "call", k) for _, _, src, _, k in sorted(evs + cls)]
        self.dirty = False

    def _place_shown(self, events: list[Event], calls: list[Call], flt: RowFilter, fvis: SeqBits) -> None:
        """The rows of the events and calls that pass ``flt`` among the records that pass it (``fvis``)."""
        shown = [x for x in self.items if self._passes(x, events, calls, flt)]
        self.shown = shown
        self.shown_befores = [_before(x, events, calls) for x in shown]
        self.shown_rows = [fvis.rank(b) + j for j, b in enumerate(self.shown_befores)]
        self.shown_events = [k for kind, k in shown if kind == "event"]
        self.shown_event_rows = [r for (kind, _), r in zip(shown, self.shown_rows, strict=True) if kind == "event"]
        self.shown_calls = [k for kind, k in shown if kind == "call"]
        self.shown_call_rows = [r for (kind, _), r in zip(shown, self.shown_rows, strict=True) if kind == "call"]
        self.shown_row_of = dict(zip(shown, self.shown_rows, strict=True))

    def _passes(self, item: Item, events: list[Event], calls: list[Call], flt: RowFilter) -> bool:
        """Whether an event or call passes the filter (a call's verdict is kept: its line is built to test it)."""
        kind, k = item
        if kind == "event":
            return flt.match_event(events[k].data)
        c = calls[k]
        hit = self.call_pass.get(c.order)
        if hit is None:
            import orjson

            # tested as the line it is in llm.jsonl (blobs expanded): kind, step, errors and text alike
            hit = self.call_pass[c.order] = flt.match_line(orjson.dumps(c.data, default=str))
        return hit

    def clear_shown(self) -> None:
        """Forget the filter's rows (the filter was cleared)."""
        self.shown, self.shown_befores, self.shown_rows = [], [], []
        self.shown_events, self.shown_event_rows, self.shown_calls, self.shown_call_rows = [], [], [], []
        self.shown_row_of = {}
        self.call_pass = {}

    def at_row(self, row: int, filtered: bool) -> Item | int:
        """The event or call at ``row``, else how many of them come before it (the rest are the records' rows)."""
        rows = self.shown_rows if filtered else self.rows
        k = bisect.bisect_left(rows, row)
        if k < len(rows) and rows[k] == row:
            return (self.shown if filtered else self.items)[k]
        return k

    def count_before(self, seq: int, filtered: bool) -> int:
        """How many events and calls come before record ``seq``'s row (those with ``before <= seq``)."""
        befores = self.shown_befores if filtered else self.befores
        return bisect.bisect_right(befores, seq) if befores else 0

    def row_of_event(self, index: int, filtered: bool) -> int | None:
        """The row of ``events[index]`` (``None``: the filter hides it)."""
        if not filtered:
            return self.event_rows[index] if 0 <= index < len(self.event_rows) else None
        return self.shown_row_of.get(("event", index))  # (events of one seq are in time order, not index order)

    def row_of_call(self, index: int, filtered: bool) -> int | None:
        """The row of ``calls[index]`` (``None``: the filter hides it)."""
        if not filtered:
            return self.call_rows[index] if 0 <= index < len(self.call_rows) else None
        return self.shown_row_of.get(("call", index))

    def error_rows(self, events: list[Event], calls: list[Call], filtered: bool) -> list[int]:
        """The rows of the error events and failed calls, in order (with a filter: those it shows)."""
        evs: Sequence[int] = self.shown_events if filtered else range(len(events))
        cls: Sequence[int] = self.shown_calls if filtered else range(len(calls))
        ev_rows = self.shown_event_rows if filtered else self.event_rows
        cl_rows = self.shown_call_rows if filtered else self.call_rows
        rows = [r for k, r in zip(evs, ev_rows, strict=True) if is_error_event(events[k].data)]
        rows += [r for k, r in zip(cls, cl_rows, strict=True) if calls[k].data.get("error") is not None]
        return sorted(rows)


def _before(item: Item, events: list[Event], calls: list[Call]) -> int:
    """The seq an event or call goes before."""
    kind, k = item
    return events[k].before if kind == "event" else calls[k].before
