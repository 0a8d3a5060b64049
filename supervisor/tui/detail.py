"""The detail of the selected row: the record as coloured JSON, and the state at that step."""

from __future__ import annotations

from typing import Any

from rich.json import JSON
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..core.journal import Entry
from ..core.records import BadLine
from .timeline_model import dumps_pretty

_JSON_LIMIT = 200_000
_HIGHLIGHT_LIMIT = 40_000
"""Past this many characters the JSON is shown plain: highlighting megabytes takes seconds."""


def json_renderable(value: Any, title: str = "") -> JSON | Text:
    """Pretty, coloured JSON; plain text past ``_JSON_LIMIT`` characters (huge outputs stay fast)."""
    text = dumps_pretty(value, _JSON_LIMIT)
    if len(text) >= _HIGHLIGHT_LIMIT:
        return Text(text)
    return JSON(text, indent=2)


class JsonPane(VerticalScroll):
    """A scrollable pane that shows one JSON document or a message."""

    DEFAULT_CSS = """
    JsonPane { height: 1fr; }
    JsonPane > Static { width: auto; }
    """

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static("", id=f"{self.id}-body" if self.id else None)

    text: str = ""
    """The plain text shown (for tests and copy)."""

    @property
    def body(self) -> Static:
        return self.query_one(Static)

    def show_value(self, value: Any, heading: str = "") -> None:
        """Show ``value`` as coloured JSON under an optional heading."""
        rend = json_renderable(value)
        self.text = (heading + "\n" if heading else "") + (rend.plain if isinstance(rend, Text) else rend.text.plain)
        if heading:
            from rich.console import Group

            self.body.update(Group(Text(heading, style="bold"), rend))
        else:
            self.body.update(rend)

    def show_text(self, text: str, style: str = "") -> None:
        self.text = text
        self.body.update(Text(text, style=style))

    def show_entry(self, ent: Entry | None, heading: str = "") -> None:
        """Show a journal entry (a bad line as its position and text)."""
        if ent is None:
            self.show_text("(blank line or not loaded yet)", "dim")
        elif isinstance(ent, BadLine):
            self.show_text(f"{ent.path}:{ent.line}: skipped, {ent.reason}\n\n{ent.text}", "red")
        else:
            self.show_value(ent, heading)
