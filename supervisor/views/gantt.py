"""The Gantt view's model: the steps of one process attempt on a time axis (no Textual here).

One bar a step, in the order the steps began (a nested step under its parent). A step's tries (the SDK's
``retries``: each failed try is a ``step`` record marked ``transient`` that leaves the step's ``begin`` open)
are grouped on its bar: ``3 tries, succeeded``, not three rows. A bar's start is its ``begin``'s time; a step
record without a begin in the records read (a hand-written journal, or a window that starts after the begin)
starts ``dur_ms`` before its ``ts``. Steps are paired as every reader pairs them (``core.pairing``): by name
and ``pos``, a step without ``pos`` with the begin open without one.

Fed record by record (:meth:`Gantt.add`), so a live attempt grows as records arrive. It holds one small bar a
step of the records fed: the screen feeds it one attempt, at most :data:`WINDOW` records of it (a window
around the dashboard's cursor for a longer one), and draws only the rows on screen (:func:`bar_cells`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

from ..core import times, wire
from ..core.records import Record, step_name
from .fmt import fmt_ms

__all__ = [
    "FAILED", "GAP", "GLYPH", "INTERRUPTED", "OK", "RUNNING", "SERVED", "WINDOW", "Bar", "Gantt", "Try", "attempt_span",
    "axis", "bar_cells", "parse_ts", "window",
]

OK, FAILED, RUNNING, INTERRUPTED, SERVED, GAP = "ok", "failed", "running", "interrupted", "served", "gap"
"""A bar's outcome (and a drawn cell's style key; ``GAP``: the wait between two tries)."""
WINDOW = 20_000
"""Records of an attempt read at most (a longer attempt: this many around the dashboard's cursor)."""
MAX_BARS = 50_000
"""Bars kept at most (a live attempt that grows past it: the later steps are counted, not drawn)."""
GLYPH = {OK: "█", FAILED: "▒", RUNNING: "▓", INTERRUPTED: "░", SERVED: "▪", GAP: "╌"}
"""Each outcome has a glyph of its own besides its colour: the picture reads without colour too."""
_OUTCOME_WORD = {OK: "succeeded", FAILED: "failed", RUNNING: "running", INTERRUPTED: "interrupted"}


def parse_ts(ts: Any) -> float | None:
    """Seconds since the epoch of an ISO-8601 ``ts`` (``None``: absent or not a time): the rows' one reading."""
    t = times.parse_ts(ts)
    return None if t is None else t.timestamp()


@dataclass(slots=True)
class Try:
    """One try of a step: from its start to its record (``failed``: it raised)."""

    start: float
    end: float
    failed: bool
    seq: int
    error: str = ""


@dataclass(slots=True)
class Bar:
    """One step of the attempt: its tries, and where the dashboard shows it (``seq``)."""

    name: str
    pos: Any
    start: float
    seq: int
    """The record the dashboard's row stands for: the step record that closed it, else its begin."""
    begin_id: str | None = None
    parent: int | None = None
    """The index of the enclosing step's bar (``None``: a top-level step, or its parent was not read)."""
    depth: int = 0
    end: float | None = None
    """When it finished (``None``: in flight)."""
    outcome: str = RUNNING
    tries: list[Try] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.end is None

    def tries_label(self) -> str:
        """``3 tries, succeeded`` for a retried step, else its outcome in a word (a success: empty)."""
        n = len(self.tries) + (self.outcome in (RUNNING, INTERRUPTED))  # the try in flight counts
        word = _OUTCOME_WORD.get(self.outcome, self.outcome)
        if n > 1:
            return f"{n} tries, {word}"
        return "" if self.outcome == OK else word

    def duration_ms(self, now: float | None = None) -> float | None:
        end = self.end if self.end is not None else now
        return None if end is None else max(0.0, (end - self.start) * 1000)


def _key(rec: Record) -> tuple[Any, Any, Any]:
    """How a step record finds its begin: name, ``pos`` and enclosing step (``pos`` alone pairs in
    ``core.pairing``; the name keeps a hand-written journal's steps apart when it has no ``pos``)."""
    return rec.get("step"), rec.get("pos"), rec.get("parent")


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        return f"{err.get('type') or 'error'}: {err.get('message') or ''}".strip(": ")
    return str(err)


class Gantt:
    """The bars of one attempt's records, fed in journal order (:meth:`add`)."""

    def __init__(self, attempt: int | None = None) -> None:
        self.attempt = attempt
        self.bars: list[Bar] = []
        self.origin: float | None = None
        """The time of the first record fed (the axis's 0)."""
        self.last: float | None = None
        """The latest time seen (a record's, or a try's end)."""
        self.served = 0
        """Steps the attempt was to be served from the journal (its start record's ``replayable_steps``)."""
        self.records = 0
        self.dropped = 0
        """Steps not kept past :data:`MAX_BARS`."""
        self._open: dict[tuple[Any, Any, Any], int] = {}
        self._by_id: dict[str, int] = {}
        self._order: list[int] | None = None
        self._first: float | None = None  # the earliest bar start: span() is asked for at every line drawn

    # ------------------------------------------------------------------ feeding
    def add_all(self, records: list[Any]) -> None:
        for rec in records:
            if isinstance(rec, dict):
                self.add(rec)

    def add(self, rec: Record) -> None:
        """Feed the next record of the attempt (a parsed one; other kinds only move the clock)."""
        self.records += 1
        t = parse_ts(rec.get("ts"))
        if t is not None:
            if self.origin is None:
                self.origin = t
            self.last = t if self.last is None else max(self.last, t)
        kind = rec.get("kind", wire.STEP)
        if kind == wire.BEGIN:
            self._begin(rec, t)
        elif kind == wire.STEP:
            self._step(rec, t)
        elif kind == wire.START:
            if isinstance(rec.get("replayable_steps"), int):
                self.served = rec["replayable_steps"]
        elif kind == wire.ROLLBACK:
            self.interrupt()

    def _new_bar(self, bar: Bar, parent: Any) -> int | None:
        if len(self.bars) >= MAX_BARS:
            self.dropped += 1
            return None
        if isinstance(parent, str) and parent in self._by_id:
            bar.parent = self._by_id[parent]
            bar.depth = self.bars[bar.parent].depth + 1
        self.bars.append(bar)
        self._first = bar.start if self._first is None else min(self._first, bar.start)
        self._order = None
        return len(self.bars) - 1

    def _begin(self, rec: Record, t: float | None) -> None:
        key = _key(rec)
        old = self._open.pop(key, None)
        if old is not None:  # begun again under the same key: the first one was interrupted
            self._end(self.bars[old], t, INTERRUPTED)
        bid = rec.get("id")
        bar = Bar(step_name(rec), rec.get("pos"), t if t is not None else (self.last or 0.0), int(rec.get("seq", -1)),
                  begin_id=bid if isinstance(bid, str) else None)
        i = self._new_bar(bar, rec.get("parent"))
        if i is None:
            return
        self._open[key] = i
        if bar.begin_id is not None:
            self._by_id[bar.begin_id] = i

    def _find_open(self, rec: Record) -> int | None:
        key = _key(rec)
        i = self._open.get(key)
        if i is None and key[1] is None:  # no pos: the open begin of that name without one
            i = next((j for k, j in self._open.items() if k[1] is None and k[0] == key[0]), None)
        return i

    def _step(self, rec: Record, t: float | None) -> None:
        end = t if t is not None else (self.last or 0.0)
        dur = rec.get("dur_ms")
        began = end - dur / 1000 if isinstance(dur, (int, float)) else end
        i = self._find_open(rec)
        if i is None:  # no begin read: the step starts its duration before its record
            i = self._new_bar(Bar(step_name(rec), rec.get("pos"), began, int(rec.get("seq", -1))), rec.get("parent"))
            if i is None:
                return
        bar = self.bars[i]
        failed = "error" in rec
        # the first try starts with the step; a retry after the wait before it (its own duration before its record)
        start = max(bar.tries[-1].end, began) if bar.tries else bar.start
        bar.tries.append(Try(start, end, failed, int(rec.get("seq", -1)), _error_text(rec["error"]) if failed else ""))
        if failed and rec.get("transient"):
            bar.seq = int(rec.get("seq", bar.seq))
            return  # tried again: the begin stays open
        self._drop_open(i)
        bar.seq = int(rec.get("seq", bar.seq))
        self._end(bar, end, FAILED if failed else OK)

    def _drop_open(self, i: int) -> None:
        for k, j in list(self._open.items()):
            if j == i:
                del self._open[k]

    def _end(self, bar: Bar, t: float | None, outcome: str) -> None:
        bar.end = max(bar.start, t if t is not None else (self.last or bar.start))
        bar.outcome = outcome

    def interrupt(self, t: float | None = None) -> None:
        """The attempt ended (or a rollback came): every step still open was interrupted, at ``t`` (default:
        the last time seen)."""
        for i in self._open.values():
            self._end(self.bars[i], t if t is not None else self.last, INTERRUPTED)
        self._open.clear()

    # ------------------------------------------------------------------ reading
    @property
    def in_flight(self) -> int:
        return len(self._open)

    def rows(self) -> list[int]:
        """Bar indexes in row order: by start, each nested step right under its parent (cached until a bar comes)."""
        if self._order is None:
            kids: dict[int | None, list[int]] = {}
            for i, b in enumerate(self.bars):
                kids.setdefault(b.parent, []).append(i)
            order: list[int] = []
            stack = sorted(kids.get(None, []), key=self._start_of, reverse=True)
            while stack:
                i = stack.pop()
                order.append(i)
                stack.extend(sorted(kids.get(i, []), key=self._start_of, reverse=True))
            self._order = order
        return self._order

    def _start_of(self, i: int) -> tuple[float, int]:
        return self.bars[i].start, i

    def span(self, now: float | None = None) -> tuple[float, float]:
        """The axis: from the first record to the last time seen (``now`` while steps are in flight)."""
        lo = self.origin if self.origin is not None else 0.0
        hi = self.last if self.last is not None else lo
        if now is not None and self._open:
            hi = max(hi, now)
        if self._first is not None:
            lo = min(lo, self._first)  # a step begun before the window starts before its first record
        return lo, max(hi, lo + 0.001)

    def most_in_flight(self) -> int:
        """The most steps in flight at once (a sweep over the bars: one lane each in a slot view)."""
        ends: list[float] = []
        most = 0
        for b in sorted(self.bars, key=lambda b: b.start):
            while ends and ends[0] <= b.start:
                heapq.heappop(ends)
            heapq.heappush(ends, b.end if b.end is not None else math.inf)
            most = max(most, len(ends))
        return most

    def summary(self) -> dict[str, int]:
        """Counts for the header: steps, retried steps, failed, in flight, interrupted."""
        out = {"steps": len(self.bars) + self.dropped, "retried": 0, "failed": 0, "running": 0, "interrupted": 0}
        for b in self.bars:
            if len(b.tries) > 1 or (b.tries and b.open):
                out["retried"] += 1
            if b.outcome in (FAILED, RUNNING, INTERRUPTED):
                out[b.outcome] += 1
        return out


def attempt_span(start_seqs: dict[int, int], count: int, seq: int | None) -> tuple[int | None, int, int]:
    """The attempt that wrote record ``seq`` (the last one when ``None``) and its records' seqs ``lo..hi``
    (exclusive): from its start record to the next attempt's. A journal without start records is one attempt."""
    starts = sorted((s, a) for a, s in start_seqs.items())
    if not starts:
        return None, 0, count
    at = seq if seq is not None else count - 1
    k = max((i for i, (s, _) in enumerate(starts) if s <= at), default=0)
    lo = 0 if k == 0 else starts[k][0]  # records before the first start belong to the first attempt
    hi = starts[k + 1][0] if k + 1 < len(starts) else count
    return starts[k][1], lo, hi


def window(lo: int, hi: int, around: int | None, size: int = WINDOW) -> tuple[int, int]:
    """At most ``size`` seqs of ``lo..hi``, centred on ``around`` (the dashboard's cursor; ``None``: the end)."""
    if hi - lo <= size:
        return lo, hi
    centre = around if around is not None else hi
    a = min(max(lo, centre - size // 2), hi - size)
    return a, a + size


# ---------------------------------------------------------------------- drawing (plain cells)
def bar_cells(bar: Bar, lo: float, hi: float, width: int, now: float | None = None) -> list[str]:
    """The bar's ``width`` cells over the axis ``lo..hi``: a style key each (``""``: empty). Each try takes at least
    one cell; a later try wins a shared cell; the waits between tries are :data:`GAP`."""
    cells = [""] * width
    if width <= 0:
        return cells
    scale = width / (hi - lo)

    def col(t: float) -> int:
        return min(width - 1, max(0, int((t - lo) * scale)))

    def paint(a: float, b: float, key: str) -> None:
        for c in range(col(a), max(col(a) + 1, math.ceil((b - lo) * scale))):
            if c < width:
                cells[c] = key

    prev: float | None = None
    for t in bar.tries:
        if prev is not None and t.start > prev:
            paint(prev, t.start, GAP)
        paint(t.start, t.end, FAILED if t.failed else OK)
        prev = t.end
    if bar.open or bar.outcome == INTERRUPTED:
        start = prev if prev is not None else bar.start
        end = bar.end if bar.end is not None else (now if now is not None else hi)
        paint(start, max(start, end), RUNNING if bar.open else INTERRUPTED)
    return cells


def _nice_step(span: float, ticks: int) -> float:
    """A round step (1, 2 or 5 times a power of ten seconds) giving about ``ticks`` ticks over ``span``."""
    raw = span / max(1, ticks)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return float(m * mag)
    return float(10 * mag)


def axis(lo: float, hi: float, width: int) -> str:
    """A time axis of ``width`` columns: ``0`` at the left, a round time every dozen columns or so."""
    if width <= 0:
        return ""
    out = [" "] * width
    step = _nice_step(hi - lo, max(1, width // 10))
    k = 0
    while True:
        t = k * step
        c = int(t / (hi - lo) * width)
        if c >= width:
            break
        label = "┆" + ("0" if k == 0 else fmt_ms(t * 1000))
        if c + len(label) <= width and (c == 0 or out[c - 1] == " "):
            out[c : c + len(label)] = label
        k += 1
    return "".join(out)
