"""The compare view: two runs' timelines aligned row by row by step identity (``views.compare``, the model of
``agent-supervisor compare``), ``]`` and ``[`` to the next and previous difference, and the selected step's
inputs and outputs side by side, A beside B, with the changes between them.

Opened by ``agent-supervisor tui RUN_A --compare RUN_B``, or from the runs list (mark two runs with ``m``, then
``c``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from ..core import state as state_mod
from ..views.compare import SAME, Comparison, Row, compare_runs
from ..views.fmt import dumps_pretty, fmt_cost
from .diff_screen import changes_text
from .key_footer import KeyFooter

_MARK = {SAME: ("=", "dim"), "inputs differ": ("≠", "bold yellow"), "output differs": ("≠", "bold yellow"),
         "failed in A": ("✗", "bold red"), "failed in B": ("✗", "bold red"), "only in A": ("A", "bold cyan"),
         "only in B": ("B", "bold magenta")}


class CompareScreen(Screen[None]):
    """Run A against run B: the aligned steps, the first divergence selected, the selected step's detail."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right_square_bracket", "jump(1)", "Next diff", key_display="]", tooltip="The next step that differs"),
        Binding("left_square_bracket", "jump(-1)", "Prev diff", key_display="[", tooltip="The previous step that differs"),
        Binding("j", "cursor(1)", "Down", show=False, tooltip="The next step"),
        Binding("k", "cursor(-1)", "Up", show=False, tooltip="The previous step"),
        Binding("q,escape", "back", "Back", tooltip="Close the compare view"),
    ]

    DEFAULT_CSS = """
    CompareScreen #compare-title { height: 2; background: $panel; padding: 0 1; }
    CompareScreen DataTable { height: 1fr; }
    CompareScreen #compare-detail-scroll { height: 1fr; border-top: solid $panel-lighten-2; }
    CompareScreen.-wide { layout: horizontal; }
    """

    def __init__(self, run_a: Path, run_b: Path) -> None:
        super().__init__()
        self.run_a = run_a
        self.run_b = run_b
        self.comparison: Comparison | None = None

    def compose(self) -> ComposeResult:
        yield Static(f"A {_label(self.run_a, self.run_b)}\nB {_label(self.run_b, self.run_a)}: comparing…", id="compare-title")
        table: DataTable[str | Text] = DataTable(cursor_type="row", zebra_stripes=True, id="compare-rows")
        table.add_columns(" ", "pos A", "pos B", "step", "verdict")
        yield table
        with VerticalScroll(id="compare-detail-scroll"):
            yield Static("", id="compare-detail")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.load()
        self.query_one(DataTable).focus()

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def load(self) -> None:
        """Align the runs (a thread: both journals are read)."""
        from ..export.pricing import step_cost

        c = compare_runs(self.run_a, self.run_b, price=step_cost)
        self.app.call_from_thread(self._show, c)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        from .worker_errors import report_worker_error

        report_worker_error(self, event)

    def _show(self, c: Comparison) -> None:
        self.comparison = c
        table = self.query_one(DataTable)
        table.clear()
        for i, r in enumerate(c.rows):
            mark, style = _MARK.get(r.verdict, ("?", ""))
            table.add_row(Text(mark, style=style), "-" if r.a is None else str(r.a.pos), "-" if r.b is None else str(r.b.pos),
                          r.name, Text(r.verdict, style=style if r.verdict != SAME else "dim"), key=str(i))
        first = c.first_divergence
        title = self.query_one("#compare-title", Static)
        ta, tb = c.totals_a, c.totals_b
        verdict = "same" if first is None else f"first divergence: {first.name!r} ({first.verdict})"
        title.update(Text.assemble(
            (f"A {_label(self.run_a, self.run_b)}  ", "bold"),
            f"{_n(ta.steps, 'step')}, {_n(ta.failures, 'failure')}, {_n(ta.attempts, 'attempt')}, "
            f"{fmt_cost(ta.cost_usd) or 'no cost'}\n",
            (f"B {_label(self.run_b, self.run_a)}  ", "bold"),
            f"{_n(tb.steps, 'step')}, {_n(tb.failures, 'failure')}, {_n(tb.attempts, 'attempt')}, "
            f"{fmt_cost(tb.cost_usd) or 'no cost'}   ",
            (verdict, "bold yellow" if first is not None else "bold green"),
        ))
        if first is not None:
            table.move_cursor(row=c.rows.index(first))
        self._detail()

    # ------------------------------------------------------------------ navigation
    def action_cursor(self, delta: int) -> None:
        table = self.query_one(DataTable)
        table.move_cursor(row=table.cursor_row + delta)

    def action_jump(self, direction: int) -> None:
        """To the next (``1``) or previous (``-1``) step that differs."""
        c = self.comparison
        if c is None:
            return
        table = self.query_one(DataTable)
        i = table.cursor_row + direction
        while 0 <= i < len(c.rows):
            if c.rows[i].verdict != SAME:
                table.move_cursor(row=i)
                return
            i += direction
        self.notify("no more differences " + ("below" if direction > 0 else "above"), timeout=2)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
        else:
            self.app.exit()

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail()

    # ------------------------------------------------------------------ the detail
    def selected(self) -> Row | None:
        c = self.comparison
        row = self.query_one(DataTable).cursor_row
        return c.rows[row] if c is not None and 0 <= row < len(c.rows) else None

    def _detail(self) -> None:
        r = self.selected()
        self.query_one("#compare-detail", Static).update(detail_text(r) if r is not None else "")


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _label(path: Path, other: Path) -> str:
    """A run's name in the title: its directory's name, with its parent's when the other run has the same name."""
    return path.name if path.name != other.name else f"{path.parent.name}/{path.name}"


def detail_text(r: Row) -> Any:
    """The selected step: what differs, then its inputs and its output (or error), A beside B."""
    a, b = r.a, r.b
    head = Text.assemble((r.name, "bold"), "  ", (r.verdict, _MARK.get(r.verdict, ("", ""))[1] or "bold"))
    grid = Table.grid(expand=True, padding=(0, 2))
    grid.add_column(ratio=1)
    grid.add_column(ratio=1)
    grid.add_row(Text("A", style="bold cyan"), Text("B", style="bold magenta"))
    for what in ("inputs", "output"):
        grid.add_row(Text(what, style="bold"), Text(what, style="bold"))
        grid.add_row(_value(a, what), _value(b, what))
    parts: list[Any] = [head]
    if a is not None and b is not None:
        for what in ("inputs", "output"):
            va, vb = a.rec.get(what), b.rec.get(what)
            if va != vb:
                parts.append(Text(f"{what}, A → B:", style="bold"))
                parts.append(changes_text(state_mod.diff(va, vb)))
    parts.append(grid)
    from rich.console import Group

    return Group(*parts)


def _value(c: Any, what: str) -> Text:
    if c is None:
        return Text("(no such step)", style="dim")
    if what == "output" and not c.ok:
        return Text(c.error, style="red")
    v = c.rec.get(what)
    return Text("(none)", style="dim") if v is None else Text(dumps_pretty(v))
