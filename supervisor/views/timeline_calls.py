"""The proxy's model calls (``llm.jsonl``) as timeline rows, each placed among the journal's records by time.

The journal and ``llm.jsonl`` have one writer each and their own seqs; the timeline shows both in one list
(``core.llm_calls.merge_by_ts``'s order: by ``ts``, the journal's record first at equal times). A call row goes
before the first journal record whose ``ts`` is later than the call's, found by a galloping search over the
journal (a few line reads per call: the work is proportional to the calls, nothing is read without them).

:class:`CallsFollower` reads the file as the reading worker reads the journal: only the bytes committed since
the last read (up to the last newline), blobs resolved in file order. The ``llm call served`` notes are not
rows: they mark the call they name (``served``); an ``llm call diverged`` note is a row of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..core import rundir
from ..core.llm_calls import CALLS, DIVERGED_NOTE, SERVED_NOTE, SOURCE, expand
from ..core.records import Kind, Record
from ..errors import RunDirError

READ_MAX = 64 << 20
"""Bytes of ``llm.jsonl`` read in one round (a big file is taken in a few rounds, the rows appear as it goes)."""


@dataclass(slots=True)
class Call:
    """A row of the proxy's file: a call record (kind ``step``) or a divergence note; ``before``: the journal
    seq it precedes; ``order``: its line in ``llm.jsonl``."""

    data: Record
    before: int
    order: int

    @property
    def ts(self) -> str:
        ts = self.data.get("ts")
        return ts if isinstance(ts, str) else ""


@dataclass(slots=True)
class CallsRead:
    """What one read of ``llm.jsonl`` found: new rows (placed) and the served notes, by the call seq they name."""

    rows: list[Call] = field(default_factory=list)
    served: dict[int, list[int]] = field(default_factory=dict)
    """Call seq -> the attempts answered from it."""


TsAt = Callable[[int], "str | None"]
"""The ``ts`` of journal record ``seq`` (``None``: unknown, not readable now)."""


@dataclass(slots=True)
class CallsFollower:
    """Reads ``llm.jsonl`` from where it stopped (owned by the reading worker's ``LiveSide``)."""

    run_dir: Path | None
    """``None``: a bare journal file, no run directory (no calls)."""
    offset: int = 0
    line: int = 0
    blobs: dict[str, Any] = field(default_factory=dict)
    ino: int = -1
    last_before: int = 0
    """Where the last call went (the next, no earlier in time, is searched from there)."""
    complete: bool = True
    """Every call read so far could be placed (before the scan, those earlier than the records read cannot)."""

    def read(self, count: int, times: Callable[[], tuple[TsAt, int]]) -> CallsRead | None:
        """The rows committed since the last read, placed among the journal's ``count`` records (``None``:
        nothing new). ``times()`` (called only when there are new lines) gives ``ts_at``, a record's time for
        seqs ``known_from`` to ``count``, and ``known_from``; a call earlier than record ``known_from`` (when it
        is not 0) is not placed now: ``complete`` goes False."""
        if self.run_dir is None:
            return None
        path = self.run_dir / CALLS
        try:
            fd = rundir.open_run_file(path, os.O_RDONLY, owner=False)  # a FIFO is refused, never waited on
        except (OSError, RunDirError):
            return None  # no proxy in this run (or no file to read): one failed open, nothing else
        try:
            st = os.fstat(fd)
            if st.st_ino != self.ino:
                if self.ino != -1:
                    self._restart()  # replaced (a fork copied it anew): read again from the start
                self.ino = st.st_ino
            if st.st_size <= self.offset:
                return None
            os.lseek(fd, self.offset, os.SEEK_SET)
            data = os.read(fd, min(st.st_size - self.offset, READ_MAX))
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        if end == 0:
            return None  # a line being written (or torn): read once it is committed
        self.offset += end
        ts_at, known_from = times()
        got = CallsRead()
        for raw in data[:end].split(b"\n")[:-1]:
            self.line += 1
            rec = _parse(raw)
            if rec is None:
                continue
            self._take(rec, got, count, ts_at, known_from)
        return got

    def _restart(self) -> None:
        self.offset = self.line = self.last_before = 0
        self.blobs = {}

    def _take(self, rec: dict[str, Any], got: CallsRead, count: int, ts_at: TsAt, known_from: int) -> None:
        defined = rec.pop("blobs", None)
        if isinstance(defined, dict):
            self.blobs.update(defined)
        kind = rec.get("kind", Kind.STEP)
        if kind == Kind.NOTE:
            if rec.get("message") == SERVED_NOTE:
                served = rec.get("served")
                if type(served) is int:
                    attempt = rec.get("attempt")
                    got.served.setdefault(served, []).append(attempt if type(attempt) is int else 0)
                return
            if rec.get("message") != DIVERGED_NOTE:
                return  # another note: not a row
        inputs = rec.get("inputs")
        if isinstance(inputs, dict) and "body" in inputs:
            rec["inputs"] = {**inputs, "body": expand(inputs["body"], self.blobs)}
        rec["source"] = SOURCE
        ts = rec.get("ts")
        before = place(ts if isinstance(ts, str) else "", count, ts_at, known_from, self.last_before)
        if before is None:
            self.complete = False
            return
        self.last_before = before
        got.rows.append(Call(rec, before, self.line - 1))


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None  # ``JournalReader`` on the file reports it with its line number
    return rec if isinstance(rec, dict) else None


def place(ts: str, count: int, ts_at: TsAt, known_from: int = 0, hint: int = 0) -> int | None:
    """The seq a row of time ``ts`` goes before: the first of the ``count`` records later than ``ts`` (a record
    without a time counts as earlier). Gallops from ``hint`` (the previous call's place: calls come in time
    order), so placing calls in a row costs a few reads each. ``None``: earlier than every record known
    (``known_from`` > 0) — its place is not known yet."""

    def later(seq: int) -> bool:
        t = ts_at(seq)
        return t is not None and t > ts

    if not ts:
        return count  # no time: at the end (where it was read)
    lo = max(known_from, min(hint, count))
    if lo == count or later(lo):  # its place is at or before the hint: gallop back
        if lo == known_from:
            return None if 0 < known_from < count else lo
        step, hi = 1, lo
        while True:
            cand = max(known_from, hi - step)
            if not later(cand):
                return _bisect(cand + 1, hi, later)
            hi = cand
            if cand == known_from:
                return None if known_from > 0 else 0
            step *= 2
    # records lo..: find the first later one, galloping forward
    step, prev = 1, lo
    while True:
        cand = min(count, prev + step)
        if cand >= count:
            return _bisect(prev + 1, count, later)
        if later(cand):
            return _bisect(prev + 1, cand, later)
        prev = cand
        step *= 2


def _bisect(lo: int, hi: int, later: Callable[[int], bool]) -> int:
    """The first seq in ``lo``..``hi`` that is ``later`` (``hi`` when none is; ``hi`` itself is taken as later)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if later(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
