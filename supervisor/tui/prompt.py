"""The one-line prompt at the bottom of the dashboard: ``:`` goes to a seq or a checkpoint, ``/`` searches,
``&`` filters, ``W`` asks where to write rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input


class Prompt(Input):
    """Hidden until ``open``; Enter posts ``Prompt.Entered``, Enter or Esc closes it (``Prompt.Closed``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Apply", key_display="Enter", tooltip="Run what the prompt says"),
        Binding("escape", "close", "Cancel", key_display="Esc", tooltip="Close the prompt"),
    ]

    DEFAULT_CSS = """
    Prompt { dock: bottom; display: none; }
    Prompt.-visible { display: block; }
    """

    @dataclass
    class Entered(Message):
        """The user typed ``text`` (stripped; empty only if ``open`` allowed it) and pressed Enter in ``mode``
        (goto, search, filter, export)."""

        mode: str
        text: str

    @dataclass
    class Opened(Message):
        """The prompt opened (the screen's keys give way to it)."""

    @dataclass
    class Closed(Message):
        """The prompt closed: focus goes back to where the user was."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, select_on_focus=False)  # & edits the filter: typing adds to it
        self.mode = ""
        self.allow_empty = False

    @property
    def is_open(self) -> bool:
        return self.has_class("-visible")

    def open(self, mode: str, placeholder: str, value: str = "", *, allow_empty: bool = False) -> None:
        """Show the prompt holding ``value``, with ``placeholder`` saying what Enter does in ``mode``
        (``allow_empty``: Enter on an empty prompt is an answer too)."""
        self.mode = mode
        self.allow_empty = allow_empty
        self.placeholder = placeholder
        self.value = value
        self.cursor_position = len(value)
        self.add_class("-visible")
        self.focus()
        self.post_message(self.Opened())

    def action_close(self) -> None:
        self.remove_class("-visible")
        self.post_message(self.Closed())

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        self.action_close()
        if text or self.allow_empty:
            self.post_message(self.Entered(self.mode, text))
