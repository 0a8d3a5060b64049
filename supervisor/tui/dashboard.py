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
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, TabbedContent, TabPane
from textual.worker import Worker, get_current_worker

from ..core import rundir
from ..core.records import Kind
from ..errors import SupervisorError
from .agent_log import AgentLogPane, AgentLogTail
from .app import report_worker_error
from .confirm import ConfirmScreen
from .detail import JsonPane
from .prompt import Prompt
from .scan import Region, ScanResult, scan_journal, search_journal, search_regions
from .status import RunStatus, control_request, run_status
from .status_bar import StatusBar
from .timeline import TimelineView, describe_event
from .timeline_model import Changes, TimelineModel

STATE_DELAY = 0.05
"""Seconds the cursor rests before the state pane is recomputed."""
SAFETY_NET_S = 2.0
"""The reading worker reads at least this often, watcher or not (a network file system, a watcher error)."""
_WAKE_SLICE_S = 0.25
"""The reading worker checks for cancellation at least this often (the app waits for it at exit)."""


class DashboardScreen(Screen[None]):
    """One run, live or replayed."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "toggle_follow", "Follow", tooltip="Follow new records (tail -f)"),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("n", "search_next(1)", "Next match", show=False),
        Binding("N", "search_next(-1)", "Prev match", show=False),
        Binding("e", "error(1)", "Next error", show=False),
        Binding("E", "error(-1)", "Prev error", show=False),
        Binding("exclamation_mark", "first_error", "First error", show=False, key_display="!"),
        Binding("right_square_bracket", "checkpoint(1)", "Next checkpoint", show=False, key_display="]"),
        Binding("left_square_bracket", "checkpoint(-1)", "Prev checkpoint", show=False, key_display="["),
        Binding("colon", "goto", "Go to seq", key_display=":"),
        Binding("d", "diff", "Diff"),
        Binding("m", "mark", "Mark", show=False, tooltip="Mark this record as the other side of a diff"),
        Binding("r", "rollback", "Rollback"),
        Binding("F", "fork", "Fork", show=False),
        Binding("R", "restart", "Restart", show=False),
        Binding("X", "stop", "Stop", show=False),
        Binding("i", "tab('record')", "Record", show=False),
        Binding("s", "tab('state')", "State", show=False),
        Binding("l", "tab('agentlog')", "Agent log", show=False),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q,escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    DashboardScreen #timeline { height: 1fr; border-top: solid $panel-lighten-2; }
    DashboardScreen #panes { height: 45%; }
    """

    @dataclass
    class Scanned(Message):
        """The full scan of the journal finished (navigation and dimming are ready)."""

        result: ScanResult

    @dataclass
    class FilesRead(Message):
        """What the reading worker found: new records and events (``changes``), new agent output."""

        changes: Changes | None
        log_text: str

    @dataclass
    class StateComputed(Message):
        """The state pane's value at a seq, computed in a worker (``error``: why there is none)."""

        value: Any
        error: str
        heading: str

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

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield TimelineView(self.model, replay=self.replay, id="timeline")
        with TabbedContent(id="panes", initial="state" if self.replay else "record"):
            with TabPane("Record", id="record"):
                yield JsonPane(id="record-pane")
            with TabPane("State", id="state"):
                yield JsonPane(id="state-pane")
            with TabPane("Agent log", id="agentlog"):
                yield AgentLogPane(id="agent-log")
        yield Prompt(id="prompt")
        yield Footer()

    @property
    def timeline(self) -> TimelineView:
        return self.query_one(TimelineView)

    def on_mount(self) -> None:
        self.model.open()
        self.title = f"agent-supervisor {'replay' if self.replay else 'tui'}: {self.run_id}"
        self.timeline.rows_changed()
        self.timeline.follow = not self.replay
        self.timeline.focus()
        # the first screen is painted before the scan and the reads compete for the GIL
        self.call_after_refresh(self.scan)
        self._wake.set()  # the first read takes the agent log and what was appended since the tail
        self.call_after_refresh(self.read_files)
        self.watch_files()
        if not self.replay:
            self.set_interval(1.0, self.poll_status)
        self.poll_status()
        self.refresh_status()

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
        self.files_changed()  # what was committed during the scan
        self.timeline.rows_changed()
        self.refresh_status()
        self.update_detail()

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
            if new or ev_changed:
                self.timeline.rows_changed()
                if self.timeline.follow:
                    self.update_detail()
                elif new:
                    # the state at a step is after its result, which the next records carry:
                    # the selected step's state may have changed (the cursor moves forward cheaply)
                    self.schedule_state()
        if message.log_text:
            self.query_one(AgentLogPane).append(message.log_text)
        self.refresh_status()

    def poll_status(self) -> None:
        """Ask the supervisor for its status (in a worker); the attempt from the model if the files have none."""
        attempt = max(self.model.start_seqs) if self.model.start_seqs else None
        self._ask_status(attempt)

    @work(thread=True, exclusive=True, group="status", exit_on_error=False)
    def _ask_status(self, attempt: int | None) -> None:
        """The one ``run_status`` the CLI shows too: the socket, else the files (a thread: both may be slow)."""
        status = run_status(self.run_dir, timeout=1.0)
        if not status.live and status.fields.get("attempt") is None:
            status.fields["attempt"] = attempt  # a bare journal: its start records count the attempts
        self.app.call_from_thread(self._show_status, status)

    def _show_status(self, status: RunStatus) -> None:
        self.status = status
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
        pane = self.query_one("#state-pane", JsonPane)
        if message.error:
            pane.show_text(message.error, "yellow")
        else:
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

    def _jump(self, seqs: list[int], forward: bool, what: str) -> None:
        cur = self.timeline.selected_seq()
        cur = -1 if cur is None else cur
        target = self.model.next_in(seqs, cur, forward)
        if target is None:
            more = "" if self.model.scanned else " (still indexing)"
            self.notify(f"no {'next' if forward else 'previous'} {what}{more}", severity="warning")
            return
        self.timeline.move_to_seq(target)

    def action_error(self, direction: int) -> None:
        self._jump(self.model.error_seqs, direction > 0, "error")

    def action_first_error(self) -> None:
        if not self.model.error_seqs:
            self.notify("no errors in this run", severity="warning")
            return
        self.timeline.move_to_seq(self.model.error_seqs[0])

    def action_checkpoint(self, direction: int) -> None:
        self._jump(self.model.checkpoint_seqs, direction > 0, "checkpoint")

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_help(self) -> None:
        from .help_screen import HelpScreen

        self.app.push_screen(HelpScreen(self.replay))

    def action_back(self) -> None:
        prompt = self.query_one(Prompt)
        if prompt.is_open:
            prompt.action_close()
            return
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.exit()

    # ------------------------------------------------------------------ prompt: search and go to
    def action_search(self) -> None:
        self.query_one(Prompt).open("search", "search the raw JSON of every record (smart case), Enter to run, Esc to cancel")

    def action_goto(self) -> None:
        self.query_one(Prompt).open("goto", "go to seq (a number, or a checkpoint name), Enter to jump")

    @on(Prompt.Closed)
    def _prompt_closed(self, message: Prompt.Closed) -> None:
        self.timeline.focus()

    @on(Prompt.Entered)
    def _prompt_entered(self, message: Prompt.Entered) -> None:
        if message.mode == "search":
            self.search_query = message.text
            self.notify(f"searching for {message.text!r}…", timeout=2)
            # a copy of the regions, taken here: the UI thread appends to them as records come
            self.run_search(message.text, list(self.model.regions) if self.model.scanned else None)
        elif message.mode == "goto":
            self.goto(message.text)

    def goto(self, text: str) -> None:
        if text.lstrip("-").isdigit():
            seq = int(text)
            if seq < 0:
                seq += self.model.count
            if not 0 <= seq < self.model.count:
                self.notify(f"no record {text}: seqs go from 0 to {self.model.count - 1}", severity="error")
                return
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
        cancelled = lambda: worker.is_cancelled  # noqa: E731
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
        cur = self.timeline.selected_seq() or 0
        nxt = self.model.next_in(hits, cur - 1, True)
        self.timeline.move_to_seq(nxt if nxt is not None else hits[0])

    def action_search_next(self, direction: int) -> None:
        if not self.search_hits:
            self.notify("no search yet: press / to search", severity="warning")
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
        if not isinstance(ent, dict) or ent.get("kind") != Kind.CHECKPOINT:
            self.notify("select a checkpoint first (] and [ jump between checkpoints)", severity="warning")
            return
        if self.model.is_abandoned(seq):  # type: ignore[arg-type]
            self.notify("this checkpoint is on an abandoned branch; pick an effective one", severity="warning")
            return
        name = str(ent.get("name"))
        n, first = self.model.abandoned_by_rollback_to(int(seq))  # type: ignore[arg-type]
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
            return
        self.do_fork(seq)

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
            self.notify("no supervisor is running this run", severity="warning")
            return

        def done(ok: bool | None) -> None:
            if ok:
                self.send_control(cmd)

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

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that died shows its error instead of failing silently."""
        report_worker_error(self, event, "live updates stopped" if event.worker.group == "read" else "")

