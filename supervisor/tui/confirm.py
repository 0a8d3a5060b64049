"""A confirmation modal: says what will happen, ``y``/Enter confirms, ``n``/Esc cancels."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with ``True`` on confirm, ``False`` on cancel."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Confirm"),
        Binding("n,escape,q", "cancel", "Cancel"),
    ]

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 76; max-width: 95%; height: auto; max-height: 90%;
        border: thick $warning; background: $surface; padding: 1 2;
    }
    ConfirmScreen #confirm-title { text-style: bold; margin-bottom: 1; }
    ConfirmScreen #confirm-body { height: auto; }
    ConfirmScreen Horizontal { height: auto; margin-top: 1; align-horizontal: right; }
    ConfirmScreen Button { margin-left: 2; }
    """

    def __init__(self, title: str, body: str | Text, confirm_label: str = "Confirm") -> None:
        super().__init__()
        self._title = title
        self._body = body
        self.body_text = body.plain if isinstance(body, Text) else body
        self._confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self._title, id="confirm-title")
            yield Static(self._body, id="confirm-body")
            with Horizontal():
                yield Button("Cancel (n)", id="cancel")
                yield Button(f"{self._confirm_label} (y)", variant="warning", id="confirm")

    def update_body(self, body: str | Text) -> None:
        """Show another body (a worker found what the action will do after the dialog opened)."""
        self._body = body
        self.body_text = body.plain if isinstance(body, Text) else body
        for static in self.query("#confirm-body").results(Static):  # none yet: compose or on_mount shows it
            static.update(body)

    def on_mount(self) -> None:
        # a body given between compose and mount (a worker's, through call_from_thread) is not lost
        self.query_one("#confirm-body", Static).update(self._body)
        self.query_one("#cancel", Button).focus()  # the safe choice has the focus, as in k9s

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
