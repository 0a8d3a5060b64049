"""A call view's sections (``views.call_view``) as the record pane's texts: titles muted, roles coloured, tool calls
one a line, a failed step's traceback as code, the bookkeeping dimmed. Imported when the first step is shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from rich.style import Style
from rich.text import Text

if TYPE_CHECKING:
    from ..views.call_text import Turn
    from ..views.call_view import Section

Parts = list[tuple[Text, bool]]


class JsonPane(Protocol):
    """What of the record pane (``detail.JsonPane``) the sections take: its styles, its folding, its JSON texts
    (a protocol: ``detail`` imports this module, not the other way round)."""

    show_history: bool

    def _st(self, name: str) -> Style: ...

    def value_parts(self, value: Any, heading: str = "", *, dim: bool = False) -> Parts: ...

def section_parts(pane: JsonPane, sec: Section) -> Parts:
    """The texts of one section: its title rule, then its body by its form."""
    muted = pane._st("jsonpane--muted")
    title = Text(f"── {sec.title}", style=muted)
    if sec.form == "chat":
        title.append("  (h shows the earlier messages)" if sec.history and not pane.show_history else "", style=muted)
        return [(title, False), *_chat(pane, sec)]
    if sec.form == "error":
        return _error(pane, sec.value)  # no title: its first line says it (✗ and the error)
    if sec.form == "json":
        return [(title, False), *pane.value_parts(sec.value, dim=sec.dim)]
    if sec.form == "text":
        return [(title, False), (Text(str(sec.value)), sec.markdown)]
    if sec.form == "tools":
        t = Text()
        for i, line in enumerate(sec.value):
            t.append("→ ", style=pane._st("jsonpane--frame"))
            t.append(line + ("\n" if i < len(sec.value) - 1 else ""))
        return [(title, False), (t, False)]
    return [(title, False), (_facts(pane, sec.value), False)]


def _facts(pane: JsonPane, facts: list[tuple[str, str]]) -> Text:
    muted = pane._st("jsonpane--muted")
    err = pane._st("jsonpane--error")
    t = Text()
    for i, (label, value) in enumerate(facts):
        t.append(f"{label:>9}  ", style=muted)
        failed = label == "status" and ("✗" in value or value == "failed")
        t.append(value + ("\n" if i < len(facts) - 1 else ""), style=err if failed else Style())
    return t


def _error(pane: JsonPane, value: Any) -> Parts:
    """A failed step's error: its traceback as code and the rest as JSON; a text as one red line."""
    err = pane._st("jsonpane--error")
    if isinstance(value, str):
        return [(Text(f"✗ {value}", style=err), False)]
    parts = pane.value_parts({"error": value})
    if isinstance(value, dict) and isinstance(value.get("traceback"), str) and value["traceback"].strip():
        return parts  # the traceback's first line says it
    line = f"{value.get('type') or 'error'}: {value.get('message', '')}" if isinstance(value, dict) else str(value)
    return [(Text(f"✗ {line}", style=err), False), *parts]


def _turn(pane: JsonPane, turn: Turn) -> Text:
    t = Text()
    t.append(f"{turn.role}: ", style=pane._st("jsonpane--frame") + Style(bold=True))
    t.append(turn.text)
    return t


def _chat(pane: JsonPane, sec: Section) -> Parts:
    """The conversation: the earlier history folded to a line (``h``: every message in full), the new ones in full."""
    turns: list[Turn] = sec.value
    out: Parts = []
    if sec.history and not pane.show_history:
        n = sec.history
        out.append((Text(f"▸ {n} earlier message{'s' if n != 1 else ''} folded: "
                         + _roles(turns[:n]), style=pane._st("jsonpane--muted")), False))
        turns = turns[n:]
    elif not turns:
        out.append((Text("(no messages)", style=pane._st("jsonpane--muted")), False))
    for turn in turns:
        out.append((_turn(pane, turn), False))
    return out


def _roles(turns: list[Turn]) -> str:
    """``system, user x3, assistant x2, tool x2``: who spoke in the folded history, in the order they first did."""
    counts: dict[str, int] = {}
    for t in turns:
        counts[t.role] = counts.get(t.role, 0) + 1
    return ", ".join(f"{r} x{n}" if n > 1 else r for r, n in counts.items())
