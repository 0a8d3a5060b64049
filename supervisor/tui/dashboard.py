"""The run dashboard: status bar, timeline, record/state/agent-log panes; live or replay.

No file is read on the UI thread after the first screen (the tail, before the
first frame): a reading worker takes what the files gained whenever the watcher
(or a 2 s safety net) wakes it and posts it (``FilesRead``); the UI thread
applies it to the model. The state pane, search, status and control run in
workers too and hand their results back the same way.

Replay mode (``agent-supervisor replay RUN_DIR``) is the same screen with the
cursor as "now": the state pane shows the state as of now and the rows after
it are dimmed, like a debugger's reverse step. It is read-only except for an
offline rollback, which asks first and appends a record.

The footer shows only the keys that work now (``check_action``): no follow in
replay mode, no control of a run without a supervisor, nothing but the prompt's
keys while a prompt is open.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import Worker, get_current_worker

from ..core import rundir
from ..core.records import Kind
from ..errors import SupervisorError
from ..views.scan import Region, ScanResult, scan_journal, search_journal, search_regions
from ..views.timeline import TimelineModel
from ..views.timeline_read import Changes
from .agent_log import AgentLogTail
from .bookmarks import BookmarkedTimeline, Bookmarks
from .control import RunStatus, control_request, run_status
from .dashboard_actions import RowKeys, StartAgain
from .detail import JsonPane
from .key_footer import KeyFooter
from .pane_tabs import Panes
from .status_bar import StatusBar
from .textual_hooks import FrameGatedScreen
from .timeline import TimelineView, describe_event
from .worker_errors import report_worker_error

if TYPE_CHECKING:
    # imported when a filter is first applied, not on the first screen's path
    from ..views.filters import FilterPass
    # imported when first used (after the first frame): the prompt (an Input) and the confirmations (Buttons)
    from .prompt import Prompt

STATE_DELAY = 0.05
"""Seconds the cursor rests before the state pane is recomputed."""
SAFETY_NET_S = 2.0
"""The reading worker reads at least this often, watcher or not (a network file system, a watcher error)."""
FIRST_FRAME_WAIT_S = 0.5
"""The first frame waits for the status at most this long (from the dashboard's mount)."""
WRITE_GRACE_S = 0.01
"""After the first frame, the work it did not need waits this long: Textual's writer thread writes the frame's
bytes, and it takes the GIL at once while the event loop idles (behind the hidden panes' imports it waited up to
the 5 ms switch interval: 1-4 ms later on the terminal in a third of the starts, measured)."""
_WAKE_SLICE_S = 0.25
"""The reading worker checks for cancellation at least this often (the app waits for it at exit)."""


def _why(key: str, message: str) -> Binding:
    """A key's second binding, hidden: where ``check_action`` turns its first off (and the footer leaves it out), the
    key says why in one line instead of nothing (an ``app.`` action: the palette lists no such entry)."""
    return Binding(key, f"app.notify({message!r}, '', 'warning')", show=False)


class DashboardScreen(RowKeys, StartAgain, FrameGatedScreen):
    """One run, live or replayed (the row keys and start again: ``dashboard_actions``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # the footer shows them in this order, and cuts the last ones on a narrow terminal: help first
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Every key, grouped"),
        Binding("f", "toggle_follow", "Follow", tooltip="Follow new records as they are committed (tail -f); off when you move up"),
        _why("f", "replay mode: follow is off (the run is finished)"),
        Binding("S", "start_again", "Start again", key_display="S", tooltip="Start 'supervise' again on this stopped or failed run, with its recorded command (asks first)"),
        _why("S", "S starts a stopped or failed run again; not a running or succeeded run, nor a bare journal"),
        Binding("slash", "search", "Search", key_display="/", tooltip="Search the raw JSON of every record (smart case); n / N move"),
        Binding("n", "search_next(1)", "Next match", show=False, tooltip="The next search match (wraps around)"),
        Binding("N", "search_next(-1)", "Prev match", show=False, tooltip="The previous search match (wraps around)"),
        Binding("ampersand", "filter", "Filter", key_display="&",
                tooltip="Show only the rows that match a text, kind:K, step:GLOB or errors; !term hides; Esc clears"),
        Binding("escape", "clear_filter", "Clear filter", key_display="Esc", tooltip="Show every row again"),
        Binding("e", "error(1)", "Next error", show=False, tooltip="The next failed step, crash, hang or give-up"),
        Binding("E", "error(-1)", "Prev error", show=False, tooltip="The previous failed step, crash, hang or give-up"),
        Binding("exclamation_mark", "first_error", "First error", show=False, key_display="!",
                tooltip="The run's first failed step, crash, hang or give-up"),
        Binding("right_square_bracket", "checkpoint(1)", "Next checkpoint", show=False, key_display="]",
                tooltip="The next checkpoint record"),
        Binding("left_square_bracket", "checkpoint(-1)", "Prev checkpoint", show=False, key_display="[",
                tooltip="The previous checkpoint record"),
        Binding("colon", "goto", "Go to seq", key_display=":", tooltip="Go to a seq (negative: from the end) or a checkpoint name"),
        Binding("B", "bookmark", "Bookmark", show=False, tooltip="Bookmark this row, or remove its bookmark (several rows may be)"),
        Binding("u", "bookmark_next(1)", "Next bookmark", show=False, tooltip="The next bookmarked row (wraps around)"),
        Binding("U", "bookmark_next(-1)", "Prev bookmark", show=False, tooltip="The previous bookmarked row (wraps around)"),
        Binding("y", "copy", "Copy", show=False, tooltip="Copy the selected row's record (its JSON line) to the clipboard"),
        Binding("Y", "copy_value", "Copy value", show=False,
                tooltip="Copy the value: the state at the row on the State tab, else the step's output or error"),
        Binding("w", "export", "Export", show=False,
                tooltip="Write the filtered rows, else the bookmarked rows, else the selected row to a JSONL file"),
        Binding("d", "diff", "Diff", tooltip="Diff the state: this row against the marked row, else the previous checkpoint"),
        _why("d", "nothing to diff: the run has no records"),
        Binding("m", "mark", "Mark", show=False, tooltip="Mark this record as the other side of a diff"),
        Binding("r", "rollback", "Rollback", tooltip="Roll back to the selected checkpoint (asks first)"),
        _why("r", "no checkpoint to roll back to in this run"),
        Binding("F", "fork", "Fork", show=False, tooltip="Fork the run at the selected record into a new run directory (asks first)"),
        Binding("R", "restart", "Restart", show=False, tooltip="Restart the agent through its supervisor; it resumes (asks first)"),
        Binding("X", "stop", "Stop", show=False, tooltip="Stop the agent and its supervisor; the run can start again (asks first)"),
        Binding("i", "tab('record')", "Record", show=False, tooltip="The Record tab: the selected row as JSON"),
        Binding("s", "tab('state')", "State", show=False, tooltip="The State tab: the agent's state at the selected row"),
        Binding("l", "tab('agentlog')", "Agent log", show=False, tooltip="The Agent log tab: what the agent printed"),
        Binding("t", "app.toggle_time", "Time", show=False, tooltip="Absolute or relative times (since the run's first record)"),
        Binding("T", "app.toggle_theme", "Theme", show=False, tooltip="Dark or light theme (kept in settings.json)"),
        Binding("L", "app.cycle_layout", "Layout", show=False, tooltip="Panes side by side, stacked, or by width (kept in settings.json)"),
        Binding("q,escape", "back", "Back", key_display="q", tooltip="Back to the runs list, or quit from the first screen"),
    ]

    DEFAULT_CSS = """
    DashboardScreen #timeline { height: 1fr; border-top: solid $panel-lighten-2; }
    DashboardScreen #panes { height: 45%; }
    DashboardScreen #filter-bar { height: 1; display: none; background: $warning 25%; color: $text; padding: 0 1; }
    DashboardScreen #filter-bar.-active { display: block; }
    """

    # the messages are plain classes, not dataclasses: each dataclass costs ~0.3 ms of the start (its code is
    # generated and compiled when the module is imported)
    class Scanned(Message):
        """The full scan of the journal finished (navigation and dimming are ready)."""

        def __init__(self, result: ScanResult) -> None:
            self.result = result
            super().__init__()

    class FilesRead(Message):
        """What the reading worker found: new records and events (``changes``), new agent output."""

        def __init__(self, changes: Changes | None, log_text: str) -> None:
            self.changes = changes
            self.log_text = log_text
            super().__init__()

    class StateComputed(Message):
        """The state pane's value at a seq, computed in a worker (``error``: why there is none)."""

        def __init__(self, value: Any, error: str, heading: str) -> None:
            self.value = value
            self.error = error
            self.heading = heading
            super().__init__()

    def __init__(self, path: Path, *, replay: bool = False) -> None:
        super().__init__()
        self.path = path
        self.run_dir = path if path.is_dir() else path.parent
        self.replay = replay
        self.model = TimelineModel(path)
        self.meta = rundir.read_run_json(self.run_dir) if self.run_dir.is_dir() else {"format": 0}
        self.run_id = str(self.meta.get("id") or (path.name if path.is_dir() else path.stem))
        self.status = RunStatus()
        self.search_query = ""
        self.search_hits: list[int] = []
        bare = path.is_file() and path.name != rundir.JOURNAL  # a bare journal file has no agent output beside it
        self._log_tail = AgentLogTail(None if bare else self.run_dir / rundir.AGENT_LOG)
        self._stop_watch = asyncio.Event()
        self._wake = threading.Event()
        self._state_timer: Timer | None = None
        self.bookmarks = Bookmarks()
        self.filter_pass: FilterPass | None = None
        """The filter being applied or applied (its forward read of the journal goes on as records come)."""
        self._filter_lock = threading.Lock()  # guards the passes' ``busy`` and ``again``
        self._start_proc: Any = None  # the 'supervise' process started again from here (S)
        self.state_shown: tuple[Any, str] | None = None
        self._keys_state: tuple[bool, bool] = (False, False)
        """The State tab's value and heading (``None``: not computed, or unavailable)."""
        self._hidden_mounted = False
        self._resumed = False
        self._holding = True
        """No frame drawn yet: held until the first screen is complete (``_first_frame_complete``)."""
        self._hold_expired = False
        self._status_known = False
        self._when_drawn: list[Any] = []

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        # what the first frame does not show is mounted right after it (``_mount_hidden_panes``): the filter bar,
        # the hidden tabs' panes, the prompt
        yield StatusBar(self.path, id="status")  # its worker sums the run's tokens and cost
        with Container(id="body"):  # side by side on wide terminals (app.tcss)
            yield BookmarkedTimeline(self.model, self.bookmarks, replay=self.replay, id="timeline")
            tabs = [("record", "Record"), ("state", "State"), ("agentlog", "Agent log")]
            with Panes(tabs, initial="state" if self.replay else "record", id="panes") as panes:
                yield panes.pane("record", JsonPane(id="record-pane"))  # hidden in replay mode, but always there
                if self.replay:  # the tab shown first in replay mode
                    yield panes.pane("state", JsonPane(id="state-pane"))
        yield KeyFooter()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        # Its first resume comes right after its mount styled every widget: Textual would style them all again
        # (about 10 ms before the first frame). Later resumes (back from the help, a diff) do refresh them.
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False

    def may_draw(self) -> bool:
        # The first frame waits for the whole first screen: the widgets are composed in their own tasks, the
        # status comes from a worker; drawn at once, the terminal got a frame without the record pane or the
        # status, then two or three more (each a full render) until they came.
        if self._holding:
            if not self._first_frame_complete():
                return False
            self._holding = False
        return True

    def drawn(self) -> None:
        if self._when_drawn:  # the first frame's callbacks (only added while it was held)
            callbacks, self._when_drawn = self._when_drawn, []
            for callback in callbacks:
                callback()

    def _first_frame_complete(self) -> bool:
        """The first screen is complete: the timeline laid out, the shown pane mounted with its content, the
        status known (or ``FIRST_FRAME_WAIT_S`` passed: a slow status socket does not hold the screen)."""
        if self._hold_expired:
            return True
        if not self._status_known or self.timeline.size.height <= 0:
            return False
        pane = self.query_one("#state-pane" if self.replay else "#record-pane", JsonPane)
        return pane.body.is_mounted and (self.replay or bool(pane.text))

    def _hold_expire(self) -> None:
        self._hold_expired = True
        self.refresh()

    @property
    def holding(self) -> bool:
        """No frame drawn yet (the first one waits for the whole first screen)."""
        return self._holding

    def when_drawn(self, callback: Any) -> None:
        """Call ``callback`` once the first frame is drawn (at once if it is)."""
        if self._holding:
            self._when_drawn.append(callback)
        else:
            callback()

    @property
    def timeline(self) -> TimelineView:
        return self.query_one(TimelineView)

    def _mount_hidden_panes(self) -> None:
        """What the first frame does not show, mounted after it (each costs a few ms of styling and layout
        before the first frame otherwise): the hidden tabs' panes (their content comes from workers) and the
        prompt (an action that needs one before then mounts them: ``prompt``, ``_pane``)."""
        if self._hidden_mounted or not self.is_attached:  # not attached: the app is exiting (q before this)
            return
        self._hidden_mounted = True
        from .agent_log_pane import AgentLogPane
        from .prompt import Prompt

        self.mount(Static("", id="filter-bar"), after=self.query_one(StatusBar))
        self.mount(Prompt(id="prompt"), before=self.query_one(KeyFooter))
        panes = self.query_one(Panes)
        if not self.replay:
            panes.mount(panes.pane("state", JsonPane(id="state-pane")))
        panes.mount(panes.pane("agentlog", AgentLogPane(id="agent-log")))

    @property
    def prompt(self) -> Prompt:
        """The prompt (mounted now if the first frame's callbacks have not run yet: a key came sooner)."""
        self._mount_hidden_panes()
        from .prompt import Prompt

        return self.query_one("#prompt", Prompt)

    def _pane(self, selector: str) -> Any:
        self._mount_hidden_panes()  # a worker's result before the first frame's callbacks ran
        return self.query_one(selector)

    def on_mount(self) -> None:
        self.model.open()
        self.title = f"agent-supervisor {'replay' if self.replay else 'tui'}: {self.run_id}"
        self.timeline.rows_changed()
        self.timeline.follow = not self.replay
        self.timeline.focus()
        self.update_detail()  # now: the first frame shows the record (the Selected message comes later)
        self.set_timer(FIRST_FRAME_WAIT_S, self._hold_expire)
        # the first screen is on the terminal before the scan and the reads compete for the GIL
        after = getattr(self.app, "after_first_frame", None)
        if after is not None:
            after(lambda: self.set_timer(WRITE_GRACE_S, self._start_work))
        else:
            self.call_after_refresh(self._start_work)
        if not self.replay:
            self.set_interval(1.0, self.poll_status)
        self.poll_status()
        if not self._status_known:  # the status comes from a worker: the record count now (else it was shown)
            self.refresh_status()

    def _start_work(self) -> None:
        """What the first frame does not need: the hidden widgets, the scan, the reads, the file watcher."""
        if not self.is_attached:
            return  # quit as soon as the first frame came: nothing to start
        self._mount_hidden_panes()  # first: the workers' results go to them
        self.scan()
        self._wake.set()  # the first read takes the agent log and what was appended since the tail
        self.read_files()
        self.watch_files()  # importing watchfiles (anyio) takes ~0.1 s

    def on_unmount(self) -> None:
        self._stop_watch.set()
        self._wake.set()

    # ------------------------------------------------------------------ workers
    @work(thread=True, exclusive=True, group="scan", exit_on_error=False)
    def scan(self) -> None:
        """Scan the whole journal once (a thread: 290 MB takes about a second)."""
        worker = get_current_worker()
        result = scan_journal(self.path, lambda: worker.is_cancelled)
        if not worker.is_cancelled:
            self.post_message(self.Scanned(result))

    @on(Scanned)
    def _adopt_scan(self, message: Scanned) -> None:
        self.model.adopt(message.result)
        self.query_one(StatusBar).scanned(message.result)  # the run's tokens and cost, in a worker
        self.files_changed()  # what was committed during the scan
        self.timeline.rows_changed()
        self.refresh_status()
        self.update_detail()
        self._keys_changed()

    @work(exclusive=True, group="watch", exit_on_error=False)
    async def watch_files(self) -> None:
        """Wake the reading worker when a file of the run changes (watchfiles, a few ms)."""
        import watchfiles

        if not self.run_dir.is_dir():
            return
        async for _changes in watchfiles.awatch(
            self.run_dir, debounce=5, step=5, stop_event=self._stop_watch, recursive=False, rust_timeout=500
        ):
            self.files_changed()

    def files_changed(self) -> None:
        """Ask the reading worker to read now (it takes everything appended since its last read)."""
        self._wake.set()

    @work(thread=True, exclusive=True, group="read", exit_on_error=False)
    def read_files(self) -> None:
        """Read what the files gained (records, events, agent output) when woken, at least every 2 s; post it."""
        worker = get_current_worker()
        idle = 0.0
        while not worker.is_cancelled:
            if not self._wake.wait(_WAKE_SLICE_S):
                idle += _WAKE_SLICE_S
                if idle < SAFETY_NET_S:
                    continue
            idle = 0.0
            self._wake.clear()  # a change from now on wakes the next round
            if worker.is_cancelled:
                return
            changes = self.model.read_changes(timeout=_WAKE_SLICE_S)
            if changes is None or changes.again:
                self._wake.set()  # the last changes are not applied yet, or a rotation was half done: again
            text = self._log_tail.read_new()
            if changes is not None or text:
                self.post_message(self.FilesRead(changes, text))

    @on(FilesRead)
    def _files_read(self, message: FilesRead) -> None:
        """Apply what the reading worker found: rows, follow, the agent log, the status bar."""
        if message.changes is not None:
            new, ev_changed = self.model.apply(message.changes)
            self.timeline.tell_read_error()
            if new and self.filter_pass is not None:
                self._filter_more()  # the filter reads what came (its rows follow in a moment)
            if new or ev_changed:
                self.timeline.rows_changed()
                if self.timeline.follow:
                    self.update_detail()
                elif new:
                    # the state at a step is after its result, which the next records carry:
                    # the selected step's state may have changed (the cursor moves forward cheaply)
                    self.schedule_state()
        if message.log_text:
            self._pane("#agent-log").append(message.log_text)
        self.refresh_status()
        self._keys_changed()

    def poll_status(self) -> None:
        """Ask the supervisor for its status (in a worker); the attempt from the model if the files have none."""
        attempt = max(self.model.start_seqs) if self.model.start_seqs else None
        if not self._status_known and not (self.run_dir / rundir.CONTROL_SOCK).exists():
            # the first time, with no supervisor to ask: the files' status (run.json, under a millisecond) at
            # once, so the first frame has it without waiting for a worker's round trip (~20 ms at the start)
            self._show_status(self._status_of(attempt))
        else:
            self._ask_status(attempt)
        if self._start_proc is not None and self._start_proc.poll() is not None:
            self._start_proc = None  # the supervisor S started has exited: reaped, no zombie

    def _status_of(self, attempt: int | None) -> RunStatus:
        """The one ``run_status`` the CLI shows too: the socket, else the files."""
        status = run_status(self.run_dir, timeout=1.0)
        if not status.live and status.fields.get("attempt") is None:
            status.fields["attempt"] = attempt  # a bare journal: its start records count the attempts
        return status

    @work(thread=True, exclusive=True, group="status", exit_on_error=False)
    def _ask_status(self, attempt: int | None) -> None:
        """``_status_of`` in a thread: the socket may be slow to answer, the files slow to read."""
        status = self._status_of(attempt)
        self.app.call_from_thread(self._show_status, status)

    def _show_status(self, status: RunStatus) -> None:
        self._status_known = True
        if status.live != self.status.live or status.state != self.status.state:
            self.refresh_bindings()  # R, X and S work by whether a supervisor runs the run
        self.status = status
        running = status.live or status.state in ("running", "starting", "stopping", "unknown")
        if running != self.timeline.agent_running:
            self.timeline.agent_running = running
            self.timeline.refresh()
        self.refresh_status()

    def refresh_status(self) -> None:
        m = self.model
        now = self.timeline.selected_seq() if self.replay else None
        self.query_one(StatusBar).show(
            self.status,
            run_id=self.run_id,
            records=m.count,
            steps=m.effective_steps,
            checkpoints=len(m.effective_checkpoints),
            follow=self.timeline.follow,
            replay_now=now,
            indexing=not m.scanned,
            deleted=m.deleted,
            problems=len(m.bad_seqs),
        )

    # ------------------------------------------------------------------ detail
    @on(TimelineView.Selected)
    def on_selected(self, message: TimelineView.Selected) -> None:
        self.update_detail()
        if self.replay:
            self.refresh_status()

    @on(TimelineView.FollowChanged)
    def on_follow_changed(self, message: TimelineView.FollowChanged) -> None:
        self.refresh_status()

    def update_detail(self) -> None:
        kind, i = self.timeline.selected()
        pane = self.query_one("#record-pane", JsonPane)
        if kind == "event":
            ev = self.model.events[i].data
            pane.show_value(ev, describe_event(ev))
        elif kind == "rec":
            ent = self.model.record(i)
            label = "abandoned branch (a later rollback cut it off)" if self.model.is_abandoned(i) else ""
            pane.show_entry(ent, label)
        else:
            pane.show_text("empty run: no records yet", "dim")
        self.schedule_state()

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
        self.post_message(self.StateComputed(value, err, f"state as of #{seq}" + (" (now)" if self.replay else "")))

    @on(StateComputed)
    def _show_state(self, message: StateComputed) -> None:
        pane: JsonPane = self._pane("#state-pane")
        if message.error:
            self.state_shown = None
            pane.show_text(message.error, "yellow")
        else:
            self.state_shown = (message.value, message.heading)
            pane.show_value(message.value, message.heading)

    # ------------------------------------------------------------------ navigation actions
    def action_toggle_follow(self) -> None:
        tl = self.timeline
        if self.replay:
            self.notify("replay mode: follow is off (the run is finished)")
            return
        tl.follow = not tl.follow
        if tl.follow:
            tl.move_to(self.model.rows - 1, keep_follow=True)

    def _seq_row(self, seqs: list[int], row: int, forward: bool, limit: int = 100_000) -> int | None:
        """The row of the nearest of ``seqs`` (sorted) after (before) ``row`` that has a row of its own
        (a filter may hide some); ``None`` if there is none."""
        m = self.model
        if forward:
            i = bisect.bisect_right(seqs, row, key=m.row_of_seq)
            for s in seqs[i : i + limit]:
                if m.filter is None or m.passes(s):
                    return m.row_of_seq(s)
            return None
        i = bisect.bisect_left(seqs, row, key=m.row_of_seq)
        for s in reversed(seqs[max(0, i - limit) : i]):
            if m.filter is None or m.passes(s):
                return m.row_of_seq(s)
        return None

    def _jump(self, seqs: list[int], forward: bool, what: str, rows: list[int] | None = None) -> None:
        """Move to the next (previous) of ``seqs`` or of the extra ``rows`` (supervisor rows)."""
        cur = self.timeline.cursor if self.model.rows else -1
        cands = [r for r in (self._seq_row(seqs, cur, forward),) if r is not None]
        if rows:
            i = bisect.bisect_right(rows, cur) if forward else bisect.bisect_left(rows, cur) - 1
            if 0 <= i < len(rows):
                cands.append(rows[i])
        if not cands:
            more = "" if self.model.scanned else " (still indexing)"
            hidden = " the filter shows" if self.model.filter is not None else ""
            self.notify(f"no {'next' if forward else 'previous'} {what}{hidden}{more}", severity="warning")
            return
        self.timeline.move_to(min(cands) if forward else max(cands))

    def action_error(self, direction: int) -> None:
        self._jump(self.model.error_seqs, direction > 0, "error", self.model.error_event_rows())

    def action_first_error(self) -> None:
        cands = [r for r in (self._seq_row(self.model.error_seqs, -1, True),) if r is not None]
        cands += self.model.error_event_rows()[:1]
        if not cands:
            hidden = " the filter shows" if self.model.filter is not None else " in this run"
            self.notify(f"no errors{hidden} (failed steps, crashes, hangs, give-ups)", severity="warning")
            return
        self.timeline.move_to(min(cands))

    def action_checkpoint(self, direction: int) -> None:
        self._jump(self.model.checkpoint_seqs, direction > 0, "checkpoint")

    def action_tab(self, tab: str) -> None:
        self.query_one(Panes).active = tab

    def action_help(self) -> None:
        from .help_screen import HelpScreen

        self.app.push_screen(HelpScreen(self.replay))

    def action_back(self) -> None:
        prompt = self.prompt
        if prompt.is_open:
            prompt.action_close()
            return
        if self.filter_pass is not None:  # Esc clears the filter first (q too: never quit from a filtered view)
            self.action_clear_filter()
            return
        if len(self.app.screen_stack) > 1:  # opened from the runs list (the bottom screen)
            self.app.pop_screen()
        else:
            self.app.exit()

    # ------------------------------------------------------------------ prompt: search and go to
    def action_search(self) -> None:
        self.prompt.open("search", "search the raw JSON of every record (smart case), Enter to run, Esc to cancel")

    def action_goto(self) -> None:
        self.prompt.open("goto", "go to seq (a number, or a checkpoint name), Enter to jump")

    def on_prompt_closed(self, message: Prompt.Closed) -> None:
        self.timeline.focus()
        self.refresh_bindings()

    def on_prompt_opened(self, message: Prompt.Opened) -> None:
        self.refresh_bindings()

    def on_prompt_entered(self, message: Prompt.Entered) -> None:
        if message.mode == "search":
            self.search_query = message.text
            self.notify(f"searching for {message.text!r}…", timeout=2)
            # a copy of the regions, taken here: the UI thread appends to them as records come
            self.run_search(message.text, list(self.model.regions) if self.model.scanned else None)
        elif message.mode == "goto":
            self.goto(message.text)
        elif message.mode == "filter":
            if message.text:
                self.apply_filter(message.text)
            else:
                self.action_clear_filter()
        elif message.mode == "export":
            self.export_to(message.text)

    def goto(self, text: str) -> None:
        if text.lstrip("-").isdigit():
            seq = int(text)
            if seq < 0:
                seq += self.model.count
            if not 0 <= seq < self.model.count:
                self.notify(f"no record {text}: seqs go from 0 to {self.model.count - 1}", severity="error")
                return
            if self.model.filter is not None and not self.model.passes(seq) and not self.model.is_hidden(seq):
                self.notify(f"#{seq} is hidden by the filter: the next row it shows is selected (Esc clears it)", severity="warning")
            self.timeline.move_to_seq(seq)
            return
        for s in reversed(self.model.checkpoint_seqs):
            m = self.model.marker(s)
            if m is not None and text in (m.name, m.file):
                self.timeline.move_to_seq(s)
                return
        self.notify(f"{text!r} is neither a seq nor a checkpoint name", severity="error")

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def run_search(self, query: str, regions: list[Region] | None) -> None:
        """Search every record's raw text in a thread (the scan's regions, else the whole journal)."""
        worker = get_current_worker()
        cancelled = lambda: worker.is_cancelled
        if regions is not None:
            hits = search_regions(regions, query, cancelled)
        else:
            hits = search_journal(self.path, query, cancelled)
        if not worker.is_cancelled:
            self.app.call_from_thread(self._search_done, query, hits)

    def _search_done(self, query: str, hits: list[int]) -> None:
        self.search_hits = hits
        self.timeline.matches = set(hits)
        self.timeline.refresh()
        if not hits:
            self.notify(f"no match for {query!r}", severity="warning")
            return
        self.notify(f"{len(hits)} match{'es' if len(hits) != 1 else ''} for {query!r} (n / N)", timeout=8)
        if self.model.filter is not None:  # within the filter: the matches it shows
            row = self._seq_row(hits, self.timeline.cursor - 1, True)
            row = row if row is not None else self._seq_row(hits, -1, True)
            if row is None:
                self.notify("the filter hides every match: Esc clears it", severity="warning")
            else:
                self.timeline.move_to(row)
            return
        cur = self.timeline.selected_seq() or 0
        nxt = self.model.next_in(hits, cur - 1, True)
        self.timeline.move_to_seq(nxt if nxt is not None else hits[0])

    def action_search_next(self, direction: int) -> None:
        if not self.search_hits:
            self.notify("no search yet: press / to search", severity="warning")
            return
        if self.model.filter is not None:
            fwd = direction > 0
            row = self._seq_row(self.search_hits, self.timeline.cursor, fwd)
            if row is None:
                row = self._seq_row(self.search_hits, -1 if fwd else self.model.rows, fwd)
                if row is not None:
                    self.notify("search wrapped", timeout=1)
            if row is None:
                self.notify("the filter hides every match: Esc clears it", severity="warning")
            else:
                self.timeline.move_to(row)
            return
        cur = self.timeline.selected_seq() or 0
        target = self.model.next_in(self.search_hits, cur, direction > 0)
        if target is None:  # wrap around, as less does with a message
            target = self.search_hits[0] if direction > 0 else self.search_hits[-1]
            self.notify("search wrapped", timeout=1)
        k = self.search_hits.index(target) + 1 if len(self.search_hits) < 100_000 else None
        self.timeline.move_to_seq(target)
        if k is not None:
            self.notify(f"match {k} of {len(self.search_hits)}", timeout=1)

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
        self.app.push_screen(DiffScreen(self.model, lo, hi))

    # ------------------------------------------------------------------ rollback, fork, control
    def action_rollback(self) -> None:
        seq = self.timeline.selected_seq()
        ent = self.model.record(seq) if seq is not None else None
        if seq is None or not isinstance(ent, dict) or ent.get("kind") != Kind.CHECKPOINT:
            self.notify("select a checkpoint first (] and [ jump between checkpoints)", severity="warning")
            return
        if self.model.is_abandoned(seq):
            self.notify("this checkpoint is on an abandoned branch; pick an effective one", severity="warning")
            return
        name = str(ent.get("name"))
        n, first = self.model.abandoned_by_rollback_to(int(seq))
        body = Text()
        body.append(f"Roll back to checkpoint {name!r} (#{seq}).\n\n")
        body.append(f"{n} record{'s' if n != 1 else ''} after it become an abandoned branch")
        body.append(" (they stay in the journal, dimmed):\n" if n else ".\n")
        for s in first:
            e = self.model.record(s)
            if isinstance(e, dict):
                body.append(f"  #{s} {e.get('kind')} {e.get('step') or e.get('name') or ''}\n", style="dim")
        if n > len(first):
            body.append(f"  … and {n - len(first)} more\n", style="dim")
        live = self.status.live
        body.append("\nA rollback record is appended; nothing is rewritten. ")
        if live:
            body.append("The supervisor restarts the agent, which replays up to the checkpoint.")
        else:
            body.append("No supervisor is running: the record is written to the files (offline); "
                        "the next start resumes from the checkpoint.")

        def done(ok: bool | None) -> None:
            if ok:
                self.do_rollback(str(seq), name)

        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(f"Roll back to {name}?", body, "Roll back"), done)

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def do_rollback(self, ref: str, name: str) -> None:
        from ..supervise.rollback import rollback

        try:
            result = rollback(self.run_dir, ref, reason="rollback from the TUI", by="user")
        except SupervisorError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error", timeout=8)
            return
        how = "through the supervisor" if result.get("live") else "offline, on the files"
        self.app.call_from_thread(self.notify, f"rolled back to {name} ({how})")
        self.files_changed()
        # show the rollback record and the restarted attempt as they come: follow on
        self.app.call_from_thread(self.timeline.action_bottom)
        self.app.call_from_thread(self.poll_status)

    def action_fork(self) -> None:
        seq = self.timeline.selected_seq()
        if seq is None:
            self.notify("nothing to fork: the run has no records", severity="warning")
            return
        from ..core.fork import default_target

        body = Text()
        body.append(f"A new run directory, {default_target(self.run_dir, seq).name}, is made beside this one, "
                    f"holding this run's journal up to #{seq} ")
        body.append("(the effective history there) and its checkpoints; this run is not changed.\n\n")
        body.append("Start the fork with 'agent-supervisor supervise --run-dir NEW' (or open it here and press S).")

        def done(ok: bool | None) -> None:
            if ok:
                self.do_fork(seq)

        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(f"Fork the run at #{seq}?", body, "Fork"), done)

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def do_fork(self, seq: int) -> None:
        try:
            from ..core.fork import fork

            new = fork(self.run_dir, seq)
        except SupervisorError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error", timeout=8)
            return
        self.app.call_from_thread(self.notify, f"forked at #{seq} into {new}", timeout=8)

    def _control(self, cmd: str, title: str, body: str) -> None:
        if self.replay:
            self.notify("replay mode is read-only: open the run with 'agent-supervisor tui' to control it", severity="warning")
            return
        if not self.status.live:
            self.notify("no supervisor is running this run" + ("; S starts it again" if self._startable() else ""), severity="warning")
            return

        def done(ok: bool | None) -> None:
            if ok:
                self.send_control(cmd)

        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(title, body, cmd.capitalize()), done)

    def action_restart(self) -> None:
        self._control("restart", "Restart the agent?", "The agent is stopped (SIGTERM, then SIGKILL) and started again with the resume flag.")

    def action_stop(self) -> None:
        self._control("stop", "Stop the agent?", "The agent is stopped (SIGTERM, then SIGKILL) and the supervisor exits. The run can be resumed later.")

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def send_control(self, cmd: str) -> None:
        try:
            control_request(self.run_dir, {"cmd": cmd})
        except SupervisorError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error", timeout=8)
            return
        self.app.call_from_thread(self.notify, f"{cmd}: done")
        self.app.call_from_thread(self.poll_status)

    # ------------------------------------------------------------------ keys per mode
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Which keys work now (the footer shows only those): ``False`` hides and disables a key.

        Keys the footer never shows (``R``, ``X``, ``e``...) stay enabled: pressed where they cannot act, they
        say why in one line (no supervisor runs the run, replay mode is read-only, no next error)."""
        if not self.is_mounted:
            return True
        # the footer asks before the first frame: no prompt is mounted yet, so none is open (not mounted here)
        if self._hidden_mounted and self.prompt.is_open:
            return action == "back"  # the prompt's own keys (Enter, Esc) only
        m = self.model
        if action == "toggle_follow":
            return not self.replay
        if action == "clear_filter":
            return self.filter_pass is not None
        if action == "start_again":
            return self._startable()
        if action == "rollback":
            return bool(m.checkpoint_seqs)
        if action == "diff":
            return m.rows > 0
        return True

    def _keys_changed(self) -> None:
        """Refresh the footer when what decides the keys changed (not on every record: the footer is redrawn)."""
        key = (self.model.rows > 0, bool(self.model.checkpoint_seqs))
        if key != self._keys_state:
            self._keys_state = key
            self.refresh_bindings()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that died shows its error instead of failing silently."""
        report_worker_error(self, event, "live updates stopped" if event.worker.group == "read" else "")

