"""The four private Textual internals the first frame relies on, in one place: checked on Textual 8.2 (8.2.8).

Each override below calls Textual's own method and adds one step around it; the app, the dashboard and the
timeline subclass these bases instead of overriding the private names themselves. ``pyproject.toml`` pins
``textual`` to the minor versions these were checked on, and ``tests/tui/test_textual_hooks.py`` fails with a
clear message when a new Textual renames or changes one of them.
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView

__all__ = ["HOOKS", "FirstFrameApp", "FrameGatedScreen", "SizeHookedScrollView", "in_batch_update"]

HOOKS: dict[str, tuple[type[Any], str, tuple[str, ...]]] = {
    # what is relied on -> (Textual's class, the private name, its parameters after self; () for an attribute)
    "App._ready": (App, "_ready", ()),
    "App._batch_count": (App, "_batch_count", ()),
    "Screen._compositor_refresh": (Screen, "_compositor_refresh", ()),
    "ScrollView._size_updated": (ScrollView, "_size_updated", ("size", "virtual_size", "container_size", "layout")),
}
"""The private names overridden or read here (the test checks each on the installed Textual)."""


def in_batch_update(app: App[Any]) -> bool:
    """Whether ``app`` is inside a batch update (``App._batch_count``, private).

    Why: Textual drops every frame drawn inside a batch update (``App._display``) and starts inside one, so
    drawing there only costs time; there is no public way to ask.
    """
    return bool(app._batch_count)


class FirstFrameApp(App[int]):
    """An app told when the start's batch update is over (``App._ready``, private): :meth:`start_ready`."""

    async def _ready(self) -> None:
        """Why: Textual starts inside a batch update, and a screen's ``call_after_refresh`` callbacks run before any
        frame is written. Work started from them (the journal scan, a watcher's imports) took the GIL from the
        first frame's rendering (200 ms later on a 1M-record run); ``_ready`` is the one point after the start's
        batch that Textual offers, and it has no public event."""
        await super()._ready()
        self.start_ready()

    def start_ready(self) -> None:
        """Called once the start's batch update is over, before the first frame is painted."""


class FrameGatedScreen(Screen[None]):
    """A screen that decides when its frames are drawn (``Screen._compositor_refresh``, private).

    Subclasses say :meth:`may_draw` (hold the first frame until the screen is complete) and get :meth:`drawn`
    after each frame.
    """

    def _compositor_refresh(self) -> None:
        """Why: drawing the whole dashboard inside the start's batch update (15-20 ms) only delays the first frame
        the terminal gets (Textual drops it); left undrawn, the regions stay dirty and the next frame after the
        batch draws them. And the first frame waits for the whole first screen: drawn at once, the terminal got a
        frame without the record pane or the status, then two or three more. Textual has no public hook between
        "the screen wants a frame" and "the frame is drawn"."""
        if in_batch_update(self.app) or not self.may_draw():
            return
        super()._compositor_refresh()
        self.drawn()

    def may_draw(self) -> bool:
        """Whether a frame may be drawn now (called when Textual would draw one, outside a batch update)."""
        return True

    def drawn(self) -> None:
        """Called after each frame this screen drew."""


class SizeHookedScrollView(ScrollView):
    """A scroll view told when its size changes inside the layout (``ScrollView._size_updated``, private)."""

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        """Why: Textual calls this in the layout and draws the frame right after it; the ``Resize`` message comes
        later. Scrolled here, the first frame shows the end of the run (following), not the top then the end a
        frame later."""
        changed = super()._size_updated(size, virtual_size, container_size, layout)
        if changed:
            self.size_updated()
        return changed

    def size_updated(self) -> None:
        """Called in the layout when the size changed, before the frame is drawn."""
