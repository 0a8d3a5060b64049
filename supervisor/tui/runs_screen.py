"""The runs list (a runs root, default ``./runs``): Enter opens a run's dashboard.

A run is named by its directory (``run.json``'s id may be the same word for many runs); its status has the
dashboard's colours, ``●`` when a supervisor watches it. The columns take the screen's width: the figures as wide
as their widest cell, the name and the command share the rest; one too long loses its middle (a run's directory
name starts with its time and ends with its words; a command starts with its program and ends with its arguments).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from ..views.fmt import ago
from ..views.runs import RunInfo
from .control import list_runs
from .key_footer import KeyFooter
from .status_bar import STATE_CLASSES, state_class

_HEADERS = ("run", "status", "steps", "attempts", "activity", "command")
_MIN = 12
"""The name's and the command's narrowest column."""
_RESERVED = 2
"""Columns kept for the table's vertical scrollbar."""


class RunsScreen(Screen[None]):
    """One row per run; refreshed every two seconds while open."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # before the table's own Enter (select the row, which opens it too): the footer shows this key
        Binding("enter", "open", "Open", show=True, priority=True, tooltip="Open the selected run's dashboard"),
        Binding("j", "cursor(1)", "Down", show=False, tooltip="Select the next run"),
        Binding("k", "cursor(-1)", "Up", show=False, tooltip="Select the previous run"),
        Binding("m", "mark", "Mark", tooltip="Mark the selected run to compare (two at most)"),
        Binding("c", "compare", "Compare", tooltip="Compare the two marked runs (or the marked and the selected one)"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="The runs list's keys and columns"),
        Binding("q", "app.quit", "Quit", tooltip="Leave agent-supervisor"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = set(STATE_CLASSES)
    """The dashboard's status colours (``status_bar``), for the status column."""

    DEFAULT_CSS = """
    RunsScreen > .status--ok { color: $success; text-style: bold; }
    RunsScreen > .status--warn { color: $warning; text-style: bold; }
    RunsScreen > .status--error { color: $error; text-style: bold; }
    RunsScreen > .status--accent { color: $secondary; text-style: bold; }
    RunsScreen > .status--id { text-style: bold; }
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
        self.widths: tuple[int, ...] = ()
        """The columns' widths as last laid out (``_HEADERS``' order)."""

    def compose(self) -> ComposeResult:
        yield Static(f"runs in {self.root}", id="runs-title")
        yield DataTable[str | Text](cursor_type="row", zebra_stripes=True, id="runs")
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

    def _cells(self, r: RunInfo) -> list[str]:
        """A run's cells as text, before the widths are known."""
        status = ("● " if r.live else "") + r.status
        return [("◆ " if r.path in self.marked else "") + r.name, status, r.steps, r.attempts, ago(r.last_activity),
                r.command]

    def _layout(self, rows: list[list[str]]) -> tuple[int, ...]:
        """The figures' columns as wide as their widest cell; the name and the command share what is left of the
        screen: each its widest cell if both fit, else the name at most half and the command the rest."""
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(_HEADERS)]
        room = (self.size.width or 80) - _RESERVED - 2 * len(_HEADERS)  # a cell has one blank each side
        shared = room - sum(widths[1:5])
        widths[0] = min(widths[0], max(_MIN, shared - widths[5], shared // 2))
        widths[5] = max(_MIN, shared - widths[0])
        return tuple(widths)

    def _show(self, runs: list[RunInfo]) -> None:
        table = self.query_one(DataTable)
        selected = self.runs[table.cursor_row].path if self.runs and 0 <= table.cursor_row < len(self.runs) else None
        self.runs = runs
        rows = [self._cells(r) for r in runs]
        widths = self._layout(rows)
        if widths != self.widths:  # new widths: the columns again (the rows go with them)
            self.widths = widths
            table.clear(columns=True)
            for h, w in zip(_HEADERS, widths, strict=True):
                table.add_column(Text(h, justify="right") if h in ("steps", "attempts") else h, width=w, key=h)
        else:
            table.clear()
        for r, cells in zip(runs, rows, strict=True):
            table.add_row(*self._row(r, cells, widths), key=str(r.path))
        if selected is not None:
            for i, r in enumerate(runs):
                if r.path == selected:
                    table.move_cursor(row=i)
        empty = self.query_one("#runs-empty", Static)
        empty.update("" if runs else f"no runs in {self.root}; start one with 'agent-supervisor demo'")

    def _row(self, r: RunInfo, cells: list[str], widths: tuple[int, ...]) -> list[str | Text]:
        """One run's cells fitted to ``widths``: a name or command too long loses its middle."""
        name, status, steps, attempts, activity, command = cells
        name, command = _middle_cut(name, widths[0]), _middle_cut(command, widths[5])
        style = self.get_component_rich_style(state_class(r.status), partial=True)
        return [name, Text(status, style=style), Text(steps, justify="right"), Text(attempts, justify="right"),
                activity, command]

    def on_resize(self, event: events.Resize) -> None:
        if self.runs:
            self._show(self.runs)

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
        from .help_screen import RUNS_KEYS, HelpScreen


        self.app.push_screen(HelpScreen(keys=RUNS_KEYS, title="Runs list keys"))


def _middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters: its start (two fifths) and its end, an ellipsis between."""
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]
