"""The detail panes under (or beside) the timeline: a tab bar drawn by one widget, one pane shown at a time.

Textual's ``TabbedContent`` builds some 14 widgets for three tabs (tabs, a tab per label, an underline, scroll
containers, a content switcher, a pane per tab), each styled and laid out before the first frame, with a few
hundred lines of CSS to parse (measured: 15-30 ms of the dashboard's start). ``Panes`` draws the same picture —
the labels, the active one in the theme's text colour and the others muted, the underline bar with the active
tab's part highlighted (the same ``Bar`` and colours as Textual's ``Underline``) — with one widget for the bar and
a plain container per pane. A click on a label shows its pane; keys do too (the dashboard's ``i`` ``s`` ``l`` ``c``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import Group
from rich.style import Style
from rich.text import Text
from textual import events
from textual.containers import Container
from textual.message import Message
from textual.reactive import reactive
from textual.renderables.bar import Bar
from textual.widget import Widget


class TabBar(Widget):
    """Two lines: the tabs' labels, and a bar under them with the active tab's part highlighted."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES: ClassVar[set[str]] = {"tab-bar--tab", "tab-bar--active", "tab-bar--bar"}
    DEFAULT_CSS = """
    TabBar {
        dock: top;
        width: 1fr;
        height: 2;
        text-wrap: nowrap;
        .tab-bar--tab { color: $text-muted; }
        .tab-bar--active { color: $text; }
        .tab-bar--bar { color: $block-cursor-background; background: $foreground 10%; }
    }
    """

    active: reactive[str] = reactive("")

    def __init__(self, tabs: list[tuple[str, str]], active: str) -> None:
        super().__init__()
        self.tabs = tabs
        """``(id, label)`` of each tab, in order."""
        self.set_reactive(TabBar.active, active)

    def _spans(self) -> list[tuple[int, int, str]]:
        """Where each tab is on the labels' line: first column, end column, its id (a label has a space each side)."""
        out: list[tuple[int, int, str]] = []
        x = 0
        for tab_id, label in self.tabs:
            out.append((x, x + len(label) + 2, tab_id))
            x += len(label) + 2
        return out

    def render(self) -> Group:
        tab_style = self.get_component_rich_style("tab-bar--tab")
        active_style = self.get_component_rich_style("tab-bar--active")
        labels = Text(no_wrap=True)
        highlight = (0, 0)
        for (start, end, tab_id), (_id, label) in zip(self._spans(), self.tabs, strict=True):
            labels.append(" ")  # the padding unstyled, as Textual's Tab draws it
            labels.append(label, active_style if tab_id == self.active else tab_style)
            labels.append(" ")
            if tab_id == self.active:
                highlight = (start + 1, end - 1)  # under the label, not its padding (as Textual's Tabs)
        bar_style = self.get_component_rich_style("tab-bar--bar")
        bar = Bar(highlight_range=highlight, highlight_style=Style.from_color(bar_style.color),
                  background_style=Style.from_color(bar_style.bgcolor))
        return Group(labels, bar)

    def on_click(self, event: events.Click) -> None:
        for start, end, tab_id in self._spans():
            if start <= event.x < end:
                parent: Any = self.parent
                if isinstance(parent, Panes):
                    parent.active = tab_id
                return


class Panes(Container):
    """The tab bar over one pane per tab; ``active`` is the shown one's tab id.

    A tab's pane is its widget itself (``pane``), not a container around it: a container is one more widget to
    style, lay out and draw (its whole height, under the widget) before the first frame."""

    DEFAULT_CSS = """
    Panes { layout: vertical; }
    Panes > .pane { height: 1fr; }
    """

    class Switched(Message):
        """Another tab's pane is shown (a pane whose content is computed on demand starts on it)."""

        def __init__(self, tab_id: str) -> None:
            self.tab_id = tab_id
            super().__init__()

    def __init__(self, tabs: list[tuple[str, str]], *, initial: str, id: str | None = None) -> None:
        super().__init__(id=id)
        self.bar = TabBar(tabs, initial)
        self._active = initial
        self._panes: dict[str, Widget] = {}

    def pane(self, tab_id: str, widget: Widget) -> Widget:
        """``widget`` as the pane of tab ``tab_id``, to compose or mount: shown if it is the active tab."""
        widget.add_class("pane")
        widget.display = tab_id == self._active
        self._panes[tab_id] = widget
        return widget

    def compose(self) -> Any:
        yield self.bar  # after the panes composed in the ``with`` block: docked at the top

    @property
    def active(self) -> str:
        return self._active

    @active.setter
    def active(self, tab_id: str) -> None:
        if tab_id == self._active:
            return
        for pane_id, pane in self._panes.items():
            pane.display = pane_id == tab_id
        self._active = tab_id
        self.bar.active = tab_id
        self.post_message(self.Switched(tab_id))
