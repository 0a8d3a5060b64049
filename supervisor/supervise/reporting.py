"""What the supervisor writes about itself, kept going when resources run out.

Events (``supervisor.jsonl``) and ``run.json`` changes that cannot be written on a
full disk wait in memory and are retried every ``RETRY_WRITE_S`` (the torn part of
the event file is cut off first). What ran out is said on stderr at once, at most
once per kind every ``RESOURCE_REPORT_S``, and recorded as one ``resource-error``
event once the event file takes writes again.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import rundir
from ..core.events import EVENTS, EventLog
from .persister import Persister, cut_torn_tail, is_resource_error

if TYPE_CHECKING:
    from .notify import Notifier

__all__ = ["FINAL_WRITE_S", "MAX_DEFERRED_EVENTS", "RESOURCE_REPORT_S", "RETRY_WRITE_S", "Reporter"]

RETRY_WRITE_S = 1.0
"""How often a write that failed for want of resources (disk full) is tried again."""
RESOURCE_REPORT_S = 10.0
"""At most one ``resource-error`` event (and one stderr line per kind of error) in this many seconds."""
FINAL_WRITE_S = 10.0
"""How long the final status keeps being retried on a full disk before the supervisor exits anyway."""
MAX_DEFERRED_EVENTS = 10_000


class Reporter:
    """The supervisor's stderr lines, its events and its ``run.json`` changes, each surviving a full disk."""

    def __init__(self, run_dir: Path, *, quiet: bool) -> None:
        self.run_dir = run_dir
        self.quiet = quiet
        self.events: EventLog | None = None
        self.persist = Persister()
        self._deferred: collections.deque[tuple[str, int, dict[str, Any]]] = collections.deque()
        self._deferred_dropped = 0
        self.events_retry_at: float | None = None
        self._rj_pending: dict[str, Any] = {}
        self._rj_lock = threading.Lock()
        self.rj_retry_at: float | None = None
        self._problems: dict[str, dict[str, Any]] = {}
        self.resource_totals: dict[str, int] = {}
        """``"writing agent.log: ENOSPC"`` -> how often, since the start (the live status shows it)."""
        self._said: dict[str, float] = {}
        self._next_report = 0.0
        self.log_lost = 0
        """Bytes of the agent's output that ``agent.log`` lost on a full disk (reported with the next event)."""
        self.tap: Callable[[str, int, dict[str, Any]], None] | None = None
        """Sees every event as it is emitted (the live span exporter)."""
        self.notifier: Notifier | None = None
        """``supervise --notify``: sees every event as it is emitted too; closed (its bounded final wait) first
        in ``finish_writes``, so the end of the run is delivered and its failures are still recorded."""

    def say(self, text: str) -> None:
        """A progress line on stderr (silenced by ``-q``)."""
        if self.quiet:
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"agent-supervisor: {text}\n")
            sys.stderr.flush()

    # ------------------------------------------------------------------ events
    def emit(self, event: str, attempt: int, fields: dict[str, Any]) -> None:
        """Append an event (``fields`` has its time); on a full disk it waits in memory and is retried."""
        if self.events is None:
            return
        if len(self._deferred) >= MAX_DEFERRED_EVENTS:
            self._deferred.popleft()
            self._deferred_dropped += 1
        self._deferred.append((event, attempt, fields))
        if self.tap is not None:
            self.tap(event, attempt, fields)
        if self.notifier is not None:
            self.notifier.event(event, attempt, fields)
        if self.events_retry_at is None:
            self.flush_events()

    def flush_events(self) -> bool:
        """Write the events that wait; ``False`` (and a retry later) if the disk still refuses."""
        events = self.events
        if events is None:
            return False
        while self._deferred:
            event, attempt, fields = self._deferred[0]
            try:
                events.emit(event, attempt, **fields)
            except OSError as e:
                if not is_resource_error(e):
                    raise
                cut_torn_tail(events.path)
                self.events_retry_at = time.monotonic() + RETRY_WRITE_S
                self.resource_error(f"writing {rundir.SUPERVISOR_EVENTS}", e)
                return False
            self._deferred.popleft()
        self.events_retry_at = None
        return True

    # ------------------------------------------------------------------ resources
    def resource_error(self, what: str, e: OSError) -> None:
        """A resource ran out: say so (once per kind every ``RESOURCE_REPORT_S``), keep it for the event."""
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        key = f"{what}: {name}"
        now = time.monotonic()
        p = self._problems.setdefault(key, {"what": what, "errno": name, "error": e.strerror or str(e),
                                            "count": 0, "first": rundir.utc_now()})
        p["count"] += 1
        p["last"] = rundir.utc_now()
        self.resource_totals[key] = self.resource_totals.get(key, 0) + 1
        if now >= self._said.get(key, 0.0):
            self._said[key] = now + RESOURCE_REPORT_S
            self.say(f"{what} failed: {e.strerror or e} ({name}); still supervising, retrying")

    def report_resources(self, now: float, attempt: int) -> None:
        """Record what ran out as one ``resource-error`` event, once the event file takes writes again."""
        if not self._problems or self._deferred or now < self._next_report or self.events is None:
            return
        self._next_report = now + RESOURCE_REPORT_S
        problems, self._problems = list(self._problems.values()), {}
        fields: dict[str, Any] = {"errors": problems}
        if self._deferred_dropped:
            fields["events_dropped"] = self._deferred_dropped
            self._deferred_dropped = 0
        if self.log_lost:
            fields["agent_log_bytes_lost"] = self.log_lost
            self.log_lost = 0
        if "resource-error" in EVENTS:
            self.emit("resource-error", attempt, {"ts": rundir.utc_now(), **fields})
        # else: a core without the event: the stderr lines said it

    def retry_due(self, now: float) -> None:
        """The writes that wait whose retry time has come (events, ``run.json``), and the persister's errors."""
        self.persist_errors(now)
        if self.events_retry_at is not None and now >= self.events_retry_at:
            self.flush_events()
        if self.rj_retry_at is not None and now >= self.rj_retry_at:
            self.run_json()

    # ------------------------------------------------------------------ run.json
    def run_json(self, **changes: Any) -> None:
        """Change ``run.json`` off the loop (the persister thread); on a full disk it is retried."""
        with self._rj_lock:
            self._rj_pending.update(changes)
        self.rj_retry_at = None
        run_dir, lock, pending = self.run_dir, self._rj_lock, self._rj_pending

        def write() -> None:
            with lock:
                snap = dict(pending)
            if not snap:
                return
            rundir.update_run_json(run_dir, **snap)
            with lock:
                for k, v in snap.items():
                    if k in pending and pending[k] is v:
                        del pending[k]

        self.persist.submit(write)

    def persist_errors(self, now: float) -> None:
        """What the persister thread could not write: retried later if resources ran out, else said."""
        for e in self.persist.take_errors():
            if isinstance(e, OSError) and is_resource_error(e):
                self.resource_error("writing run state", e)
                if self._rj_pending:
                    self.rj_retry_at = now + RETRY_WRITE_S
            else:
                self.say(f"could not write run state: {e}")

    def write_final(self, attempt: int, **changes: Any) -> bool:
        """The final status, written last; retried for ``FINAL_WRITE_S`` on a full disk. ``False`` if it never was."""
        self.persist.drain()
        with self._rj_lock:
            self._rj_pending.update(changes)
            final = dict(self._rj_pending)
        deadline = time.monotonic() + FINAL_WRITE_S
        while True:
            self.persist_errors(time.monotonic())
            events_ok = self.flush_events()
            try:
                rundir.update_run_json(self.run_dir, **final)
            except OSError as e:
                if not is_resource_error(e):
                    raise
                self.resource_error(f"writing the final status to {rundir.RUN_JSON}", e)
            else:
                with self._rj_lock:
                    self._rj_pending.clear()
                self.rj_retry_at = None
                if events_ok:
                    self._next_report = 0.0
                    self.report_resources(time.monotonic(), attempt)
                    self.flush_events()
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(RETRY_WRITE_S)

    def finish_writes(self) -> None:
        """The notifications on their way (a bounded wait), the persister's last writes, then a last try of the
        events that still wait."""
        notifier, self.notifier = self.notifier, None
        if notifier is not None:
            notifier.close()
        self.persist.close()
        self.persist_errors(time.monotonic())
        if self._deferred and self.events is not None:
            self.flush_events()
            if self._deferred:
                self.say(f"{len(self._deferred)} event(s) could not be written to {rundir.SUPERVISOR_EVENTS} (disk full)")

    def close_events(self) -> None:
        """Close the event file (the last thing the supervisor writes)."""
        if self.events is not None:
            try:
                self.events.close()
            except OSError as e:
                self.say(f"could not finish {rundir.SUPERVISOR_EVENTS}: {e.strerror or e}")
            self.events = None
