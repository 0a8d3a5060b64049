"""The diff screen: the state at two points, path by path (coloured) and as a unified diff; for a run with a
workspace, its files at the two points too (a Files tab: the summary, then each file's unified diff).

Default points: the selected record against the previous effective checkpoint
(``d``); mark another record with ``m`` to diff against it instead.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static, TabbedContent, TabPane
from textual.worker import Worker, get_current_worker

from ..core import state as state_mod
from ..core.records import Kind, preview
from ..errors import SupervisorError
from ..views.fmt import dumps_pretty
from ..views.timeline import TimelineModel
from .key_footer import KeyFooter


def changes_text(changes: list[state_mod.Change]) -> Text:
    """Path-level changes: added green, removed red, changed yellow, with values."""
    t = Text()
    if not changes:
        t.append("no changes", style="dim")
        return t
    for c in changes:
        ptr = c.pointer or "/"
        if c.op == "added":
            t.append(f"+ {ptr}: ", style="bold green")
            t.append(preview(c.new, 100) + "\n", style="green")
        elif c.op == "removed":
            t.append(f"- {ptr}: ", style="bold red")
            t.append(preview(c.old, 100) + "\n", style="red")
        else:
            t.append(f"~ {ptr}: ", style="bold yellow")
            t.append(preview(c.old, 48), style="red")
            t.append(" → ", style="dim")
            t.append(preview(c.new, 48) + "\n", style="green")
    return t


def unified_text(a: Any, b: Any, label_a: str, label_b: str) -> Text:
    """A unified diff of the two documents as indented JSON."""
    la = dumps_pretty(a).splitlines()
    lb = dumps_pretty(b).splitlines()
    t = Text()
    for line in difflib.unified_diff(la, lb, label_a, label_b, lineterm="", n=3):
        style = ""
        if line.startswith("+++") or line.startswith("---"):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        t.append(line + "\n", style=style)
    if not t:
        t.append("the two states are identical", style="dim")
    return t


class DiffScreen(Screen[None]):
    """State at ``a`` against state at ``b`` (``a = -1``: the empty state before the run)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,escape", "app.pop_screen", "Back"),
        Binding("c", "tab('changes')", "Changes"),
        Binding("u", "tab('unified')", "Unified"),
        Binding("f", "tab('files')", "Files", tooltip="The workspace's files at the two points (a run with a workspace)"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    DEFAULT_CSS = """
    DiffScreen #diff-title { height: 1; background: $panel; padding: 0 1; text-style: bold; }
    DiffScreen TabbedContent, DiffScreen TabPane, DiffScreen VerticalScroll { height: 1fr; }
    DiffScreen VerticalScroll > Static { width: auto; }
    """

    @dataclass
    class Computed(Message):
        """Both views of the diff, computed in a worker (or why they could not be)."""

        changes: Text
        unified: Text

    class FilesComputed(Message):
        """The workspace's diff between the two points, computed in a worker after the state's."""

        def __init__(self, text: Text) -> None:
            self.text = text
            super().__init__()

    def __init__(self, model: TimelineModel, a: int, b: int, *, workspace: bool = False) -> None:
        super().__init__()
        self.model = model
        self.a = a
        self.b = b
        self.workspace = workspace
        """The run has a workspace: a Files tab diffs its files at the two points."""
        self.label_a = self.label_b = ""
        self.changes_plain = ""
        self.unified_plain = ""
        """The plain text of both views once computed (for tests and copy)."""
        self.files_plain = ""
        """The Files tab's plain text once computed (``""``: not yet, or no workspace)."""

    def _label(self, seq: int) -> str:
        if seq < 0:
            return "start (empty state)"
        m = self.model.marker(seq)
        if m is not None and m.kind == Kind.CHECKPOINT:
            return f"#{seq} checkpoint {m.name}"
        rec = self.model.record(seq)
        name = rec.get("step") or rec.get("kind") if isinstance(rec, dict) else ""
        return f"#{seq} {name}"

    def compose(self) -> ComposeResult:
        # the labels read the model: here, on the UI thread, not in the worker
        self.label_a, self.label_b = self._label(self.a), self._label(self.b)
        yield Static(f"diff  {self.label_a}  →  {self.label_b}", id="diff-title")
        with TabbedContent(initial="changes"):
            with TabPane("Changes", id="changes"), VerticalScroll():
                yield Static("computing…", id="changes-body")
            with TabPane("Unified", id="unified"), VerticalScroll():
                yield Static("computing…", id="unified-body")
            if self.workspace:
                with TabPane("Files", id="files"), VerticalScroll():
                    yield Static("computing…", id="files-body")
        yield KeyFooter()  # the dashboard's footer: one widget, the same look

    def on_mount(self) -> None:
        self.compute(self.a, self.b, self.label_a, self.label_b)

    @work(thread=True, exclusive=True, group="diff", exit_on_error=False)
    def compute(self, a: int, b: int, label_a: str, label_b: str) -> None:
        """The two states and their diff (a thread: each state may replay many patches); posts ``Computed``."""
        worker = get_current_worker()
        try:
            sa = self.model.state_at(a) if a >= 0 else {}
            sb = self.model.state_at(b) if b >= 0 else {}
        except (ValueError, OSError, SupervisorError, KeyError, IndexError, TypeError) as e:
            msg = Text(f"cannot compute the states: {e}", style="yellow")
            self.post_message(self.Computed(msg, msg))
            return
        changes = changes_text(state_mod.diff(sa, sb))
        unified = unified_text(sa, sb, label_a, label_b)
        if worker.is_cancelled:
            return
        self.post_message(self.Computed(changes, unified))
        if self.workspace:
            files = _files_diff(self.model.run_dir, a, b, label_a, label_b)
            if not worker.is_cancelled:
                self.post_message(self.FilesComputed(files))

    @on(Computed)
    def _show(self, message: Computed) -> None:
        self.changes_plain, self.unified_plain = message.changes.plain, message.unified.plain
        self.query_one("#changes-body", Static).update(message.changes)
        self.query_one("#unified-body", Static).update(message.unified)

    @on(FilesComputed)
    def _show_files(self, message: FilesComputed) -> None:
        self.files_plain = message.text.plain
        self.query_one("#files-body", Static).update(message.text)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A diff worker that died says so, as a notification and in both views."""
        from .worker_errors import report_worker_error

        text = report_worker_error(self, event, "diff failed")
        if text:
            self.query_one("#changes-body", Static).update(Text(text, style="red"))
            self.query_one("#unified-body", Static).update(Text(text, style="red"))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No Files key (in the footer either) for a run without a workspace."""
        if action == "tab" and parameters == ("files",):
            return self.workspace
        return True

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_help(self) -> None:
        from .help_screen import HelpScreen

        self.app.push_screen(HelpScreen(False))


def _files_diff(run_dir: Path, a: int, b: int, label_a: str, label_b: str) -> Text:
    """The workspace at ``a`` against ``b`` (``views.files.workspace_diff``), or why it cannot be shown."""
    from ..views.files import workspace_diff
    from .files_text import workspace_diff_text

    try:
        return workspace_diff_text(workspace_diff(run_dir, a, b), label_a, label_b)
    except (SupervisorError, OSError, ValueError) as e:
        return Text(f"cannot diff the workspace: {e}", style="yellow")
