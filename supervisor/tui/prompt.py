"""The one-line prompt at the bottom of the dashboard: ``:`` goes to a seq or a checkpoint, ``/`` searches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input


class Prompt(Input):
    """Hidden until ``open``; Enter posts ``Prompt.Entered``, Enter or Esc closes it (``Prompt.Closed``)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Cancel", show=False)]

    DEFAULT_CSS = """
    Prompt { dock: bottom; display: none; }
    Prompt.-visible { display: block; }
    """

    @dataclass
    class Entered(Message):
        """The user typed ``text`` (stripped, never empty) and pressed Enter in ``mode`` (goto or search)."""

        mode: str
        text: str

    @dataclass
    class Closed(Message):
        """The prompt closed: focus goes back to where the user was."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.mode = ""

    @property
    def is_open(self) -> bool:
        return self.has_class("-visible")

    def open(self, mode: str, placeholder: str) -> None:
        """Show the prompt empty, with ``placeholder`` saying what Enter does in ``mode``."""
        self.mode = mode
        self.placeholder = placeholder
        self.value = ""
        self.add_class("-visible")
        self.focus()

    def action_close(self) -> None:
        self.remove_class("-visible")
        self.post_message(self.Closed())

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        self.action_close()
        if text:
            self.post_message(self.Entered(self.mode, text))
