"""When each step ran, from the journal's ``begin`` and ``step`` records: to say which step changed a file.

The supervisor's journal watch feeds every record it reads (:meth:`StepClock.add`); the workspace watch asks
which steps may have been in flight during the interval a change happened in (:meth:`StepClock.during`).
A change is attributed to a step only if that step's run overlaps the interval: one step is ``step``, several
are ``concurrent`` (never a guess between them), none is ``between`` (with the seq of the last record before).
The records' ``ts`` are ISO UTC strings cut to the millisecond, so a step's run is taken as
``[begin ms, end ms + 1 ms)``.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..core.records import Kind, step_name
from ..core.times import ts_ns

__all__ = ["Span", "StepClock", "ts_ns"]

MS = 1_000_000
KEEP_ENDED = 1024
"""Ended steps kept for changes reported late (the watch hands a batch over within a second)."""
KEEP_MARKS = 4096
"""Records' (time, seq) kept to place a change between steps."""


@dataclass
class Span:
    """One step's run: its begin record's seq, its name and position, begin and end (``None``: in flight)."""

    seq: int
    name: str
    pos: int | None
    begin_ns: int
    end_ns: int | None = None

    def overlaps(self, lo: int, hi: int) -> bool:
        """The step may have run at some time in ``[lo, hi]`` (times cut to the ms: end + 1 ms)."""
        return self.begin_ns <= hi and (self.end_ns is None or self.end_ns + MS > lo)


class StepClock:
    """The steps in flight and those recently ended, from the journal's records."""

    def __init__(self, last_seq: int | None) -> None:
        self.flying: dict[int, Span] = {}
        """By position (``-seq`` for a begin without one)."""
        self.ended: deque[Span] = deque(maxlen=KEEP_ENDED)
        self._marks_t: list[int] = []
        self._marks_seq: list[int] = []
        self.last_seq = last_seq
        """The seq of the last record read (``None``: an empty journal)."""

    def add(self, rec: dict[str, Any], now_ns: int) -> None:
        """One record read from the journal."""
        seq = rec.get("seq")
        if not isinstance(seq, int):
            return
        t = ts_ns(rec.get("ts"))
        if t is None:
            t = now_ns - now_ns % MS  # a hand-written record without a time: when it was read
        self.last_seq = seq
        if not self._marks_t or t >= self._marks_t[-1]:
            self._marks_t.append(t)
            self._marks_seq.append(seq)
            if len(self._marks_t) > 2 * KEEP_MARKS:
                del self._marks_t[:KEEP_MARKS], self._marks_seq[:KEEP_MARKS]
        kind = rec.get("kind", Kind.STEP)
        pos = rec.get("pos")
        if kind == Kind.BEGIN:
            key = pos if isinstance(pos, int) else -seq
            self.flying[key] = Span(seq, step_name(rec), pos if isinstance(pos, int) else None, t)
        elif kind == Kind.STEP:
            if isinstance(pos, int) and not rec.get("transient"):  # a failed try to be retried: still in flight
                self._end(pos, t)
        elif kind in (Kind.START, Kind.ROLLBACK):
            self.end_all(t)  # a new attempt, or the agent is gone: nothing of the last one is in flight

    def _end(self, key: int, t: int) -> None:
        span = self.flying.pop(key, None)
        if span is not None:
            span.end_ns = max(t, span.begin_ns)
            self.ended.append(span)

    def end_all(self, t: int) -> None:
        """Every step in flight ends at ``t`` (its agent exited)."""
        for key in list(self.flying):
            self._end(key, t)

    def during(self, lo: int, hi: int) -> list[Span]:
        """The steps that may have run within ``[lo, hi]``, by their begin's seq."""
        found = [s for s in self.flying.values() if s.overlaps(lo, hi)]
        horizon = lo - 1000 * MS  # steps end in journal order, their times too (but for a clock step back)
        for s in reversed(self.ended):
            if s.end_ns is not None and s.end_ns < horizon:
                break
            if s.overlaps(lo, hi):
                found.append(s)
        return sorted(found, key=lambda s: s.seq)

    def seq_before(self, t: int) -> int | None:
        """The seq of the last record written at or before ``t`` (the last one read if none is kept that old)."""
        i = bisect.bisect_right(self._marks_t, t)
        if i == 0:
            return self.last_seq if not self._marks_t else self._first_before()
        return self._marks_seq[i - 1]

    def _first_before(self) -> int | None:
        """Before every record kept: the one before the first kept (the journal's older part)."""
        first = self._marks_seq[0]
        return first - 1 if first > 0 else None
