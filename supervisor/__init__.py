"""agent-supervisor: durable, debuggable long-running AI agents with files alone.

The SDK is ``from supervisor import Run``; see README.md.
"""

from __future__ import annotations

from .errors import (
    CheckpointError,
    DivergenceError,
    FormatError,
    JournalError,
    ReplayError,
    RunDirError,
    SupervisorError,
)
from .rundir import EXIT_FAILED, EXIT_ROLLBACK
from .sdk import Run

__version__ = "0.1.0"
__all__ = [
    "EXIT_FAILED",
    "EXIT_ROLLBACK",
    "CheckpointError",
    "DivergenceError",
    "FormatError",
    "JournalError",
    "ReplayError",
    "Run",
    "RunDirError",
    "SupervisorError",
]
