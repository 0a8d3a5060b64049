"""The dashboard's keys on one row: bookmarks (``B`` ``u`` ``U``), copy (``y`` ``Y``), mark and diff (``m`` ``d``)."""

from __future__ import annotations

import bisect
from typing import Any

from ..core import rundir
from ..views.fmt import dumps_pretty
from .bookmarks import row_key
from .dashboard_state import DashboardState


class RowKeys(DashboardState):
    """Bookmarks, copy, mark and diff."""

    # ------------------------------------------------------------------ bookmarks
    def action_bookmark(self) -> None:
        kind, i = self.timeline.selected()
        key = row_key(self.model, kind, i)
        if key is None:
            self.notify("nothing to bookmark: the run has no rows", severity="warning")
            return
        on_now = self.bookmarks.toggle(key)
        self.timeline.refresh()
        what = f"#{i}" if kind == "rec" else "this model call" if kind == "call" else "this supervisor row"
        n = len(self.bookmarks)
        self.notify(f"{'bookmarked' if on_now else 'removed the bookmark of'} {what} "
                    f"({n} bookmark{'s' if n != 1 else ''}; u / U visit them, w writes them)", timeout=3)

    def action_bookmark_next(self, direction: int) -> None:
        rows = self.bookmarks.rows(self.model)
        if not rows:
            hidden = " the filter shows" if self.bookmarks.keys else ""
            self.notify(f"no bookmarks{hidden}: B bookmarks the selected row", severity="warning")
            return
        cur = self.timeline.cursor
        if direction > 0:
            i = bisect.bisect_right(rows, cur)
            row = rows[i] if i < len(rows) else rows[0]
        else:
            i = bisect.bisect_left(rows, cur) - 1
            row = rows[i] if i >= 0 else rows[-1]
        self.timeline.move_to(row)

    # ------------------------------------------------------------------ copy
    def _selected_value(self) -> tuple[Any, str] | None:
        """The selected row's record or supervisor event, and what it is called in a message."""
        kind, i = self.timeline.selected()
        if kind == "event":
            return self.model.events[i].data, "supervisor row"
        if kind == "call":
            return self.model.calls[i].data, f"model call c{self.model.calls[i].data.get('seq')}"
        if kind == "rec":
            ent = self.model.record(i)
            if isinstance(ent, dict):
                return ent, f"record #{i}"
            if ent is not None:
                return ent.text, f"line #{i} (damaged: copied as text)"
        return None

    def action_copy(self) -> None:
        got = self._selected_value()
        if got is None:
            self.notify("nothing to copy: the run has no records", severity="warning")
            return
        value, what = got
        text = value if isinstance(value, str) else orjson_line(value)
        self._copy(text, what)

    def action_copy_value(self) -> None:
        from .pane_tabs import Panes

        if self.query_one(Panes).active == "state":
            if self.state_shown is None:
                self.notify("the state at this row is not shown yet, or unavailable (see the State tab)", severity="warning")
                return
            value, heading = self.state_shown
            self._copy(value if isinstance(value, str) else dumps_pretty(value), f"the {heading}")
            return
        got = self._selected_value()
        if got is None:
            self.notify("nothing to copy: the run has no records", severity="warning")
            return
        rec, what = got
        if isinstance(rec, dict):
            for key in ("output", "error", "inputs"):
                if key in rec and rec[key] is not None:
                    value = rec[key]
                    self._copy(value if isinstance(value, str) else dumps_pretty(value), f"the {key} of {what}")
                    return
            self._copy(dumps_pretty(rec), what)
            return
        self._copy(str(rec), what)

    def _copy(self, text: str, what: str) -> None:
        """To the terminal's clipboard (OSC 52: tmux passes it on with set-clipboard on)."""
        self.app.copy_to_clipboard(text)
        self.notify(f"copied {what} ({len(text.encode())} bytes) to the clipboard", timeout=3)


    # ------------------------------------------------------------------ diff and mark
    def action_mark(self) -> None:
        seq = self.timeline.selected_seq()
        tl = self.timeline
        tl.mark = None if tl.mark == seq else seq
        tl.refresh()
        if tl.mark is not None:
            self.notify(f"marked #{seq}: 'd' now diffs against it")

    def action_diff(self) -> None:
        from .diff_screen import DiffScreen

        b = self.timeline.selected_seq()
        if b is None:
            self.notify("nothing to diff: the run has no records", severity="warning")
            return
        a = self.timeline.mark
        if a is None or a == b:
            a = self.model.previous_checkpoint(b)
            a = -1 if a is None else a
        lo, hi = min(a, b), max(a, b)
        # a stat, not a read: whether the run keeps a workspace (run.json said so at the start, or snapshots exist)
        workspace = "workspace" in self.meta or (self.run_dir / rundir.WORKSPACE).is_dir()
        self.app.push_screen(DiffScreen(self.model, lo, hi, workspace=workspace))


def orjson_line(value: Any) -> str:
    """A value as one line of JSON (a record as the journal holds it)."""
    import orjson

    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=repr).decode()
