"""The dashboard's Files tab (``c``): the workspace's files the selected record's step changed, with their diffs.

Computed in a worker when the tab is shown and the cursor rests on a row (the diffs read the run's store),
never for a hidden tab: a run's first screen and its scrolling pay nothing for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.message import Message
from textual.worker import get_current_worker

from ..errors import SupervisorError
from ..views.files import FilesIndex, RecordFiles, has_workspace
from .dashboard_state import DashboardState
from .files_text import no_workspace_text, record_files_text, snapshot_text
from .pane_tabs import Panes

FILES_DELAY = 0.05
"""Seconds the cursor rests before the Files tab is computed again (as the State tab's)."""


class FilesComputed(Message):
    """The Files tab's text for the row at the cursor, made in a worker."""

    def __init__(self, text: Text) -> None:
        self.text = text
        super().__init__()


def _label(seq: int, rec: Any) -> str:
    if not isinstance(rec, dict):
        return f"#{seq}"
    kind = str(rec.get("kind", "step"))
    name = rec.get("step") or rec.get("name") or ""
    return f"#{seq} {kind} {name}".rstrip()


def files_of_row(run_dir: Path, kind: str, seq: int, rec: Any, rollbacks: list[int], index: FilesIndex) -> Text:
    """The Files tab of a row: its step's changes, and for a checkpoint its snapshot, for a rollback the
    snapshot of the branch it abandoned (reads the store: for a worker)."""
    from ..core import workspace

    if not has_workspace(run_dir):
        return no_workspace_text(run_dir)
    if kind != "rec":
        return Text("a supervisor row or a model call: select a record to see the files its step changed", style="dim")
    store = workspace.Store(run_dir)
    rkind = rec.get("kind") if isinstance(rec, dict) else None
    if rkind == "rollback":
        return _rollback_text(run_dir, store, seq, rec, index.of_record(seq, rec, rollbacks))
    t = record_files_text(store, _label(seq, rec), index.of_record(seq, rec, rollbacks))
    if rkind == "checkpoint":
        ref = workspace.snapshot_at_checkpoint(run_dir, seq)
        t.append("\n\n")
        if ref is None:
            t.append("no snapshot of the workspace at this checkpoint (taken before a workspace was declared, or not "
                     "committed): a rollback to it does not restore files", style="yellow")
        else:
            t.append_text(snapshot_text(store, ref, "the checkpoint's snapshot of the workspace"))
    return t


def _rollback_text(run_dir: Path, store: Any, seq: int, rec: dict[str, Any], found: RecordFiles) -> Text:
    """A rollback's Files tab: where the workspace went back to, whether that is done, and the files of the
    branch it abandoned (saved first), with the command that brings them back."""
    from ..core import workspace

    target = rec.get("checkpoint") or "the start"
    t = Text(f"#{seq} rollback to {target}: the workspace goes back to its snapshot", style="bold")
    done = store.read_restored()
    t.append(" (done)\n" if done is not None and done >= seq else
             " (not done yet: the next start of the agent finishes it first)\n", style="dim")
    if found:
        t.append("\n").append_text(record_files_text(store, f"#{seq} rollback", found))
    refs = [r for r in workspace.committed(run_dir) if r.for_ == "abandoned" and r.seq == seq]
    t.append("\n")
    if not refs:
        return t.append("no snapshot of the abandoned branch's files (the run had no workspace then)", style="dim")
    t.append_text(snapshot_text(store, refs[-1], "the abandoned branch's files, saved before the restore"))
    return t.append(f"bring them back with: agent-supervisor files RUN --restore {seq} --to DIR", style="dim")


class FilesDetail(DashboardState):
    """The Files tab follows the cursor while it is shown."""

    _files_timer: Any = None

    def schedule_files(self) -> None:
        """Compute the Files tab once the cursor rests (only while the tab is shown)."""
        if self.query_one(Panes).active != "files":
            return
        if self._files_timer is not None:
            self._files_timer.stop()
        self._files_timer = self.set_timer(FILES_DELAY, self._start_files)

    def _start_files(self) -> None:
        kind, i = self.timeline.selected()
        rec = self.model.record(i) if kind == "rec" else None
        self.compute_files(kind, i, rec, list(self.model.rollback_seqs), self.model.files)

    @work(thread=True, exclusive=True, group="files", exit_on_error=False)
    def compute_files(self, kind: str, seq: int, rec: Any, rollbacks: list[int], index: FilesIndex) -> None:
        """The Files tab's text (a thread: it reads objects from the store); posts ``FilesComputed``."""
        worker = get_current_worker()
        try:
            text = files_of_row(self.run_dir, kind, seq, rec, rollbacks, index)
        except (SupervisorError, OSError, ValueError) as e:
            text = Text(f"the workspace's files at #{seq} are unavailable: {e}", style="yellow")
        if not worker.is_cancelled:
            self.post_message(FilesComputed(text))

    # handlers by name, not ``@on``: Textual collects the decorated ones of the screen's own class only
    def on_files_computed(self, message: FilesComputed) -> None:
        self._pane("#files-pane").show_rich(message.text)

    def on_panes_switched(self, message: Panes.Switched) -> None:
        if message.tab_id == "files":
            self.schedule_files()
