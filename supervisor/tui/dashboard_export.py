"""The dashboard's export (``w``): the rows shown, records and supervisor rows, written to a JSON-lines file in a worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work
from textual.worker import get_current_worker

from .dashboard_state import DashboardState


class ExportKeys(DashboardState):
    """``w`` writes the rows shown (a filter's, else all) to a file."""

    # ------------------------------------------------------------------ export
    def _export_rows(self) -> tuple[Any, list[tuple[int, dict[str, Any]]], int, str]:
        """The rows ``w`` writes: the records' seqs, ``(i, event)`` pairs (the event before ``seqs[i]``), how many rows,
        and what they are: the filtered, else the bookmarked, else the selected. (A copy of the filter's seqs:
        the worker merges them, the UI thread never walks a million rows.)"""
        m = self.model
        if m.filter is not None:
            bits = m.filtered_records()
            events = [(bits.rank(m.events[k].before), m.events[k].data) for k in m.filtered_events()]
            events += [(bits.rank(m.calls[k].before), m.calls[k].data) for k in m.filtered_calls()]
            events.sort(key=lambda p: p[0])
            return bits, events, len(bits) + len(events), "filtered row"
        rows = self.bookmarks.rows(m) if self.bookmarks.keys else ([self.timeline.cursor] if m.rows else [])
        recs: list[int] = []
        evs: list[tuple[int, dict[str, Any]]] = []
        for r in rows:
            kind, i = m.row_item(r)
            if kind == "event":
                evs.append((len(recs), m.events[i].data))
            elif kind == "call":
                evs.append((len(recs), m.calls[i].data))
            else:
                recs.append(i)
        return recs, evs, len(rows), "bookmarked row" if self.bookmarks.keys else "selected row"

    def action_export(self) -> None:
        _seqs, _events, n, what = self._export_rows()
        if not n:
            self.notify("nothing to write: the run has no rows", severity="warning")
            return
        default = f"{self.run_id}-rows.jsonl"
        self.prompt.open(
            "export", f"write the {n} {what}{'s' if n != 1 else ''} to a JSONL file (a path), Enter writes, Esc cancels",
            default)

    def export_to(self, text: str) -> None:
        dest = Path(text).expanduser()
        if dest.is_dir():
            self.notify(f"{dest} is a directory: give a file name", severity="error")
            return
        if not dest.parent.is_dir():
            self.notify(f"no directory {dest.parent}: create it, or give another path", severity="error")
            return
        seqs, events, n, _what = self._export_rows()
        if dest.exists():
            def done(ok: bool | None) -> None:
                if ok:
                    self.do_export(seqs, events, dest)

            from .confirm import ConfirmScreen

            self.app.push_screen(ConfirmScreen(f"Replace {dest}?", f"{dest} exists; it is replaced by the {n} rows.", "Replace"), done)
            return
        self.do_export(seqs, events, dest)

    @work(thread=True, exclusive=True, group="export", exit_on_error=False)
    def do_export(self, seqs: Any, events: list[tuple[int, dict[str, Any]]], dest: Path) -> None:
        from ..views.export_rows import export_rows, merge_rows

        worker = get_current_worker()
        if not isinstance(seqs, list):  # the filter's bitmap (see _export_rows): its members, walked here
            seqs = list(seqs)
        try:
            res = export_rows(self.path, merge_rows(seqs, events), dest, lambda: worker.is_cancelled)
        except OSError as e:
            self.app.call_from_thread(self.notify, f"cannot write {dest}: {e.strerror or e}", severity="error", timeout=8)
            return
        skipped = f"; {res.skipped} damaged line{'s' if res.skipped != 1 else ''} left out" if res.skipped else ""
        self.app.call_from_thread(self.notify, f"wrote {res.rows} row{'s' if res.rows != 1 else ''} to {res.path}{skipped}", timeout=8)
