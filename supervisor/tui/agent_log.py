"""The agent's captured output (``agent.log``): the last 64 kB at first, then as it grows.

The pane that shows it (a Textual ``Log``) is in ``agent_log_pane``: it is mounted after the first frame, and
the dashboard's start does not import Textual's ``Log`` for it.
"""

from __future__ import annotations

from pathlib import Path

AGENT_LOG_TAIL = 64 * 1024


class AgentLogTail:
    """How far ``agent.log`` has been read; used by the dashboard's reading worker only (no Textual)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        """``None``: a bare journal file, no agent output beside it."""
        self.offset = -1

    def read_new(self) -> str:
        """The whole lines written since the last call (the last 64 kB on the first), or ``""``."""
        if self.path is None:
            return ""
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self.offset:
                    self.offset = 0  # rotated: the new file starts over
                start = max(0, size - AGENT_LOG_TAIL) if self.offset < 0 else self.offset
                if start == size:
                    return ""
                f.seek(start)
                data = f.read(size - start)
        except OSError:
            return ""  # no agent.log yet (or it is being rotated): the next read takes it
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            return ""
        self.offset = start + cut
        return data[:cut].decode("utf-8", "replace")
