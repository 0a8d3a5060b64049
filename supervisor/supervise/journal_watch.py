"""The supervisor's view of the journal: what each attempt committed, read as it is written.

The journal is polled (every ``JOURNAL_POLL_S`` and at an exit), and read only when
its inode or size changed. Progress is counted only from records the attempt's own
process tree wrote: the SDK's ``start`` record names its pid, and after a ``start``
of another process (an agent run by hand that took the journal lock) nothing is
credited until one of ours comes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from ..core import rundir
from ..core.history import Fold
from ..core.journal_reader import Entry, JournalReader
from ..core.records import Kind, Record, step_name
from .policy import Attempt, is_progress

__all__ = ["JOURNAL_POLL_S", "JournalWatch"]

JOURNAL_POLL_S = 0.1


class JournalWatch:
    """The journal's new records, folded incrementally (flat memory), and credited to the attempt that wrote them."""

    def __init__(self, run_dir: Path, *, is_ours: Callable[[Any, Any, Any], bool], say: Callable[[str], None]) -> None:
        self.path = run_dir / rundir.JOURNAL
        self.reader = JournalReader(run_dir)
        self.fold = Fold(keep=False)
        """The effective history: the step count and the checkpoint a rollback names, without re-reading the journal."""
        self.records = 0
        """The seq after the last record read."""
        self._is_ours = is_ours
        self._say = say
        self._stat: tuple[int, int] = (-1, -1)
        # whose records the journal is getting now: True the current attempt's tree, False another
        # process (an agent run by hand holding the journal lock), None not known (credited: an agent
        # that writes the journal without the SDK has no start record)
        self._writer_ours: bool | None = None
        self._writer_pid: int | None = None

    def load(self) -> list[Entry]:
        """One read of the whole journal at the start (the resume view: steps stay unparsed); then :meth:`poll`."""
        view = self.reader.resume_view()  # with its overlap verdicts: the fold need not search the file again
        self.fold.extend(view.entries, view.overlaps)
        self.records = self.reader.end_seq
        return view.entries

    def forget_stat(self) -> None:
        """Read at the next poll even if the file looks unchanged (an exit, a rollback: the last records count)."""
        self._stat = (-1, -1)

    def new_attempt(self) -> None:
        """An attempt was spawned: the last writer was ours (now gone), or nobody: whose records come is not known yet."""
        if self._writer_ours or self._writer_pid is None or not psutil.pid_exists(self._writer_pid):
            self._writer_ours = None

    def poll(self, cur: Attempt | None, attempt_no: int) -> list[Entry]:
        """Read the records committed since the last poll (only if the file changed); credit them to ``cur``."""
        try:
            st = os.stat(self.path)
            key = (st.st_ino, st.st_size)
        except FileNotFoundError:
            key = (-1, 0)
        if key == self._stat:
            return []
        self._stat = key
        new = self.reader.read_new()
        if not new:
            return new
        self.fold.extend(new)
        ours = 0
        for ent in new:
            if not isinstance(ent, dict):  # a bad line (read_new never returns lazy records)
                self.records = max(self.records, ent.seq + 1)
                continue
            self.records = max(self.records, int(ent.get("seq", 0)) + 1)
            kind = ent.get("kind", Kind.STEP)
            if kind == Kind.START:
                self._started(ent, attempt_no)
            if cur is None or self._writer_ours is False:
                continue
            ours += 1
            _credit(cur, ent, kind)
        if cur is not None and ours:
            cur.last_activity = time.monotonic()  # another writer's records are not a sign of life of ours
        return new

    def _started(self, ent: Record, attempt_no: int) -> None:
        """A ``start`` record: whose process writes the journal from here on."""
        pid = ent.get("pid")
        self._writer_pid = pid if isinstance(pid, int) else None
        self._writer_ours = self._is_ours(pid, ent.get("supervisor"), ent.get("attempt"))
        if not self._writer_ours:
            self._say(f"the journal is written by pid {pid}, not by attempt {attempt_no}: "
                      "its records are not this attempt's progress")


def _credit(cur: Attempt, ent: Record, kind: Any) -> None:
    """One record of the attempt's own tree: the steps in flight, its progress and its rollbacks."""
    pos = ent.get("pos")
    if kind == Kind.BEGIN:
        # paired by position, not adjacency: concurrent steps interleave their begins and ends
        cur.flying[pos if isinstance(pos, int) else -1] = step_name(ent)
    elif kind == Kind.STEP and isinstance(pos, int):
        if not ent.get("transient"):  # a failed try to be retried: still in flight
            cur.flying.pop(pos, None)
    elif kind in (Kind.STEP, Kind.START, Kind.ROLLBACK):
        cur.flying.clear()  # a writer without positions: one step at a time, as before
    if is_progress(ent):
        cur.progress += 1
    elif kind == Kind.ROLLBACK:
        cur.rollbacks += 1
