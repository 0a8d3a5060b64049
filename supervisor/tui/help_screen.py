"""The help screen (``?``): every key of the screen it was opened from, grouped as in lnav and k9s."""

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
            ("Home / G / End", "first / last row (G and End turn follow on)"),
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
            ("/", "search every record (smart case; a model call's conversation only with inputs:word), "
                  "with the terms & takes; begin rows stay folded"),
            ("n / N", "next / previous match, with wrap-around"),
            ("&", "filter: show only the rows that pass every term: a text (smart case; \"two words\" quoted), "
                  "output:T, error:T, inputs:T (that field holds T), step:search:* (a glob), model:M, attempt:N, "
                  "kind:step,checkpoint (event: supervisor rows, bad: damaged lines), errors; "
                  "!term filters out. & again edits it"),
            ("Esc", "clear the search or the filter; Esc closes the innermost open thing and never quits"),
        ],
    ),
    (
        "Bookmarks, copy, export",
        [
            ("B", "bookmark the row, or remove its bookmark (several rows may be)"),
            ("u / U", "next / previous bookmark, with wrap-around"),
            ("y", "copy the row's record (its JSON line) to the clipboard (OSC 52; in tmux: set-clipboard on)"),
            ("Y", "copy the value: on the State tab the state, else the step's output (or error)"),
            ("W", "write rows to a JSONL file (asks for the path): the filtered rows, else the bookmarked, else the selected"),
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
            ("w", "wrap long values in every pane, or let them run off to the right (kept in settings.json)"),
            ("g", "timeline (Gantt) of the selected row's attempt: steps in flight, their overlap, retries grouped under their step"),
            ("Tab", "focus the detail pane; there: ←/→ scroll sideways (unwrapped), / searches its text, n / N move, "
                    "h shows a model call's earlier messages, v its raw record"),
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
            ("Esc", "close what is open (a search, a filter, a pane's focus, a screen); never quits"),
            ("q", "back; quit from the first screen"),
            ("ctrl+p", "command palette: every action by name"),
        ],
    ),
]


RUNS_KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Runs list",
        [
            ("j / k / ↓ / ↑", "next / previous run (newest activity first; the list is read again every 2 s)"),
            ("Enter", "open the selected run's dashboard (mouse: click the run)"),
            ("m", "mark the selected run to compare (◆; two at most, a third drops the oldest; again: unmark)"),
            ("c", "compare the two marked runs step by step (one marked: against the selected run)"),
            ("ctrl+p", "command palette: every action by name"),
            ("?", "this help"),
            ("q", "quit"),
        ],
    ),
    (
        "Columns",
        [
            ("run", "the run directory's name (runs/<run>); too long for the screen, it loses its middle (…)"),
            ("status", "coloured as in the dashboard: green running or succeeded; yellow backoff, paused, stopped; "
                       "red crashed or failed; ● a supervisor watches the run now"),
            ("steps", "finished steps of the effective history (- for a journal over 256 MB)"),
            ("attempts", "agent processes started (run.json)"),
            ("activity", "the last write to the run directory"),
            ("command", "the agent's command (run.json): the rest of the width; too long, it loses its middle (…)"),
        ],
    ),
]
"""The runs list's keys and what its columns mean."""

DIFF_KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Diff",
        [
            ("c / u / f", "Changes (path by path) / Unified (the two states as JSON) / Files (a run with a workspace)"),
            ("L", "Changes side by side or stacked (this screen; by default side by side from 120 columns, or as the "
                  "layout setting says)"),
            ("↓ / ↑ / PgDn / PgUp", "scroll"),
            ("?", "this help"),
            ("q / Esc", "back to the dashboard"),
        ],
    ),
    (
        "Reading it",
        [
            ("+ / - / ~", "a path added (green), removed (red), changed (yellow); values are whole, long ones wrap"),
            ("text", "a string with lines (code, a prompt) or a long one is diffed line by line, as "
                     "'replay --verify' prints it; side by side the changed words are marked"),
            ("⋯ N unchanged lines", "lines left out between changes (two are kept around each)"),
        ],
    ),
]
"""The diff screen's keys."""


class HelpScreen(ModalScreen[None]):
    """Lists every key; any of q, Esc or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape,question_mark", "app.pop_screen", "Close")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 100; max-width: 95%; height: 90%; border: thick $accent; background: $surface; padding: 0 1; }
    """

    def __init__(self, replay: bool = False, *, keys: list[tuple[str, list[tuple[str, str]]]] = KEYS,
                 title: str = "") -> None:
        super().__init__()
        self.replay = replay
        self.keys = keys
        """The groups of keys shown: the dashboard's (``KEYS``), the runs list's or the diff screen's."""
        self.title_text = title

    def compose(self) -> ComposeResult:
        table = Table(show_header=False, box=None, expand=True, padding=(0, 1))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        if self.title_text:
            table.add_row(f"[b]{self.title_text}[/b]", "")
        if self.replay:
            table.add_row("", "[b]Replay mode[/b]: the cursor is 'now'; the state pane shows the state as of now "
                          "and later rows are dimmed. Read-only, except an offline rollback (asks first).")
        for group, keys in self.keys:
            table.add_row(f"[u]{group}[/u]", "")
            for key, what in keys:
                table.add_row(key, what)
        with VerticalScroll():
            yield Static(table)
