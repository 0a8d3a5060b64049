"""The runs list (a runs root, default ``./runs``): Enter opens a run's dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from ..views.fmt import ago
from ..views.runs import RunInfo
from .control import list_runs
from .key_footer import KeyFooter

_STATUS_STYLE = {"running": "green", "crashed": "red", "failed": "red", "succeeded": "cyan", "backoff": "yellow"}


class RunsScreen(Screen[None]):
    """One row per run; refreshed every two seconds while open."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # before the table's own Enter (select the row, which opens it too): the footer shows this key
        Binding("enter", "open", "Open", show=True, priority=True, tooltip="Open the selected run's dashboard"),
        Binding("j", "cursor(1)", "Down", show=False, tooltip="Select the next run"),
        Binding("k", "cursor(-1)", "Up", show=False, tooltip="Select the previous run"),
        Binding("m", "mark", "Mark", tooltip="Mark the selected run to compare (two at most)"),
        Binding("c", "compare", "Compare", tooltip="Compare the two marked runs (or the marked and the selected one)"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Every key, grouped"),
        Binding("q,escape", "app.quit", "Quit", tooltip="Leave agent-supervisor"),
    ]

    DEFAULT_CSS = """
    RunsScreen #runs-title { height: 1; background: $panel; padding: 0 1; text-style: bold; }
    RunsScreen DataTable { height: 1fr; }
    RunsScreen #runs-empty { padding: 1 2; color: $text-muted; }
    """

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.runs: list[RunInfo] = []
        self.marked: list[Path] = []
        """The runs marked to compare (``m``), in the order marked: A then B."""

    def compose(self) -> ComposeResult:
        yield Static(f"runs in {self.root}", id="runs-title")
        table: DataTable[str | Text] = DataTable(cursor_type="row", zebra_stripes=True, id="runs")
        table.add_columns("id", "command", "status", "attempts", "steps", "last activity", "live")
        yield table
        yield Static("", id="runs-empty")
        yield KeyFooter()  # the dashboard's footer: one widget, the same look

    def on_mount(self) -> None:
        self.load()
        self.set_interval(2.0, self.load)
        self.query_one(DataTable).focus()

    @work(thread=True, exclusive=True, group="runs", exit_on_error=False)
    def load(self) -> None:
        """List the runs (a thread: every run directory is read)."""
        runs = list_runs(self.root)
        self.app.call_from_thread(self._show, runs)

    def _show(self, runs: list[RunInfo]) -> None:
        table = self.query_one(DataTable)
        selected = self.runs[table.cursor_row].path if self.runs and 0 <= table.cursor_row < len(self.runs) else None
        self.runs = runs
        table.clear()
        for r in runs:
            cmd = r.command if len(r.command) <= 48 else "…" + r.command[-47:]
            table.add_row(
                ("◆ " if r.path in self.marked else "") + r.id,
                cmd,
                Text(r.status, style=_STATUS_STYLE.get(r.status, "")),
                r.attempts,
                r.steps,
                ago(r.last_activity),
                Text("● live", style="bold green") if r.live else Text("-", style="dim"),
                key=str(r.path),
            )
        if selected is not None:
            for i, r in enumerate(runs):
                if r.path == selected:
                    table.move_cursor(row=i)
        empty = self.query_one("#runs-empty", Static)
        empty.update("" if runs else f"no runs in {self.root}; start one with 'agent-supervisor demo'")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A listing that failed says so (the next one, two seconds later, may work)."""
        from .worker_errors import report_worker_error

        report_worker_error(self, event)

    def action_cursor(self, delta: int) -> None:
        table = self.query_one(DataTable)
        table.move_cursor(row=table.cursor_row + delta)

    @on(DataTable.RowSelected)
    def on_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_open(self) -> None:
        from .dashboard import DashboardScreen

        table = self.query_one(DataTable)
        if not self.runs or not 0 <= table.cursor_row < len(self.runs):
            return
        self.app.push_screen(DashboardScreen(self.runs[table.cursor_row].path))

    def action_mark(self) -> None:
        """Mark (or unmark) the selected run; a third mark drops the oldest."""
        table = self.query_one(DataTable)
        if not self.runs or not 0 <= table.cursor_row < len(self.runs):
            return
        path = self.runs[table.cursor_row].path
        if path in self.marked:
            self.marked.remove(path)
        else:
            self.marked = [*self.marked, path][-2:]
        self._show(self.runs)
        self.notify(f"marked {len(self.marked)} of 2: " + ", ".join(p.name for p in self.marked) if self.marked
                    else "no run marked", timeout=2)

    def action_compare(self) -> None:
        """The compare view of the two marked runs (one marked: against the selected run)."""
        from .compare_screen import CompareScreen

        table = self.query_one(DataTable)
        pair = list(self.marked)
        if len(pair) == 1 and self.runs and 0 <= table.cursor_row < len(self.runs):
            selected = self.runs[table.cursor_row].path
            if selected != pair[0]:
                pair.append(selected)
        if len(pair) != 2:
            self.notify("mark two runs with m, then press c", severity="warning", timeout=3)
            return
        self.app.push_screen(CompareScreen(pair[0], pair[1]))

    def action_help(self) -> None:
        from .help_screen import HelpScreen

        self.app.push_screen(HelpScreen(False))
