"""Bookmarks: rows the user marked (several, as lnav's marks), toggled with ``B``, visited with ``u``/``U``.

A bookmark names a record by its seq or a supervisor row by its place in
``supervisor.jsonl``, so it stays on its row when the rows around it change (a
filter, begin rows shown, new records). The timeline draws a ``●`` in the row's
first cell.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from ..views.timeline import TimelineModel
from .timeline import TimelineView

Key = tuple[str, int]
"""``("rec", seq)``, ``("event", order)`` (the event's index in ``supervisor.jsonl``) or ``("call", order)`` (the
call's line in ``llm.jsonl``)."""

GLYPH = "●"


class Bookmarks:
    """The bookmarked rows of one dashboard (kept for the session)."""

    def __init__(self) -> None:
        self.keys: set[Key] = set()

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def toggle(self, key: Key) -> bool:
        """Bookmark ``key``, or remove its bookmark; whether it is bookmarked now."""
        if key in self.keys:
            self.keys.discard(key)
            return False
        self.keys.add(key)
        return True

    def rows(self, model: TimelineModel) -> list[int]:
        """The rows of the bookmarks the timeline shows (a filter may hide some), in order."""
        out: list[int] = []
        orders = {e.order: k for k, e in enumerate(model.events)} if any(k == "event" for k, _ in self.keys) else {}
        calls = {c.order: k for k, c in enumerate(model.calls)} if any(k == "call" for k, _ in self.keys) else {}
        for kind, n in self.keys:
            row: int | None = None
            if kind == "rec":
                if n < model.count and model.passes(n):
                    row = model.row_of_seq(n)
            elif kind == "call":
                row = model.row_of_call(calls[n]) if n in calls else None
            elif n in orders:
                row = model.row_of_event(orders[n])
            if row is not None:
                out.append(row)
        return sorted(out)


def row_key(model: TimelineModel, kind: str, i: int) -> Key | None:
    """The bookmark key of a timeline row (``TimelineView.selected()``), ``None`` for no row."""
    if kind == "rec":
        return ("rec", i)
    if kind == "event" and 0 <= i < len(model.events):
        return ("event", model.events[i].order)
    if kind == "call" and 0 <= i < len(model.calls):
        return ("call", model.calls[i].order)
    return None


class BookmarkedTimeline(TimelineView):
    """The timeline with bookmarked rows marked in their first cell."""

    def __init__(self, model: TimelineModel, bookmarks: Bookmarks, *, replay: bool = False, id: str | None = None) -> None:
        super().__init__(model, replay=replay, id=id)
        self.bookmarks = bookmarks

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        if not self.bookmarks.keys:
            return strip
        row = int(self.scroll_y) + y
        if row >= self.model.rows:
            return strip
        key = row_key(self.model, *self.model.row_item(row))
        if key is None or key not in self.bookmarks:
            return strip
        width = strip.cell_length
        style = self.get_component_rich_style("timeline--mark")
        base = strip.crop(0, 1)
        segs = list(base)
        bg = segs[0].style.bgcolor if segs and segs[0].style is not None else None
        if bg is not None:
            style = style + Style(bgcolor=bg)  # the cursor row keeps its background in the first cell
        return Strip.join([Strip([Segment(GLYPH, style)], 1), strip.crop(1, width)])
