"""How one JSON value became another, for people: the path-level changes (``core.state.diff``), with a string
that holds lines (code, a prompt) or is long diffed as text, line by line.

One model for every front end: ``replay --verify``, ``replay --live`` and ``compare`` print ``format_value_diff``'s
lines; the diff screen draws the same changes stacked (``text_lines``) or side by side (``side_rows``). No Textual.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

import orjson

from ..core import state as state_mod
from .fmt import dumps_pretty

__all__ = [
    "CONTEXT", "SideRow", "ValueChange", "changed_spans", "format_value_diff", "pretty", "show", "side_rows",
    "text_lines", "value_changes",
]

TEXT_CHARS = 100
"""Two strings longer than this together (or either with a line break) are diffed as text, not shown whole."""
CONTEXT = 2
"""Unchanged lines kept around each changed run of lines (``diff -U2``): enough to place it, short to read."""
_SPAN_TOKENS = 4000
"""Past this many words in a pair of lines, the whole lines are marked changed (word matching is quadratic)."""
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
_STR_LINE = re.compile(r'^(\s*)((?:"(?:[^"\\]|\\.)*": )?)("(?:[^"\\]|\\.)*")(,?)$')
"""A line of indented JSON that is a string, with its key if it has one."""


@dataclass(frozen=True, slots=True)
class ValueChange:
    """One path-level change: ``op`` is ``added``, ``removed`` or ``changed``; ``where`` its JSON pointer (``/``: the
    whole value)."""

    op: str
    where: str
    old: Any = None
    new: Any = None

    @property
    def text(self) -> bool:
        """Both sides are strings to diff as text (lines, or too long to read side by side on one line)."""
        o, n = self.old, self.new
        return (self.op == "changed" and isinstance(o, str) and isinstance(n, str)
                and ("\n" in o or "\n" in n or len(o) + len(n) > TEXT_CHARS))


@dataclass(frozen=True, slots=True)
class SideRow:
    """One row of a side-by-side text diff: ``tag`` is ``equal``, ``delete``, ``insert``, ``replace`` or ``gap``
    (unchanged lines left out: ``a`` and ``b`` say how many); a side without a line has ``None``."""

    tag: str
    a_no: int | None
    a: str | None
    b_no: int | None
    b: str | None


def value_changes(old: Any, new: Any) -> list[ValueChange]:
    """The changes from ``old`` to ``new``, by JSON equality (key order is not a change)."""
    return [ValueChange(c.op, c.pointer or "/", c.old, c.new) for c in state_mod.diff(old, new)]


def show(value: Any, width: int | None = None) -> str:
    """A value on one line, a string quoted (so an empty or blank one is visible); cut to ``width`` (``None``: whole)."""
    text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS, default=repr).decode()
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def pretty(value: Any, limit: int = 200_000) -> str:
    """Indented JSON, except that a string with line breaks is shown as its lines, indented under ``"key": |``
    (YAML's block), so code and prompts read as text; cut at ``limit`` characters as ``dumps_pretty``."""
    text = dumps_pretty(value, limit)
    if "\\n" not in text:
        return text
    out: list[str] = []
    for line in text.split("\n"):
        m = _STR_LINE.match(line) if "\\n" in line else None
        s = orjson.loads(m[3]) if m else None
        if m is None or not isinstance(s, str) or "\n" not in s:
            out.append(line)
            continue
        out.append(f"{m[1]}{m[2]}|")
        out.extend(f"{m[1]}  {x}" for x in s.split("\n"))
    return "\n".join(out)


def text_lines(old: str, new: str, labels: tuple[str, str] | None = None, context: int = CONTEXT) -> list[str]:
    """The unified diff of two texts, line by line (``labels``: the ``---``/``+++`` names; ``None``: no such lines)."""
    udiff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), *(labels or ("", "")), lineterm="", n=context))
    return udiff if labels is not None else udiff[2:]


def format_value_diff(old: Any, new: Any, indent: str = "    ", labels: tuple[str, str] = ("recorded", "new"),
                      width: int | None = 100) -> list[str]:
    """Lines showing how ``old`` became ``new``: path-level changes, texts as a unified diff (its two sides named
    ``labels``); a value on one line is cut to ``width`` (``None``: whole)."""
    lines: list[str] = []
    half = None if width is None else width // 2 - 2
    for c in value_changes(old, new):
        if c.op == "added":
            lines.append(f"{indent}+ {c.where}: {show(c.new, width)}")
        elif c.op == "removed":
            lines.append(f"{indent}- {c.where}: {show(c.old, width)}")
        elif c.text:
            lines.append(f"{indent}~ {c.where}:")
            lines.extend(f"{indent}  {line}" for line in text_lines(c.old, c.new, labels))
        else:
            lines.append(f"{indent}~ {c.where}: {show(c.old, half)} -> {show(c.new, half)}")
    return lines


def side_rows(old: str, new: str, context: int = CONTEXT) -> list[SideRow]:
    """Two texts line by line, side by side: the same hunks as ``text_lines`` (a changed line beside the line it
    replaced), with a ``gap`` row for each run of unchanged lines left out."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[SideRow] = []
    at = 0  # the next line of a not shown yet
    for group in difflib.SequenceMatcher(None, a, b).get_grouped_opcodes(context):
        if group[0][1] > at:
            rows.append(_gap(group[0][1] - at))
        for tag, i1, i2, j1, j2 in group:
            rows.extend(_rows(tag, a, i1, i2, b, j1, j2))
        at = group[-1][2]
    if rows and at < len(a):
        rows.append(_gap(len(a) - at))
    return rows


def _gap(n: int) -> SideRow:
    words = f"⋯ {n} unchanged line" + ("" if n == 1 else "s")
    return SideRow("gap", None, words, None, words)


def _rows(tag: str, a: list[str], i1: int, i2: int, b: list[str], j1: int, j2: int) -> list[SideRow]:
    """One opcode's rows: a replaced run is paired line by line, the longer side's rest beside nothing."""
    if tag == "equal":
        return [SideRow(tag, i + 1, a[i], j + 1, b[j]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]
    rows = []
    for k in range(max(i2 - i1, j2 - j1)):
        i, j = i1 + k, j1 + k
        left, right = i < i2, j < j2
        rows.append(SideRow(tag if left and right else "delete" if left else "insert",
                            i + 1 if left else None, a[i] if left else None,
                            j + 1 if right else None, b[j] if right else None))
    return rows


def changed_spans(a: str, b: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The character ranges of ``a`` and of ``b`` that differ, word by word (for a replaced line beside its new one)."""
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    if len(ta) + len(tb) > _SPAN_TOKENS:
        return [(0, len(a))], [(0, len(b))]
    pa, pb = _offsets(ta), _offsets(tb)
    sa: list[tuple[int, int]] = []
    sb: list[tuple[int, int]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            sa.append((pa[i1], pa[i2]))
        if j2 > j1:
            sb.append((pb[j1], pb[j2]))
    return sa, sb


def _offsets(tokens: list[str]) -> list[int]:
    """Where each token starts, and the end."""
    out = [0]
    for t in tokens:
        out.append(out[-1] + len(t))
    return out
