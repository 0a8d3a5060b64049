"""The run dashboard: status bar, timeline, record/state/agent-log/files panes; live or replay.

No file is read on the UI thread after the first screen (the tail, before the
first frame): a reading worker takes what the files gained whenever the watcher
(or, while the run may be running, a 2 s safety net: ``dashboard_watch``) wakes it and posts it (``FilesRead``); the UI thread
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
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import Worker, get_current_worker

from ..core import rundir
from ..views.scan import ScanResult, scan_journal
from ..views.timeline import TimelineModel
from ..views.timeline_read import Changes
from .agent_log import AgentLogTail
from .bookmarks import BookmarkedTimeline, Bookmarks
from .control import RunStatus, run_status
from .dashboard_control import RunControl
from .dashboard_detail import DetailPanes
from .dashboard_export import ExportKeys
from .dashboard_files import FilesDetail
from .dashboard_filter import FilterKeys
from .dashboard_navigation import Navigation
from .dashboard_pauses import PauseKeys, pause_marks
from .dashboard_rows import RowKeys
from .dashboard_watch import FileWatch
from .detail import JsonPane
from .key_footer import KeyFooter
from .pane_tabs import Panes
from .status_bar import StatusBar
from .textual_hooks import FrameGatedScreen
from .timeline import TimelineView
from .worker_errors import report_worker_error

if TYPE_CHECKING:
    # imported when a filter is first applied, not on the first screen's path
    from ..views.filters import FilterPass

    # imported when first used (after the first frame): the prompt (an Input) and the confirmations (Buttons)
    from .prompt import Prompt

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
    key says why in one line instead of nothing (no description: the palette, ``App.get_system_commands``, lists
    only named keys)."""
    return Binding(key, f"app.notify({message!r}, '', 'warning')", show=False)


class DashboardScreen(
    Navigation, DetailPanes, FilesDetail, FilterKeys, RowKeys, ExportKeys, RunControl, PauseKeys, FileWatch,
    FrameGatedScreen,
):
    """One run, live or replayed: the screen, its layout, its first frame and its reading workers (each group of
    keys is a mixin of its own module, ``dashboard_state`` says which)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # the footer shows them in this order, and cuts the last ones on a narrow terminal: help first
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Every key, grouped"),
        # shown while a step is paused (its banner says so above the timeline); ``b``, a debugger's breakpoint key,
        # is the timeline's page up (as in less) and ``B`` the bookmark: ``x`` marks the step, ``P`` lists them
        Binding("p", "answer_pause", "Answer", tooltip="Answer the paused step or the agent's question (the banner's)"),
        _why("p", "no paused step"),
        Binding("x", "breakpoint", "Breakpoint", show=False,
                tooltip="Set a breakpoint on the selected row's step name (again: remove it)"),
        Binding("P", "breakpoints", "Breakpoints", show=False, tooltip="The run's breakpoints: add, remove, clear"),
        Binding("f", "toggle_follow", "Follow", tooltip="Follow new records as they are committed (tail -f); off when you move up"),
        _why("f", "replay mode: follow is off (the run is finished)"),
        Binding(
            "S", "start_again", "Start again", key_display="S",
            tooltip="Start 'supervise' again on this stopped or failed run, with its recorded command (asks first)",
        ),
        _why("S", "S starts a stopped or failed run again; not a running or succeeded run, nor a bare journal"),
        Binding("slash", "search", "Search", key_display="/",
                tooltip="Search the records (smart case; output:T, error:T, inputs:T, step:, model:, attempt: scope it); n / N move"),
        Binding("n", "search_next(1)", "Next match", show=False, tooltip="The next search match (wraps around)"),
        Binding("N", "search_next(-1)", "Prev match", show=False, tooltip="The previous search match (wraps around)"),
        Binding("ampersand", "filter", "Filter", key_display="&",
                tooltip="Show only the rows that match: a text, output:T, error:T, step:GLOB, model:M, attempt:N, kind:K, "
                "errors; !term hides; Esc clears"),
        # Esc closes what is open and never quits (as in lazygit, k9s and lnav); q goes back or quits
        Binding("escape", "close", "Close", key_display="Esc",
                tooltip="Close what is open: the search, the filter, a pane's focus, this run (back to the runs list)"),
        _why("escape", "nothing to close: q quits"),
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
        Binding("w", "toggle_wrap", "Wrap", show=False,
                tooltip="Wrap long values in every pane, or let them run off to the right (Left/Right scroll; kept in settings.json)"),
        Binding("W", "export", "Export", show=False,
                tooltip="Write the filtered rows, else the bookmarked rows, else the selected row to a JSONL file (was w)"),
        Binding("d", "diff", "Diff", tooltip="Diff the state: this row against the marked row, else the previous checkpoint"),
        _why("d", "nothing to diff: the run has no records"),
        Binding("m", "mark", "Mark", show=False, tooltip="Mark this record as the other side of a diff"),
        Binding("g", "gantt", "Gantt", show=False,
                tooltip="The selected record's attempt on a time axis: steps in flight, overlaps, retries grouped"),
        Binding("r", "rollback", "Rollback", tooltip="Roll back to the selected checkpoint (asks first)"),
        _why("r", "no checkpoint to roll back to in this run"),
        Binding("F", "fork", "Fork", show=False, tooltip="Fork the run at the selected record into a new run directory (asks first)"),
        Binding("R", "restart", "Restart", show=False, tooltip="Restart the agent through its supervisor; it resumes (asks first)"),
        Binding("X", "stop", "Stop", show=False, tooltip="Stop the agent and its supervisor; the run can start again (asks first)"),
        Binding("i", "tab('record')", "Record", show=False, tooltip="The Record tab: the selected row as JSON"),
        Binding("s", "tab('state')", "State", show=False, tooltip="The State tab: the agent's state at the selected row"),
        Binding("l", "tab('agentlog')", "Agent log", show=False, tooltip="The Agent log tab: what the agent printed"),
        Binding("c", "tab('files')", "Files", show=False,
                tooltip="The Files tab: the workspace's files the selected step changed, with their diffs"),
        Binding("t", "app.toggle_time", "Time", show=False, tooltip="Absolute or relative times (since the run's first record)"),
        Binding("T", "app.toggle_theme", "Theme", show=False, tooltip="Dark or light theme (kept in settings.json)"),
        Binding("L", "app.cycle_layout", "Layout", show=False, tooltip="Panes side by side, stacked, or by width (kept in settings.json)"),
        Binding("q", "back", "Back", key_display="q", tooltip="Back to the runs list, or quit from the first screen"),
    ]

    DEFAULT_CSS = """
    DashboardScreen #timeline { height: 1fr; border-top: solid $panel-lighten-2; }
    DashboardScreen #panes { height: 45%; }
    DashboardScreen #filter-bar { height: 1; display: none; background: $warning 25%; color: $text; padding: 0 1; }
    DashboardScreen #filter-bar.-active { display: block; }
    DashboardScreen #pause-bar {
        height: 1; display: none; background: $warning 45%; color: $text; text-style: bold; padding: 0 1;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    DashboardScreen #pause-bar.-active { display: block; }
    """

    # the messages are plain classes, not dataclasses: each dataclass costs ~0.3 ms of the start (its code is
    # generated and compiled when the module is imported)
    class Scanned(Message):
        """The full scan of the journal finished (navigation and dimming are ready)."""

        def __init__(self, result: ScanResult) -> None:
            self.result = result
            super().__init__()

    class FilesRead(Message):
        """What the reading worker found: new records and events (``changes``), new agent output, and the ``pause``
        and ``choice`` records among them (``marks``)."""

        def __init__(self, changes: Changes | None, log_text: str, marks: list[Any] | None = None) -> None:
            self.changes = changes
            self.log_text = log_text
            self.marks = marks or []
            super().__init__()

    def __init__(self, path: Path, *, replay: bool = False) -> None:
        super().__init__()
        self.path = path
        self.run_dir = path if path.is_dir() else path.parent
        self.replay = replay
        self.model = TimelineModel(path)
        self.model.on_nested = self.files_changed  # the reading worker reads the steps' nesting at once
        self.meta = rundir.read_run_json(self.run_dir) if self.run_dir.is_dir() else {"format": 0}
        self.run_id = str(self.meta.get("id") or (path.name if path.is_dir() else path.stem))
        self.status = RunStatus()
        self.search_query = ""
        self.search_hits: list[int] = []
        bare = path.is_file() and path.name != rundir.JOURNAL  # a bare journal file has no agent output beside it
        self._log_tail = AgentLogTail(None if bare else self.run_dir / rundir.AGENT_LOG)
        self._stop_watch = asyncio.Event()
        self._wake = threading.Event()
        self.quiet = False
        self._status_timer: Timer | None = None
        self._watching = False
        self._watch_failed = False
        self._state_timer: Timer | None = None
        self.bookmarks = Bookmarks()
        self.filter_pass: FilterPass | None = None
        """The filter being applied or applied (its forward read of the journal goes on as records come)."""
        self._filter_lock = threading.Lock()  # guards the passes' ``busy`` and ``again``
        self._start_proc: Any = None  # the 'supervise' process started again from here (S)
        self.state_shown: tuple[Any, str] | None = None
        self._keys_state: tuple[bool, bool, bool] = (False, False, False)
        """The State tab's value and heading (``None``: not computed, or unavailable)."""
        self._hidden_mounted = False
        self._resumed = False
        self._holding = True
        """No frame drawn yet: held until the first screen is complete (``_first_frame_complete``)."""
        self._hold_expired = False
        self._status_known = False
        self._when_drawn: list[Any] = []
        self.paused = {}
        self._pauses_closed = set()  # pauses a choice answered: a status read before it does not open them again
        self._pauses_told = set()  # pauses notified (once each)
        self._pauses_given = {}  # pauses answered from here whose choice has not come yet: what was answered

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        # what the first frame does not show is mounted right after it (``_mount_hidden_panes``): the filter bar,
        # the hidden tabs' panes, the prompt
        yield StatusBar(self.path, id="status")  # its worker sums the run's tokens and cost
        with Container(id="body"):  # side by side on wide terminals (app.tcss)
            yield BookmarkedTimeline(self.model, self.bookmarks, replay=self.replay, id="timeline")
            tabs = [("record", "Record"), ("state", "State"), ("agentlog", "Agent log"), ("files", "Files")]
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
        self.mount(Static("", id="pause-bar"), after=self.query_one(StatusBar))  # above the filter bar
        self.mount(Prompt(id="prompt"), before=self.query_one(KeyFooter))
        panes = self.query_one(Panes)
        if not self.replay:
            panes.mount(panes.pane("state", JsonPane(id="state-pane")))
        panes.mount(panes.pane("agentlog", AgentLogPane(id="agent-log")))
        panes.mount(panes.pane("files", JsonPane(id="files-pane")))

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
            self.start_status_poll()
        self.poll_status()
        if not self._status_known:  # the status comes from a worker: the record count now (else it was shown)
            self.refresh_status()

    def _start_work(self) -> None:
        """What the first frame does not need: the hidden widgets, the scan, the reads, the file watcher."""
        if not self.is_attached:
            return  # quit as soon as the first frame came: nothing to start
        self._mount_hidden_panes()  # first: the workers' results go to them
        self.seed_pauses()
        self.scan()
        self._wake.set()  # the first read takes the agent log and what was appended since the tail
        self.read_files()
        self.start_watch()  # importing watchfiles (anyio) takes ~0.1 s

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

    def files_changed(self) -> None:
        """Ask the reading worker to read now (it takes everything appended since its last read)."""
        self._wake.set()

    @work(thread=True, exclusive=True, group="read", exit_on_error=False)
    def read_files(self) -> None:
        """Read what the files gained (records, events, agent output) when woken, at least every 2 s (a finished
        run's: only when woken, ``dashboard_watch``); post it."""
        worker = get_current_worker()
        idle = 0.0
        quiet = False
        while not worker.is_cancelled:
            if not self._wake.wait(None if quiet else _WAKE_SLICE_S):
                idle += _WAKE_SLICE_S
                if idle < SAFETY_NET_S:
                    continue
            idle = 0.0
            # taken at a read: the first read after the run went quiet (the safety net's at the latest) takes
            # what changed while the watcher restarted with its slow step; the unmount (it stops the watcher) ends
            # a quiet wait for good (the app waits for this thread at exit)
            quiet = self.quiet and not self._stop_watch.is_set()
            self._wake.clear()  # a change from now on wakes the next round
            if worker.is_cancelled:
                return
            changes = self.model.read_changes(timeout=_WAKE_SLICE_S)
            if changes is None or changes.again:
                self._wake.set()  # the last changes are not applied yet, or a rotation was half done: again
            text = self._log_tail.read_new()
            marks = pause_marks(changes) if changes is not None else None
            if changes is not None or text:
                self.post_message(self.FilesRead(changes, text, marks))

    @on(FilesRead)
    def _files_read(self, message: FilesRead) -> None:
        """Apply what the reading worker found: rows, follow, the agent log, the status bar."""
        if message.changes is not None:
            new, ev_changed = self.model.apply(message.changes)
            self.timeline.tell_read_error()
            if new and self.filter_pass is not None:
                self._filter_more()  # the filter reads what came (its rows follow in a moment)
            if ev_changed:
                self.schedule_files()  # a ``files`` event may belong to the selected row
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
        reset = message.changes is not None and message.changes.calls_reset and message.changes.calls is not None
        if message.marks or reset:
            self.take_pause_marks(message.marks, llm_reset=reset)
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
        self.set_quiet(self.quiet_for(status))
        self.take_status_pause(status)
        running = status.live or status.state in ("running", "starting", "stopping", "unknown")
        if running != self.timeline.agent_running:
            self.timeline.agent_running = running
            self.timeline.refresh()
        self.tick_while(running)
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

    def action_gantt(self) -> None:
        """``g``: the Gantt view of the selected record's attempt (its module imported when first opened)."""
        from .gantt_screen import open_gantt

        open_gantt(self)

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
        if action == "close":
            return self.can_close()
        if action == "start_again":
            return self._startable()
        if action == "rollback":
            return bool(m.checkpoint_seqs)
        if action == "diff":
            return m.rows > 0
        if action == "answer_pause":
            return bool(self.paused)
        return True

    def _keys_changed(self) -> None:
        """Refresh the footer when what decides the keys changed (not on every record: the footer is redrawn)."""
        key = (self.model.rows > 0, bool(self.model.checkpoint_seqs), self.model.tree is not None)
        if key != self._keys_state:
            self._keys_state = key
            self.refresh_bindings()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that died shows its error instead of failing silently."""
        told = report_worker_error(self, event, "live updates stopped" if event.worker.group == "read" else "")
        if told and event.worker.group == "watch":
            self.watch_failed()

