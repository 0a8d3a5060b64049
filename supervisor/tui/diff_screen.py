"""The diff screen: the state at two points, path by path (coloured) and as a unified diff; for a run with a
workspace, its files at the two points too (a Files tab: the summary, then each file's unified diff).

Default points: the selected record against the previous effective checkpoint
(``d``); mark another record with ``m`` to diff against it instead.

The Changes tab is side by side (old left, new right) from ``SIDE_COLUMNS`` columns, stacked below, or as the
layout setting says (``L`` turns it over for this screen). A string with lines is diffed as text, with the
function ``replay --verify`` prints (``views.value_diff``); no value is cut, a long one wraps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static, TabbedContent, TabPane
from textual.worker import Worker, get_current_worker

from ..core.records import Kind
from ..core.state import json_copy
from ..errors import SupervisorError
from ..views.timeline import TimelineModel
from ..views.value_diff import ValueChange
from .diff_text import changes_text, diff_views, side_by_side, stacked
from .key_footer import KeyFooter

__all__ = ["SIDE_COLUMNS", "DiffScreen", "changes_text"]

SIDE_COLUMNS = 120
"""From this width (with the layout setting ``auto``) the Changes tab is side by side: each side gets about 58
columns, as wide as the stacked view's values at 80 (the dashboard's panes need 160: they are three)."""


class DiffScreen(Screen[None]):
    """State at ``a`` against state at ``b`` (``a = -1``: the empty state before the run)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,escape", "app.pop_screen", "Back"),
        Binding("c", "tab('changes')", "Changes"),
        Binding("u", "tab('unified')", "Unified"),
        Binding("f", "tab('files')", "Files", tooltip="The workspace's files at the two points (a run with a workspace)"),
        Binding("L", "layout", "Side/stacked", tooltip="The changes side by side or stacked (this screen only)"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="This screen's keys"),
    ]

    DEFAULT_CSS = """
    DiffScreen #diff-title { height: 1; background: $panel; padding: 0 1; text-style: bold; }
    DiffScreen TabbedContent, DiffScreen TabPane, DiffScreen VerticalScroll { height: 1fr; }
    DiffScreen VerticalScroll > Static { width: 1fr; }
    """

    @dataclass
    class Computed(Message):
        """Both views of the diff, computed in a worker (or why they could not be)."""

        changes: Text
        unified: Text
        items: list[ValueChange] | None = None
        """The changes themselves (``None``: the states could not be computed), drawn side by side on wide screens."""

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
        self.side: bool | None = None
        """Side by side (``True``), stacked (``False``), or by the width (``None``, from the layout setting)."""
        self.side_shown = False
        """Whether the Changes tab shows the changes side by side now."""
        self._computed: DiffScreen.Computed | None = None

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
        layout = getattr(getattr(self.app, "settings", None), "layout", "auto")
        self.side = {"side": True, "stacked": False}.get(layout)
        self.compute(self.a, self.b, self.label_a, self.label_b)

    @work(thread=True, exclusive=True, group="diff", exit_on_error=False)
    def compute(self, a: int, b: int, label_a: str, label_b: str) -> None:
        """The two states and their diff (a thread: each state may replay many patches); posts ``Computed``."""
        worker = get_current_worker()
        try:
            # a copy: the model's cursor applies the next patches to the state it answered, in place
            sa = json_copy(self.model.state_at(a)) if a >= 0 else {}
            sb = self.model.state_at(b) if b >= 0 else {}
        except (ValueError, OSError, SupervisorError, KeyError, IndexError, TypeError) as e:
            msg = Text(f"cannot compute the states: {e}", style="yellow")
            self.post_message(self.Computed(msg, msg))
            return
        items, changes, unified = diff_views(sa, sb, label_a, label_b)
        if worker.is_cancelled:
            return
        self.post_message(self.Computed(changes, unified, items))
        if self.workspace:
            files = _files_diff(self.model.run_dir, a, b, label_a, label_b)
            if not worker.is_cancelled:
                self.post_message(self.FilesComputed(files))

    @on(Computed)
    def _show(self, message: Computed) -> None:
        self._computed = message
        self.changes_plain, self.unified_plain = message.changes.plain, message.unified.plain
        self._draw_changes()
        self.query_one("#unified-body", Static).update(message.unified)

    def _wants_side(self) -> bool:
        return self.side if self.side is not None else self.size.width >= SIDE_COLUMNS

    def _draw_changes(self) -> None:
        """The Changes tab, side by side or stacked as ``side`` and the width say."""
        got = self._computed
        if got is None:
            return
        self.side_shown = got.items is not None and bool(got.items) and self._wants_side()
        body = self.query_one("#changes-body", Static)
        if self.side_shown and got.items is not None:
            body.update(side_by_side(got.items, self.label_a, self.label_b))
        else:
            body.update(stacked(got.items) if got.items is not None else got.changes)  # or why there is no diff

    def on_resize(self, event: events.Resize) -> None:
        if self._computed is not None and self._computed.items and self._wants_side() != self.side_shown:
            self._draw_changes()

    def action_layout(self) -> None:
        """Side by side or stacked, the other way from what is shown (this screen only: the setting stays)."""
        self.side = not self.side_shown
        self._draw_changes()
        self.notify("changes side by side" if self.side_shown else "changes stacked", timeout=2)

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
        from .help_screen import DIFF_KEYS, HelpScreen


        self.app.push_screen(HelpScreen(False, keys=DIFF_KEYS, title="Diff keys"))


def _files_diff(run_dir: Path, a: int, b: int, label_a: str, label_b: str) -> Text:
    """The workspace at ``a`` against ``b`` (``views.files.workspace_diff``), or why it cannot be shown."""
    from ..views.files import workspace_diff
    from .files_text import workspace_diff_text

    try:
        return workspace_diff_text(workspace_diff(run_dir, a, b), label_a, label_b)
    except (SupervisorError, OSError, ValueError) as e:
        return Text(f"cannot diff the workspace: {e}", style="yellow")
