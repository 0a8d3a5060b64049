"""The agent-log pane: what ``AgentLogTail`` read, newest at the bottom (imported once the first frame is drawn)."""

from __future__ import annotations

from textual.widgets import Log

MAX_LINES = 5000


class AgentLogPane(Log):
    """The agent's output, newest at the bottom (at most ``MAX_LINES`` lines kept)."""

    DEFAULT_CSS = """
    AgentLogPane { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(max_lines=MAX_LINES, id=id)

    def append(self, text: str) -> None:
        """Add lines read by the worker (``text`` ends with a newline)."""
        if text:
            self.write(text)
