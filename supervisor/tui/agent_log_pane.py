"""The agent-log pane: what ``AgentLogTail`` read, newest at the bottom (imported once the first frame is drawn)."""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.widgets import Log

MAX_LINES = 5000


class AgentLogPane(Log):
    """The agent's output, newest at the bottom (at most ``MAX_LINES`` lines kept).

    Long lines wrap at the pane's width (``w`` on the dashboard toggles it), or run off to the right and the pane
    scrolls sideways (Left/Right when focused). Textual's ``Log`` does not wrap: the lines it is given are cut to the
    width here, and cut again from the lines as written when the width or the choice changes."""

    DEFAULT_CSS = """
    AgentLogPane { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(max_lines=MAX_LINES, id=id)
        self._written: deque[str] = deque(maxlen=MAX_LINES)
        """The lines as the agent wrote them (the pane shows them cut to its width when wrapping)."""
        self.wrap = True
        self._cut_at = 0

    def on_mount(self) -> None:
        wrap = getattr(getattr(self.app, "settings", None), "wrap", None)
        if isinstance(wrap, bool):
            self.wrap = wrap

    def _cut_width(self) -> int:
        """The width to cut at (0: not laid out yet; the resize that lays it out cuts the lines)."""
        return self.scrollable_content_region.width

    def _cut(self, line: str) -> list[str]:
        if not self.wrap or self._cut_at <= 0 or len(line) <= self._cut_at:
            return [line]
        w = self._cut_at
        return [line[i:i + w] for i in range(0, len(line), w)]

    def append(self, text: str) -> None:
        """Add lines read by the worker (``text`` ends with a newline)."""
        if not text:
            return
        lines = text.splitlines()
        self._written.extend(lines)
        if not self._cut_at:
            self._cut_at = self._cut_width()
        self.write_lines([piece for ln in lines for piece in self._cut(ln)])

    def set_wrap(self, wrap: bool) -> None:
        """Wrap long lines at the pane's width, or not (the pane scrolls sideways)."""
        if wrap != self.wrap:
            self.wrap = wrap
            self._rewrite()

    def on_resize(self, event: Any) -> None:
        if self.wrap and self._written and self._cut_width() != self._cut_at:
            self._rewrite()

    def _rewrite(self) -> None:
        """Show the lines as written again, cut to the width now (or not cut)."""
        self._cut_at = self._cut_width()
        at_end = self.is_vertical_scroll_end
        self.clear()
        self.write_lines([piece for ln in self._written for piece in self._cut(ln)], scroll_end=at_end)
