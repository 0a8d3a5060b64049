"""The dashboard's row keys and its start-again key, as mixins of ``DashboardScreen`` (one concept a module).

- ``RowKeys``: the filter (``&``, Esc), bookmarks (``B`` ``u`` ``U``), copy (``y`` ``Y``)
  and export (``w``) of the rows;
- ``StartAgain``: ``S`` starts ``supervise --run-dir`` again on a stopped or failed run.

The bindings stay in ``DashboardScreen.BINDINGS`` (the palette lists that list); the
state the mixins use is made in its ``__init__``.
"""

from __future__ import annotations

import bisect
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import work
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker

from ..core import rundir
from ..core.status import RunStatus
from ..errors import SupervisorError
from ..views.fmt import dumps_pretty
from ..views.scan import SeqBits
from ..views.timeline import TimelineModel
from .bookmarks import Bookmarks, row_key
from .timeline import TimelineView

if TYPE_CHECKING:
    from textual.screen import Screen

    from .prompt import Prompt

    # the filter module loads when a filter is first applied
    from ..views.filters import FilterPass

    _Base = Screen[None]
else:
    _Base = object


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


class _DashboardState(_Base):
    """What the mixins take from the dashboard."""

    model: TimelineModel
    path: Path
    run_dir: Path
    run_id: str
    replay: bool
    status: RunStatus
    bookmarks: Bookmarks
    filter_pass: FilterPass | None
    _filter_lock: threading.Lock
    state_shown: tuple[Any, str] | None
    _start_proc: Any

    @property
    def timeline(self) -> TimelineView:
        raise NotImplementedError

    @property
    def prompt(self) -> Prompt:
        raise NotImplementedError

    def update_detail(self) -> None:
        raise NotImplementedError

    def files_changed(self) -> None:
        raise NotImplementedError

    def poll_status(self) -> None:
        raise NotImplementedError

    def _keys_changed(self) -> None:
        raise NotImplementedError

    def _pane(self, selector: str) -> Any:
        raise NotImplementedError


class RowKeys(_DashboardState):
    """Filter, bookmarks, copy and export."""

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
                row = self.model.row_of_event(i) if kind == "event" else self.model.row_of_seq(seq)
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
            if kind == "event":
                row = self.model.row_of_event(i)
                tl.move_to(row if row is not None else 0)
            elif seq is not None:
                tl.move_to(self.model.row_of_seq(seq))
            tl.refresh()
        self._show_filter_bar()
        self.refresh_bindings()
        self.notify("filter cleared: every row shows", timeout=2)

    # ------------------------------------------------------------------ bookmarks
    def action_bookmark(self) -> None:
        kind, i = self.timeline.selected()
        key = row_key(self.model, kind, i)
        if key is None:
            self.notify("nothing to bookmark: the run has no rows", severity="warning")
            return
        on_now = self.bookmarks.toggle(key)
        self.timeline.refresh()
        what = f"#{i}" if kind == "rec" else "this supervisor row"
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

    # ------------------------------------------------------------------ export
    def _export_rows(self) -> tuple[Any, list[tuple[int, dict[str, Any]]], int, str]:
        """The rows ``w`` writes: the records' seqs, ``(i, event)`` pairs (the event before ``seqs[i]``), how many rows,
        and what they are: the filtered, else the bookmarked, else the selected. (A copy of the filter's seqs:
        the worker merges them, the UI thread never walks a million rows.)"""
        m = self.model
        if m.filter is not None:
            bits = m.filtered_records()
            events = [(bits.rank(m.events[k].before), m.events[k].data) for k in m.filtered_events()]
            return bits, events, len(bits) + len(events), "filtered row"
        rows = self.bookmarks.rows(m) if self.bookmarks.keys else ([self.timeline.cursor] if m.rows else [])
        recs: list[int] = []
        evs: list[tuple[int, dict[str, Any]]] = []
        for r in rows:
            kind, i = m.row_item(r)
            if kind == "event":
                evs.append((len(recs), m.events[i].data))
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


class StartAgain(_DashboardState):
    """``S``: start 'supervise' again with the recorded command."""

    # ------------------------------------------------------------------ start again
    def _bare(self) -> bool:
        """A bare journal file: no run directory, no recorded command."""
        return not self.run_dir.is_dir() or (self.path.is_file() and self.path.name != rundir.JOURNAL)

    def _startable(self) -> bool:
        """Whether the footer offers ``S``: a run directory whose status is known, that no supervisor or agent runs
        and that did not succeed."""
        if self.replay or self._bare():
            return False
        return not self.status.live and self.status.state not in ("running", "succeeded", "unknown")

    def _recorded_command(self) -> list[str] | str:
        """The command ``run.json`` records, or a one-line reason it cannot be run again."""
        from ..core.redact import argv_is_redacted

        try:
            meta = rundir.read_run_json(self.run_dir)
        except SupervisorError as e:
            return str(e)
        cmd = meta.get("command")
        if not (isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd)):
            return (f"{rundir.RUN_JSON} records no command to start again; "
                    f"run: agent-supervisor supervise --run-dir {self.run_dir} -- CMD")
        if argv_is_redacted(cmd):
            return (f"the command recorded in {rundir.RUN_JSON} had secrets redacted, so it cannot be run again; "
                    f"give it after '--': agent-supervisor supervise --run-dir {self.run_dir} -- CMD")
        return cmd

    def action_start_again(self) -> None:
        if self.replay:
            self.notify("replay mode is read-only: open the run with 'agent-supervisor tui' to start it again", severity="warning")
            return
        if self.status.live or self.status.state == "running":
            self.notify("the run is running already (R restarts its agent)", severity="warning")
            return
        if self.status.state == "succeeded":
            self.notify("the run succeeded: nothing to start again (F forks it from a record)", severity="warning")
            return
        if self._bare():
            self.notify("only a run directory can be started again (this is a bare journal)", severity="warning")
            return
        cmd = self._recorded_command()
        if isinstance(cmd, str):
            self.notify(cmd, severity="error", timeout=10)
            return
        body = Text()
        body.append(f"The run is {self.status.state}. ")
        body.append("'agent-supervisor supervise --run-dir' starts it again with the recorded command:\n\n")
        body.append("  " + " ".join(cmd) + "\n\n", style="bold")
        body.append("The agent resumes: the steps in the journal are served from it. The supervisor keeps running when "
                    "you quit the dashboard; X stops it.")

        def done(ok: bool | None) -> None:
            if ok:
                self.start_again()

        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen("Start the run again?", body, "Start"), done)

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def start_again(self) -> None:
        """Start ``supervise --run-dir`` detached (its own session, output to a file beside the run); wait until it
        answers on its socket or exits."""
        import subprocess
        import sys
        import time

        from .control import run_status as ask

        out_path = self.run_dir.parent / f".{self.run_dir.name}.supervise-output.log"
        cmd = [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(self.run_dir), "-q"]
        try:
            fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True)
            finally:
                os.close(fd)
        except OSError as e:
            self.app.call_from_thread(self.notify, f"cannot start supervise: {e}", severity="error", timeout=10)
            return
        self._start_proc = proc
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if ask(self.run_dir, timeout=0.5).live:
                break
            time.sleep(0.05)
        code = proc.poll()
        if code is not None and code != 0:
            why = _last_line(out_path) or f"exit code {code}"
            self.app.call_from_thread(self.notify, f"supervise did not start: {why}", severity="error", timeout=12)
        else:
            self.app.call_from_thread(self.notify, f"started again: supervisor pid {proc.pid} (output in {out_path})", timeout=8)
        self.files_changed()
        self.app.call_from_thread(self.timeline.action_bottom)
        self.app.call_from_thread(self.poll_status)


def orjson_line(value: Any) -> str:
    """A value as one line of JSON (a record as the journal holds it)."""
    import orjson

    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=repr).decode()


def _last_line(path: Path, limit: int = 4096) -> str:
    """The last non-empty line of a small output file (why a process exited), ``""`` if none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            tail = f.read()
    except OSError:
        return ""
    lines = [ln for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""
