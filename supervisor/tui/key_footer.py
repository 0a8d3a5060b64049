"""The key footer: one widget that draws the current screen's keys as one line of text.

Textual's ``Footer`` is a container of one ``FooterKey`` widget per key, composed again whenever the bindings
change: on the dashboard (some 17 keys) each is mounted, styled twice and laid out before the first frame
(measured: 40-60 ms of the start, and again at every change of mode). This one draws the same line, in the
same colours (the theme's ``footer-*`` variables), from ``screen.active_bindings`` at render time: only the
keys that work now (a ``check_action`` that returns ``False`` leaves a key out), the first key of each action,
in the bindings' order, the command palette's key on the right; the keys that do not fit are cut on the
right. A click on a key presses it; hovering shows its tooltip.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widget import Widget


class KeyFooter(Widget, can_focus=False):
    """The keys that work now, on one line at the bottom of the screen."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES: ClassVar[set[str]] = {"key-footer--key", "key-footer--description", "key-footer--separator"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        width: 1fr;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        text-overflow: clip;
        .key-footer--key { color: $footer-key-foreground; background: $footer-key-background; text-style: bold; }
        .key-footer--description { color: $footer-description-foreground; background: $footer-description-background; }
        .key-footer--separator { color: $foreground 20%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:  # `id`: Textual's name
        super().__init__(id=id)
        self._spans: list[tuple[int, int, Binding, str]] = []
        """Where each key is on the line as last drawn: start and end column, its binding, its tooltip."""

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Any) -> None:
        self.refresh()

    def keys(self) -> list[tuple[Binding, bool, str]]:
        """The keys shown, in order: the binding, whether it is enabled, its tooltip (the palette's key last)."""
        active = self.screen.active_bindings
        palette_key = self.app.COMMAND_PALETTE_BINDING if self.app.ENABLE_COMMAND_PALETTE else None
        seen: set[str] = set()
        out: list[tuple[Binding, bool, str]] = []
        for key, (_node, binding, enabled, tooltip) in active.items():
            if not binding.show or binding.action in seen or key == palette_key:
                continue
            seen.add(binding.action)
            out.append((binding, enabled, tooltip or binding.tooltip or binding.description))
        if palette_key is not None and palette_key in active:
            _node, binding, enabled, tooltip = active[palette_key]
            out.append((binding, enabled, tooltip or binding.tooltip or binding.description))
        return out

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-footer--key")
        desc_style = self.get_component_rich_style("key-footer--description")
        keys = self.keys()
        palette = keys.pop() if keys and keys[-1][0].key == self.app.COMMAND_PALETTE_BINDING else None
        width = self.size.width
        right = Text()
        if palette is not None:  # as Footer docks it (compact): a thin bar, the key, the description, one space
            binding, enabled, _tip = palette
            right.append("▏", self.get_component_rich_style("key-footer--separator"))
            right.append(self.app.get_key_display(binding), key_style)
            right.append(f" {binding.description}", desc_style)
            right.append(" ")
            if not enabled:
                right.stylize(Style(dim=True))
        left = Text()
        spans: list[tuple[int, int, Binding, str]] = []
        room = width - right.cell_len
        for binding, enabled, tip in keys:
            piece = Text()
            piece.append(f" {self.app.get_key_display(binding)} ", key_style)
            piece.append(f"{binding.description} ", desc_style)
            if not enabled:
                piece.stylize(Style(dim=True))
            start = left.cell_len
            if start >= room:
                break
            left.append_text(piece)
            spans.append((start, min(start + piece.cell_len, room), binding, tip))
        left.truncate(max(room, 0))
        left.pad_right(max(room - left.cell_len, 0))
        if palette is not None:
            spans.append((room, width, palette[0], palette[2]))
        self._spans = spans
        left.append_text(right)
        return left

    def _binding_at(self, x: int) -> tuple[Binding, str] | None:
        for start, end, binding, tip in self._spans:
            if start <= x < end:
                return binding, tip
        return None

    def on_click(self, event: events.Click) -> None:
        hit = self._binding_at(event.x)
        if hit is not None:
            self.app.simulate_key(hit[0].key.split(",")[0])

    def on_mouse_move(self, event: events.MouseMove) -> None:
        hit = self._binding_at(event.x)
        self.tooltip = hit[1] if hit is not None else None
