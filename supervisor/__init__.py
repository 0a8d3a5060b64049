"""agent-supervisor: durable, debuggable long-running AI agents with files alone.

The SDK is ``from supervisor import Run``; see README.md and docs/sdk.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core.rundir import EXIT_FAILED, EXIT_ROLLBACK
from .errors import (
    AskTimeout,
    CheckpointError,
    DivergenceError,
    FormatError,
    JournalError,
    JournalLockedError,
    ReplayError,
    RunDirError,
    SupervisorError,
)

if TYPE_CHECKING:
    from .sdk import Run


def __getattr__(name: str) -> Any:
    # the SDK is imported on first use: the CLI and the TUI start faster without it
    if name == "Run":
        from .sdk import Run

        return Run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"
__agent_supervisor__ = True
"""Marks this ``supervisor`` package as ours, not supervisord's (``supervisor._clash``)."""
__all__ = [
    "EXIT_FAILED",
    "EXIT_ROLLBACK",
    "AskTimeout",
    "CheckpointError",
    "DivergenceError",
    "FormatError",
    "JournalError",
    "JournalLockedError",
    "ReplayError",
    "Run",
    "RunDirError",
    "SupervisorError",
]
