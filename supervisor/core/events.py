"""``supervisor.jsonl``: the supervisor's own append-only event file, one JSON object a line.

Every event has ``ts`` (ISO UTC), ``event`` and ``attempt``. Lines are written
with one ``write`` each (a crash of the supervisor never leaves half a line from
a finished call) and made durable with ``fdatasync`` at ``flush`` points, not on
every event: a restart must not wait for the disk.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson

from . import rundir
from .journal_reader import read_json_lines
from .journal_writer import repair_torn_tail

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
        "export-error",
        "notify-error",
        "files",
        "paused",
        "asked",
    }
)



def is_error_event(ev: dict[str, Any]) -> bool:
    """A supervisor event that is an error: a crash (a non-zero exit or a signal), a hang, a memory limit, a give-up.
    The dashboard's red rows, its error jumps (``e``) and its ``errors`` filter all ask this."""
    name = ev.get("event")
    if name in ("hang", "memory-limit", "give-up"):
        return True
    return name == "exit" and (ev.get("code") not in (0, None) or bool(ev.get("signal")))


DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_KEEP = 10
_SEALED = re.compile(r"supervisor\.(\d{6,})\.jsonl")


class EventLog:
    """Appends events to ``supervisor.jsonl``; used by the one process holding ``supervisor.lock``.

    Past ``max_bytes`` the file is sealed as ``supervisor.NNNNNN.jsonl`` and a new
    one started; the newest ``keep`` sealed files are kept (``0``: all), as for
    ``agent.log`` (``supervise --log-max-bytes/--log-keep``). Readers take them in
    order (:func:`event_paths`). A crash loop no longer fills the disk with events.
    """

    def __init__(self, run_dir: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP) -> None:
        self.run_dir = run_dir
        self.path = run_dir / rundir.SUPERVISOR_EVENTS
        self.max_bytes = max_bytes
        self.keep = keep
        repair_torn_tail(self.path)  # a supervisor killed mid-write: move the torn line aside
        self._open()

    def _open(self) -> None:
        self._fd = rundir.open_run_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # no link, ours
        self._size = os.fstat(self._fd).st_size
        self._dirty = False

    def emit(self, event: str, attempt: int, **fields: Any) -> dict[str, Any]:
        """Append one event and return it."""
        if event not in EVENTS:
            raise ValueError(f"unknown supervisor event {event!r}")
        rec: dict[str, Any] = {"ts": rundir.utc_now(), "event": event, "attempt": attempt, **fields}
        line = orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n"
        rundir.write_all(self._fd, line)
        self._dirty = True
        self._size += len(line)
        if self._size >= self.max_bytes:
            self.rotate()
        return rec

    def rotate(self) -> Path:
        """Seal ``supervisor.jsonl`` (synced first) as the next numbered file, start a new one, prune old ones."""
        sealed = rundir.next_sealed(self.run_dir, "supervisor", ".jsonl")
        self.close()
        os.rename(self.path, sealed)
        rundir.fsync_dir(self.run_dir)
        self._open()
        if self.keep > 0:
            for old in sealed_event_paths(self.run_dir)[: -self.keep]:
                try:
                    os.unlink(old)
                except FileNotFoundError:
                    pass  # removed by hand meanwhile
        return sealed

    def flush(self) -> None:
        """Make the events written so far durable."""
        if self._dirty and self._fd >= 0:
            rundir.datasync_function()(self._fd)  # fsync where the platform has no fdatasync
            self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1


def sealed_event_paths(run_dir: Path) -> list[Path]:
    """The sealed ``supervisor.NNNNNN.jsonl`` files, oldest first."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    found = sorted((int(m.group(1)), n) for n in names if (m := _SEALED.fullmatch(n)))
    return [run_dir / n for _, n in found]


def event_paths(run_dir: Path) -> list[Path]:
    """Every event file of a run in order: the sealed ones, then ``supervisor.jsonl``."""
    return [*sealed_event_paths(run_dir), run_dir / rundir.SUPERVISOR_EVENTS]


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """All events of a run directory, over its rotated files (bad or torn lines skipped)."""
    out: list[dict[str, Any]] = []
    for p in event_paths(run_dir):
        out.extend(read_json_lines(p))
    return out
