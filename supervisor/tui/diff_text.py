"""The diff screen's drawings of ``views.value_diff``'s changes: stacked (one column, texts as unified diffs) or
side by side (old left, new right, texts line beside line with the changed words marked). Values are never cut:
long ones wrap."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..core import state as state_mod
from ..views.value_diff import SideRow, ValueChange, changed_spans, pretty, show, side_rows, text_lines, value_changes
from .files_text import diff_line_style  # one colouring of diff lines, the files' too

SIDE_ROWS_MAX = 1000
"""Rows drawn side by side at most: Rich lays a table out at about 2.6 rows a millisecond on the UI thread (1,000
rows: 0.38 s, 4,000: 1.3 s, measured on 2 busy cores); past it a line says how many changes are left, which the
stacked view (``L``, no limit: 20,000 changes in 1.4 s) shows."""
_INDENT = 4
"""The lines below a change's path start this far in."""
_INLINE = 60
"""A value up to this long, on one line, stays on its change's line in the stacked view; a longer one goes below."""
_OP = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}
_MARK = {"red": "bold white on red", "green": "bold black on green"}


def changes_text(changes: list[state_mod.Change] | list[ValueChange], labels: tuple[str, str] | None = None) -> Text:
    """The changes stacked, as one text (the diff screen's plain text, the compare view's detail): added green,
    removed red, changed yellow, each value whole (a long one indented below its path), a text as a unified diff."""
    items = [c if isinstance(c, ValueChange) else ValueChange(c.op, c.pointer or "/", c.old, c.new) for c in changes]
    if not items:
        return Text("no changes", style="dim")
    t = Text()
    for c in items:
        head, body = _parts(c, labels)
        t.append_text(head)
        t.append("\n")
        for line in body.split("\n") if body is not None else []:
            t.append(" " * _INDENT)
            t.append_text(line)
            t.append("\n")
    return t


def stacked(changes: list[ValueChange], labels: tuple[str, str] | None = None) -> RenderableType:
    """``changes_text`` drawn: a long line wraps under its own indent, not back at the left edge."""
    if not changes:
        return Text("no changes", style="dim")
    parts: list[RenderableType] = []
    for c in changes:
        head, body = _parts(c, labels)
        parts.append(head)
        if body is not None:
            parts.append(Padding(body, (0, 0, 0, _INDENT)))
    return Group(*parts)


def _parts(c: ValueChange, labels: tuple[str, str] | None) -> tuple[Text, Text | None]:
    """One change: its line (``~ /path: old → new`` when both are short) and the lines below it (``None``: none),
    a long value as indented JSON, a text as a unified diff."""
    sym, colour = _OP[c.op]
    if c.text:
        return Text(f"{sym} {c.where}:", style=f"bold {colour}"), _lines(
            (line, diff_line_style(line)) for line in text_lines(c.old, c.new, labels))
    values = [c.old, c.new] if c.op == "changed" else [c.new if c.op == "added" else c.old]
    inline = [show(v) for v in values]
    if all(len(x) <= _INLINE and "\\n" not in x for x in inline):  # a short value stays on its path's line
        head = Text()  # no style of its own: the values after the path are not bold
        head.append(f"{sym} {c.where}: ", style=f"bold {colour}")
        if c.op == "changed":
            head.append(inline[0], style="red")
            head.append(" → ", style="dim")
            head.append(inline[1], style="green")
        else:
            head.append(inline[0], style=colour)
        return head, None
    if c.op == "changed":
        body = [(f"- {x}", "red") for x in pretty(c.old).split("\n")] + [(f"+ {x}", "green") for x in pretty(c.new).split("\n")]
    else:
        body = [(x, colour) for x in pretty(values[0]).split("\n")]
    return Text(f"{sym} {c.where}:", style=f"bold {colour}"), _lines(body)


def _lines(lines: Iterable[tuple[str, str]]) -> Text:
    """Styled lines as one text (no newline after the last)."""
    return Text("\n").join(Text(line, style=style) for line, style in lines)


def unified_text(a: Any, b: Any, label_a: str, label_b: str) -> Text:
    """A unified diff of the two documents as indented JSON, a string with line breaks shown as its lines."""
    t = Text()
    for line in difflib.unified_diff(pretty(a).splitlines(), pretty(b).splitlines(), label_a, label_b, lineterm="", n=3):
        t.append(line + "\n", style=diff_line_style(line))
    if not t:
        t.append("the two states are identical", style="dim")
    return t


def side_by_side(changes: list[ValueChange], label_a: str, label_b: str) -> RenderableType:
    """The changes as a two-sided table: each path, then its old value beside its new one (a text: line beside
    line, numbered, changed words marked); at most ``SIDE_ROWS_MAX`` rows."""
    if not changes:
        return Text("no changes", style="dim")
    table = Table(box=box.MINIMAL, border_style="dim", expand=True, padding=(0, 1), show_edge=False, pad_edge=False)
    table.add_column("", justify="right", style="dim", no_wrap=True, min_width=1)
    table.add_column(Text(label_a, style="bold red"), ratio=1, overflow="fold")
    table.add_column("", justify="right", style="dim", no_wrap=True, min_width=1)
    table.add_column(Text(label_b, style="bold green"), ratio=1, overflow="fold")
    rows = 0
    for n, c in enumerate(changes):
        if rows >= SIDE_ROWS_MAX:
            more = len(changes) - n
            table.add_row("", Text(f"… {more} more change{'s' if more != 1 else ''}: L shows them all stacked",
                                   style="yellow"), "", "")
            break
        if n:
            table.add_section()  # a rule between two changes
        rows += _add_change(table, c)
    return table


def _add_change(table: Table, c: ValueChange) -> int:
    """The rows of one change; how many."""
    sym, colour = _OP[c.op]
    table.add_row("", Text(f"{sym} {c.where}", style=f"bold {colour}"), "", Text(f"{sym} {c.where}", style=f"bold {colour}"))
    if not c.text:
        left = Text(pretty(c.old), style="red") if c.op != "added" else Text("(absent)", style="dim")
        right = Text(pretty(c.new), style="green") if c.op != "removed" else Text("(absent)", style="dim")
        table.add_row("", left, "", right)
        return 2
    rows = side_rows(c.old, c.new)
    for r in rows:
        table.add_row(*_cells(r))
    return 1 + len(rows)


def _cells(r: SideRow) -> tuple[str, Text, str, Text]:
    """A text row's four cells: line number and line, old then new."""
    a = Text(r.a or "", style="red" if r.tag in ("delete", "replace") else "")
    b = Text(r.b or "", style="green" if r.tag in ("insert", "replace") else "")
    if r.tag == "gap":
        a.stylize("dim italic")
        b.stylize("dim italic")
    elif r.tag == "replace" and r.a is not None and r.b is not None:
        sa, sb = changed_spans(r.a, r.b)
        for start, end in sa:
            a.stylize(_MARK["red"], start, end)
        for start, end in sb:
            b.stylize(_MARK["green"], start, end)
    return ("" if r.a_no is None else str(r.a_no)), a, ("" if r.b_no is None else str(r.b_no)), b


def diff_views(a: Any, b: Any, label_a: str, label_b: str) -> tuple[list[ValueChange], Text, Text]:
    """The changes, their stacked text and the unified diff of the two states (in the diff screen's worker)."""
    changes = value_changes(a, b)
    return changes, changes_text(changes), unified_text(a, b, label_a, label_b)


__all__ = ["SIDE_ROWS_MAX", "changes_text", "diff_views", "side_by_side", "stacked", "unified_text"]
