"""The help screen (``?``): every key, grouped as in lnav and k9s."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Move",
        [
            ("j / k / ↓ / ↑", "next / previous row"),
            ("PgDn / PgUp / space / b", "page down / up"),
            ("g / G / Home / End", "first / last row (G turns follow on)"),
            ("f", "follow new records on / off (off when you move up, as tail -f and lnav)"),
            (":", "go to a seq (negative counts from the end) or a checkpoint name"),
            ("e / E", "next / previous error: a failed step, or a crash, hang or give-up of the supervisor"),
            ("!", "first error"),
            ("] / [", "next / previous checkpoint"),
            ("a", "begin rows on / off: by default a step's begin folds into its step's row (one row per step; "
                  "a step in flight shows its begin row, running)"),
            ("z", "fold / unfold a parent step's nested rows into its row (▸ and +N rows folded; on a nested row: its "
                  "parent's). A nested step's row is indented under its parent's, which stays where the parent began"),
            ("mouse", "click a row to select it, wheel to scroll"),
        ],
    ),
    (
        "Search and filter",
        [
            ("/", "search the raw JSON of every record (smart case)"),
            ("n / N", "next / previous match, with wrap-around"),
            ("&", "filter: show only the rows that pass every term: a text (smart case; \"two words\" quoted), "
                  "kind:step,checkpoint (event: supervisor rows, bad: damaged lines), step:search:* (a glob), errors; "
                  "!term filters out. & again edits it"),
            ("Esc", "clear the filter (q too, while a filter is on)"),
        ],
    ),
    (
        "Bookmarks, copy, export",
        [
            ("B", "bookmark the row, or remove its bookmark (several rows may be)"),
            ("u / U", "next / previous bookmark, with wrap-around"),
            ("y", "copy the row's record (its JSON line) to the clipboard (OSC 52; in tmux: set-clipboard on)"),
            ("Y", "copy the value: on the State tab the state, else the step's output (or error)"),
            ("w", "write rows to a JSONL file (asks for the path): the filtered rows, else the bookmarked, else the selected"),
        ],
    ),
    (
        "Inspect",
        [
            ("i / s / l / c", "record detail / state at the row / agent output / the workspace's files the row's step "
                              "changed, with diffs (✎N on a row: N files)"),
            ("d", "diff the state (and the workspace's files, when the run has a workspace): selected row against "
                  "the marked row, else the previous checkpoint"),
            ("m", "mark the row as the other side of a diff (again: unmark)"),
        ],
    ),
    (
        "Pauses and breakpoints",
        [
            ("p", "answer the paused step the banner above the timeline shows (continue, step, all, edit its inputs, "
                  "give its output, abort), or the agent's question"),
            ("x", "set a breakpoint on the selected row's step name (again: remove it); a live step of that name "
                  "pauses before it runs"),
            ("P", "the run's breakpoints: add a pattern (a glob such as tool:* or llm:*), remove one, clear them"),
        ],
    ),
    (
        "Change (each asks first)",
        [
            ("r", "roll back to the selected checkpoint (live: through the supervisor; offline: on the files)"),
            ("F", "fork the run at the selected record into a new run directory"),
            ("R", "restart the agent (live only)"),
            ("X", "stop the agent (live only)"),
            ("S", "start 'supervise' again on a stopped or failed run, with the command run.json records"),
        ],
    ),
    (
        "Look (kept in settings.json)",
        [
            ("t", "absolute or relative times (since the run's first record)"),
            ("T", "dark or light theme"),
            ("L", "layout: panes side by side, stacked, or by the terminal's width"),
        ],
    ),
    (
        "Screens",
        [
            ("Enter", "open the selected run (runs list)"),
            ("?", "this help"),
            ("q / Esc", "back; quit from the first screen"),
            ("ctrl+p", "command palette: every action by name"),
        ],
    ),
]


class HelpScreen(ModalScreen[None]):
    """Lists every key; any of q, Esc or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape,question_mark", "app.pop_screen", "Close")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 100; max-width: 95%; height: 90%; border: thick $accent; background: $surface; padding: 0 1; }
    """

    def __init__(self, replay: bool) -> None:
        super().__init__()
        self.replay = replay

    def compose(self) -> ComposeResult:
        table = Table(show_header=False, box=None, expand=True, padding=(0, 1))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        if self.replay:
            table.add_row("", "[b]Replay mode[/b]: the cursor is 'now'; the state pane shows the state as of now "
                          "and later rows are dimmed. Read-only, except an offline rollback (asks first).")
        for group, keys in KEYS:
            table.add_row(f"[u]{group}[/u]", "")
            for key, what in keys:
                table.add_row(key, what)
        with VerticalScroll():
            yield Static(table)
