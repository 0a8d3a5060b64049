"""``supervisor.jsonl``: the supervisor's own append-only event file, one JSON object a line.

Every event has ``ts`` (ISO UTC), ``event`` and ``attempt``. Lines are written
with one ``write`` each (a crash of the supervisor never leaves half a line from
a finished call) and made durable with ``fdatasync`` at ``flush`` points, not on
every event: a restart must not wait for the disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from . import rundir
from .journal import read_json_lines, repair_torn_tail

EVENTS = frozenset(
    {
        "supervisor-start",
        "spawn",
        "exit",
        "restart",
        "backoff",
        "rollback",
        "hang",
        "memory-limit",
        "give-up",
        "stop",
        "succeeded",
        "pause",
        "resume",
        "resource-error",
    }
)


class EventLog:
    """Appends events to ``supervisor.jsonl``; used by the one process holding ``supervisor.lock``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / rundir.SUPERVISOR_EVENTS
        repair_torn_tail(self.path)  # a supervisor killed mid-write: move the torn line aside
        self._fd = rundir.open_run_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # no link, ours
        self._dirty = False

    def emit(self, event: str, attempt: int, **fields: Any) -> dict[str, Any]:
        """Append one event and return it."""
        if event not in EVENTS:
            raise ValueError(f"unknown supervisor event {event!r}")
        rec: dict[str, Any] = {"ts": rundir.utc_now(), "event": event, "attempt": attempt, **fields}
        line = orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n"
        rundir.write_all(self._fd, line)
        self._dirty = True
        return rec

    def flush(self) -> None:
        """Make the events written so far durable."""
        if self._dirty and self._fd >= 0:
            os.fdatasync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """All events of a run directory (bad or torn lines skipped)."""
    return read_json_lines(run_dir / rundir.SUPERVISOR_EVENTS)
