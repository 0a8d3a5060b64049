"""Whole-journal passes over raw bytes, at C speed (no Textual): the marker scan and the search.

Neither pass parses every record. The scan also pairs each ``begin`` line with
its step (:class:`StepPairs`, by the ``step``/``pos``/``attempt`` the two lines share,
not by adjacency) so the timeline shows one row per step. The scan counts lines, finds the few records
that navigation and folding need (checkpoints, rollbacks, starts, errors) with
``bytes.find`` and parses only those lines, gives each marker the number of
successful steps since the previous one (counted with ``bytes.count``, so
``history.Fold`` counts the effective steps exactly), and remembers *regions*: slices of
the files that start at a line start, with the seq of their first line. The
search then reads region by region (no copying across chunk edges) and counts
newlines only in regions that hold a match.
"""

from __future__ import annotations

import bisect
import os
import re
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..core import rundir, wire
from ..core.history import ERROR, STEPS, Marker
from ..core.journal_reader import JournalReader
from ..core.pairing import Pairing
from ..core.records import (
    DAMAGED,
    Kind,
    Record,
    damaged_holds_step,
    damaged_was,
    is_foreign,
    parse_line,
)
from ..core.segments import JournalFile, Region, StreamPos, read_stream, segment_paths
from ..core.wire import BEGIN_HEAD as _BEGIN
from ..core.wire import CHANGED_INPUTS as CHANGED_INPUTS
from ..core.wire import CHANGED_WORD as _CHANGED
from ..core.wire import (
    END_WRITER,
    ERROR_KEY,
    ERROR_RE,
    KIND_AT,
    KIND_RE,
    MARKER_KINDS,
    MARKER_WORDS,
    NL_STEP,
    USAGE_WORD,
)
from ..core.wire import STEP_HEAD as _STEP
from ..core.wire import WRITER as _WRITER

__all__ = [
    "CHANGED_INPUTS",
    "DAMAGED",
    "ERROR",
    "STEPS",
    "Marker",
    "Region",
    "ScanResult",
    "SeqBits",
    "StepPairs",
    "add_marker",
    "iter_new_regions",
    "journal_regions",
    "scan_bytes",
    "scan_journal",
    "search_journal",
    "search_regions",
]

CHUNK = 4 * 1024 * 1024
# Every line this package's writer (orjson) writes starts with its kind: such lines are told apart with
# bytes.count and bytes.find (the shapes are core.wire's). Other lines (json.dumps spacing, no kind, a text
# prefix) are classified one by one.
_FAST = (*MARKER_WORDS, ERROR_KEY)


_NONZERO = re.compile(rb"[^\x00]")
_BLOCK_BYTES = 64
_BLOCK = 8 * _BLOCK_BYTES
"""Seqs a rank block of :class:`SeqBits` covers (its running count: 8 bytes per 512 records, a 64th of a byte
a record; a rank pops at most 64 bytes, a select bisects some 2,000 blocks per million records, then 64 bytes)."""


class SeqBits:
    """A set of seqs as one bit per record, with a running count per block of 512: the timeline's folded
    begins (one per step) and a filter's rows in some 0.14 byte a record, where a sorted array took
    8 bytes a member.

    ``rank(s)`` (members below ``s``) is a block's count plus a popcount of at most 64 bytes;
    ``select(i)`` (the ``i``-th member) and ``select_free(i)`` (the ``i``-th number that is not one)
    bisect the blocks, then the bytes; iteration skips empty bytes with a regular expression (in C).
    """

    __slots__ = ("_bits", "_cum", "_hint_free", "_hint_member")

    def __init__(self, seqs: Iterable[int] = ()) -> None:
        self._bits = bytearray()
        self._hint_free = self._hint_member = (-2, 0)
        """The last select's (index, answer): a screen asks for consecutive rows, the next is a step away."""
        self._cum: array[int] = array("q", [0])
        """``_cum[b]``: members in the blocks before ``b`` (one more entry than blocks: the last is the total)."""
        if not isinstance(seqs, (list, tuple, range, array)) or not seqs:
            self.add_many(seqs)
            return
        # many at once (a scan's folded begins, a filter's first pass): one OR a seq, then one count
        blocks = max(seqs) // _BLOCK + 1
        bits = self._bits = bytearray(blocks * _BLOCK_BYTES)
        for s in seqs:
            bits[s >> 3] |= 1 << (s & 7)
        self._cum = array("q", bytes(8 * (blocks + 1)))
        self._recount(0)

    def add_many(self, seqs: Iterable[int]) -> int:
        """Add ``seqs`` (any order); return how many were not members yet."""
        bits = self._bits
        lowest = -1
        added = 0
        for s in seqs:
            i = s >> 3
            if i >= len(bits):
                grow = (i // _BLOCK_BYTES + 1) * _BLOCK_BYTES - len(bits)
                bits.extend(bytes(grow))
                self._cum.extend([self._cum[-1]] * (grow // _BLOCK_BYTES))
            m = 1 << (s & 7)
            if not bits[i] & m:
                bits[i] |= m
                added += 1
                b = i // _BLOCK_BYTES
                if lowest < 0 or b < lowest:
                    lowest = b
        if added:
            self._recount(lowest)
        return added

    def discard_many(self, seqs: Iterable[int]) -> int:
        """Remove ``seqs``; return how many were members."""
        bits = self._bits
        lowest = -1
        removed = 0
        for s in seqs:
            i = s >> 3
            m = 1 << (s & 7)
            if s >= 0 and i < len(bits) and bits[i] & m:
                bits[i] &= ~m & 0xFF
                removed += 1
                b = i // _BLOCK_BYTES
                if lowest < 0 or b < lowest:
                    lowest = b
        if removed:
            self._recount(lowest)
        return removed

    def _recount(self, block: int) -> None:
        """The running counts from ``block`` on (live: the last block or two)."""
        cum, bits = self._cum, self._bits
        self._hint_free = self._hint_member = (-2, 0)
        for b in range(block, len(cum) - 1):
            a = b * _BLOCK_BYTES
            cum[b + 1] = cum[b] + int.from_bytes(bits[a : a + _BLOCK_BYTES], "little").bit_count()

    def copy(self) -> SeqBits:
        out = SeqBits()
        out._bits = bytearray(self._bits)
        out._cum = array("q", self._cum)
        out._hint_free, out._hint_member = self._hint_free, self._hint_member
        return out

    def difference(self, other: SeqBits) -> SeqBits:
        """The members of this set that are not in ``other`` (whole bytes at once, in C)."""
        n = len(self._bits)
        a = int.from_bytes(self._bits, "little")
        b = int.from_bytes(other._bits[:n], "little")
        out = SeqBits()
        out._bits = bytearray((a & ~b).to_bytes(n, "little"))
        out._cum = array("q", bytes(8 * len(self._cum)))
        out._recount(0)
        return out

    def iter_from(self, start: int, stop: int | None = None) -> Iterator[int]:
        """The members from ``start`` to ``stop`` (exclusive; default: all), in order."""
        bits = self._bits
        hi = len(bits) if stop is None else min(len(bits), (stop + 7) >> 3)
        for m in _NONZERO.finditer(bits, max(start, 0) >> 3, hi):
            i = m.start()
            v = bits[i]
            for t in range(8):
                if v >> t & 1:
                    s = 8 * i + t
                    if s >= start and (stop is None or s < stop):
                        yield s

    def tolist(self) -> list[int]:
        return list(self)

    def last(self) -> int:
        """The greatest member (-1: none)."""
        return self.select(len(self) - 1) if len(self) else -1

    def select(self, index: int) -> int:
        """The ``index``-th (from 0) member."""
        cum = self._cum
        if not 0 <= index < cum[-1]:
            raise IndexError(index)
        hi, hs = self._hint_member
        if index == hi:
            return hs
        if index == hi + 1:
            s = next(self.iter_from(hs + 1))
            self._hint_member = (index, s)
            return s
        s = self._select(index)
        self._hint_member = (index, s)
        return s

    def _select(self, index: int) -> int:
        cum = self._cum
        b = bisect.bisect_right(range(len(cum)), index, key=cum.__getitem__) - 1
        return self._nth_in_block(b, index - cum[b], True)  # members to pass in block b

    def _nth_in_block(self, b: int, r: int, member: bool) -> int:
        """The number after ``r`` others of its kind (members, or free numbers) in block ``b``."""
        a = b * _BLOCK_BYTES
        blk = bytes(self._bits[a : a + _BLOCK_BYTES])

        def count(j: int) -> int:  # of its kind in the block's first j bytes
            c = int.from_bytes(blk[:j], "little").bit_count()
            return c if member else 8 * j - c

        j = bisect.bisect_right(range(_BLOCK_BYTES + 1), r, key=count) - 1
        r -= count(j)
        v = blk[j] if member else ~blk[j]
        for t in range(8):
            if v >> t & 1:
                if r == 0:
                    return 8 * (a + j) + t
                r -= 1
        raise AssertionError("select: the counts are wrong")  # pragma: no cover

    def __len__(self) -> int:
        return self._cum[-1]

    def __contains__(self, seq: object) -> bool:
        if type(seq) is not int or seq < 0:
            return False
        i = seq >> 3
        return i < len(self._bits) and bool(self._bits[i] >> (seq & 7) & 1)

    def __iter__(self) -> Iterator[int]:
        return self.iter_from(0)

    def __repr__(self) -> str:
        return f"SeqBits({list(self)!r})"

    def rank(self, seq: int) -> int:
        """The members below ``seq``."""
        if seq <= 0:
            return 0
        bits = self._bits
        i = seq >> 3
        if i >= len(bits):
            return self._cum[-1]
        b = i // _BLOCK_BYTES
        a = b * _BLOCK_BYTES
        return self._cum[b] + int.from_bytes(bits[a:i], "little").bit_count() + (bits[i] & ((1 << (seq & 7)) - 1)).bit_count()

    def select_free(self, index: int) -> int:
        """The ``index``-th (from 0) non-negative number that is not a member."""
        if index < 0:
            raise IndexError(index)
        cum = self._cum
        blocks = len(cum) - 1
        if index >= blocks * _BLOCK - cum[-1]:
            return index + cum[-1]  # past the bitmap: every number is free
        hi, hs = self._hint_free
        if index == hi:
            return hs
        if index == hi + 1:
            s = hs + 1
            while s in self:
                s += 1
            self._hint_free = (index, s)
            return s
        s = self._select_free(index)
        self._hint_free = (index, s)
        return s

    def _select_free(self, index: int) -> int:
        cum = self._cum
        b = bisect.bisect_right(range(len(cum)), index, key=lambda j: j * _BLOCK - cum[j]) - 1
        return self._nth_in_block(b, index - (b * _BLOCK - cum[b]), False)  # free numbers to pass in block b


@dataclass
class StepPairs:
    """Begin lines paired with their step lines in raw bytes, chunk after chunk (a scan's, then the live reads').

    A writer ``begin`` line's head (``"step":...,"pos":N,"attempt":A,``, :data:`wire.BEGIN_KEY`) is repeated
    by its ``step`` line after :data:`wire.STEP_HEAD`: a ``bytes.find`` of that finds the step however many
    records come between (concurrent steps), and the next line for sequential code. The rule is
    :class:`pairing.Pairing`'s (its open begins are this scan's pending ones, keyed by that head): a failed
    try marked ``transient`` does not close a begin; a ``start`` line ends every begin still open. A begin in
    another form pairs with the step line right after it.
    """

    hidden: list[int] = field(default_factory=list)
    """Seqs of the begins whose step record exists (their rows fold into the step's), in the order found."""
    pairing: Pairing = field(default_factory=lambda: Pairing(keep_paired=False))
    """The begins still awaiting their step, keyed by the step line's head (steps in flight)."""
    changed: dict[int, str] = field(default_factory=dict)
    """``pos`` -> step name of every changed-inputs note seen."""
    other: Pairing = field(default_factory=Pairing)
    """The begins and steps in another form than the writer's (parsed: a hand-written journal), by the fold's rule."""

    @property
    def pending(self) -> dict[bytes, int]:
        """The step-line head still awaited -> the seq of its begin (steps in flight)."""
        return {k: int(b["seq"]) for k, b in self.pairing.open.items()}

    def copy(self) -> StepPairs:
        p = Pairing(keep_paired=False)
        p.open = dict(self.pairing.open)
        other = Pairing()
        other.open = dict(self.other.open)
        return StepPairs(list(self.hidden), p, dict(self.changed), other)

    def scan(self, data: bytes, base_seq: int) -> None:
        """Pair the begin lines in ``data`` (whole lines, the first at ``base_seq``) and close pending ones."""
        starts = [i for i in _find_all(data, wire.START_HEAD) if i == 0 or data[i - 1] == 10]
        if self.pairing.open:
            self._close(data, starts[0] if starts else len(data))
        if starts:
            self.pairing.end_attempt()
        transient = wire.TRANSIENT in data  # else no line needs the look for it
        line_at, seq = 0, base_seq
        i = 0 if data.startswith(wire.BEGIN_HEAD) else data.find(wire.NL_BEGIN) + 1 or -1
        while i >= 0:
            seq += data.count(b"\n", line_at, i)
            line_at = i
            end = data.find(b"\n", i)
            m = wire.BEGIN_KEY.match(data, i)
            if m is not None:
                self._begin(data, wire.STEP_HEAD + m.group(1), i, end, seq, starts, transient)
            elif data.startswith(wire.STEP_HEAD, end + 1):
                self.hidden.append(seq)  # a begin without the writer's head: the step line after it
            i = data.find(wire.NL_BEGIN, end) + 1 or -1
        if wire.CHANGED_WORD in data:
            self._notes(data)

    def _begin(self, data: bytes, want: bytes, i: int, end: int, seq: int, starts: list[int], transient: bool) -> None:
        """A writer begin line at ``i`` (ending at ``end``) whose step line starts with ``want``: paired when its
        step is the next line or further on before the next attempt's start, else pending."""
        if data.startswith(want, end + 1) and not (
            transient and data.find(wire.TRANSIENT, end + 1, data.find(b"\n", end + 1)) >= 0
        ):
            self.hidden.append(seq)
            return
        k = bisect.bisect_right(starts, i)
        limit = starts[k] if k < len(starts) else len(data)
        if not self._find(data, want, end, limit, seq) and limit == len(data):
            self.pairing.begin(want, {"seq": seq})

    def _notes(self, data: bytes) -> None:
        """The changed-inputs notes in ``data`` (parsed: there are few)."""
        for j in _find_all(data, wire.CHANGED_WORD):
            a = data.rfind(b"\n", 0, j) + 1
            try:
                rec = parse_line(data[a : data.find(b"\n", j)])
            except ValueError:
                continue
            self.note(rec)

    def parsed(self, rec: Record, seq: int) -> None:
        """Take a parsed line in another form: a begin, a step, a start or a rollback, as the fold pairs them."""
        kind = rec.get("kind", wire.STEP)
        if kind in _PAIRED_KINDS:
            other = self.other
            other.add({**rec, "kind": kind, "seq": seq})
            if other.paired:
                self.hidden.extend(other.paired)
                other.paired.clear()

    def note(self, rec: Record) -> None:
        """Take a parsed record: a changed-inputs note marks its step."""
        if rec.get("kind") == wire.NOTE and rec.get("message") == CHANGED_INPUTS and isinstance(rec.get("pos"), int):
            self.changed[rec["pos"]] = str(rec.get("step") or "")

    def _find(self, data: bytes, want: bytes, at: int, limit: int, seq: int) -> bool:
        j = data.find(b"\n" + want, at, limit)
        while j >= 0:
            if data.find(wire.TRANSIENT, j + 1, data.find(b"\n", j + 1)) < 0:
                self.hidden.append(seq)
                return True
            j = data.find(b"\n" + want, j + 1, limit)
        return False

    def _close(self, data: bytes, limit: int) -> None:
        """Look for the steps of the begins pending from earlier bytes (``data`` starts at a line start)."""
        for want, b in list(self.pairing.open.items()):
            seq = int(b["seq"])
            if data.startswith(want) and data.find(wire.TRANSIENT, 0, data.find(b"\n")) < 0:
                self.hidden.append(seq)
                self.pairing.close(want, seq)
            elif self._find(data, want, 0, limit, seq):
                self.pairing.close(want, seq)


@dataclass
class ScanResult:
    """What a full scan found (built in a worker thread, handed to the model)."""

    count: int = 0
    regions: list[Region] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    """Markers in seq order; fold them (``history.Fold(keep=False)``) for the effective step count."""
    steps: int = 0
    """Step records, failed and abandoned ones included."""
    reader: JournalReader | None = None
    """A reader indexed in the worker too: the model swaps it in (indexing 290 MB takes a second)."""
    pairs: StepPairs = field(default_factory=StepPairs)
    """The begins paired with their steps so far (a live scan goes on with the model's)."""
    usage: bool = False
    """Some line holds ``"usage"`` (a model call's tokens): the status bar sums the run's totals then."""
    end: StreamPos = field(default_factory=StreamPos)
    """Where the scan stopped in the journal stream (a reader of what comes next starts there)."""
    folded: SeqBits | None = None
    """``pairs.hidden`` as a :class:`SeqBits`, made in the worker (``None``: the scan was cancelled)."""


def add_marker(rec: Record, seq: int, markers: list[Marker]) -> bool:
    """Append a marker for ``rec`` if it is one of the kinds navigation needs; return whether it did."""
    kind = rec.get("kind", Kind.STEP)
    if kind == Kind.CHECKPOINT:
        markers.append(Marker(seq, Kind.CHECKPOINT, str(rec.get("name") or ""), str(rec.get("file") or "")))
    elif kind == Kind.ROLLBACK:
        cp_seq = rec.get("checkpoint_seq")
        markers.append(Marker(seq, Kind.ROLLBACK, str(rec.get("checkpoint") or ""), checkpoint_seq=cp_seq))
    elif kind == Kind.START:
        att = rec.get("attempt")
        markers.append(Marker(seq, Kind.START, attempt=att if isinstance(att, int) else None))
    elif (kind is None or kind == Kind.STEP) and rec.get("error") is not None:
        markers.append(Marker(seq, ERROR, str(rec.get("step") or "")))
    else:
        return False
    return True


def _find_all(data: bytes, needle: bytes) -> Iterator[int]:
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + len(needle))


def _step_lines(data: bytes, a: int, b: int) -> int:
    """Writer-format step lines that start in ``data[a:b]`` (``a`` is a line start)."""
    if a >= b:
        return 0
    if a == 0:
        return data.count(NL_STEP, 0, b) + data.startswith(_STEP)
    return data.count(NL_STEP, a - 1, b)


def scan_bytes(data: bytes, base_seq: int, out: ScanResult) -> int:
    """Scan whole lines in ``data`` (the first at ``base_seq``); return the number of lines.

    Markers go to ``out.markers``, each with the successful steps since the
    previous one; those after the last marker go in a closing :data:`STEPS` marker.
    A damaged line gets a :data:`DAMAGED` marker (its ``name``: the kind its first
    bytes show), and the fold gives it a step position by the readers' one rule
    (:func:`records.damaged_holds_step`).
    """
    lines = data.count(b"\n")
    if out.pairs.pending or _BEGIN in data or _CHANGED in data:
        out.pairs.scan(data, base_seq)
    suspects = _suspect_lines(data)
    # every line in the writer's form: it starts with the kind, and ends with "}" (a line cut short does not)
    writer = data.startswith(_WRITER) and data.endswith(b"}\n") and data.count(END_WRITER) == lines - 1
    if writer and not suspects:
        _scan_writer(data, base_seq, lines, out)
    else:
        _scan_lines(data, base_seq, out, suspects)
    return lines


def _suspect_lines(data: bytes) -> set[int]:
    """Indices of the lines that hold a NUL or a ``\\xff`` byte (never in a line this package writes:
    damage that may leave a line's start and end looking whole). Two C-speed searches; usually none."""
    found: set[int] = set()
    for needle in (b"\x00", b"\xff"):
        i = data.find(needle)
        while i >= 0:
            found.add(data.count(b"\n", 0, i))
            i = data.find(b"\n", i)  # on from the end of this line
            if i < 0:
                break
            i = data.find(needle, i)
    return found


def _damaged(line: bytes, seq: int, ok_before: int, out: ScanResult, reason: str) -> int:
    """A :data:`DAMAGED` marker for a line that does not parse, unless it never was a record (then it is
    skipped, as the readers skip it); return the successful steps still to be counted before the next marker."""
    if is_foreign(line, reason):
        return ok_before
    m = Marker(seq, DAMAGED, damaged_was(line), ok_before=ok_before)
    out.markers.append(m)
    out.steps += damaged_holds_step(m.name)
    return 0


def _scan_writer(data: bytes, base_seq: int, lines: int, out: ScanResult) -> None:
    """Every line is in the writer's compact form: count step lines in C, parse only the lines a needle hits.

    A line that starts like a writer step line is counted as a successful step
    unless a needle hits it. A chunk with a line that does not end with ``}``
    (cut short) or that holds a NUL or ``\\xff`` byte never comes here: it is
    classified line by line, so a damaged line in the middle is found. A line
    damaged in a way that leaves it looking whole (a byte flipped inside a
    string) is counted by its first bytes, as the readers' rule counts it.
    """
    hits: list[int] = []
    for needle in _FAST:
        hits.extend(_find_all(data, needle))
    hits.sort()
    seq = base_seq
    pos = 0  # start of the line at ``seq``
    counted = 0  # successful steps are counted up to here
    not_ok = 0  # step lines a needle hit that are not successful steps, since ``counted``
    total = 0
    markers = out.markers
    for h in hits:
        start = data.rfind(b"\n", 0, h) + 1
        if start < pos:
            continue  # a second hit in a line already handled
        seq += data.count(b"\n", pos, start)
        end = data.find(b"\n", h)
        pos = end + 1
        line = data[start:end]
        try:
            rec = parse_line(line)
        except ValueError as e:  # a damaged line (a writer line is never foreign): the fold gives it its place
            ok_before = _step_lines(data, counted, start) - not_ok
            if _damaged(line, seq, ok_before, out, str(e)) == 0:
                total += ok_before
                counted, not_ok = pos, 0
            else:
                not_ok += line.startswith(_STEP)
            seq += 1
            continue
        if add_marker(rec, seq, markers):
            m = markers[-1]
            m.ok_before = _step_lines(data, counted, start) - not_ok
            total += m.ok_before + (m.kind == ERROR)
            counted, not_ok = pos, 0
        seq += 1
    ok = _step_lines(data, counted, len(data)) - not_ok
    out.steps += total + ok
    if ok:
        markers.append(Marker(base_seq + lines, STEPS, ok_before=ok))


_OK_STEP, _SKIP, _PARSE = "ok step", "skip", "parse"


def _glance(line: bytes) -> str:
    """What a look at a line's bytes tells, without parsing it: a successful step (:data:`_OK_STEP`), no marker
    and no step (:data:`_SKIP`: another kind, a blank line), or a line to parse (:data:`_PARSE`)."""
    if line.startswith(_WRITER) and line.endswith(b"}"):
        kind = line[KIND_AT : line.find(b'"', KIND_AT)]
        failed = ERROR_KEY in line
    else:
        m = KIND_RE.match(line)
        if m is None or not line.rstrip().endswith(b"}"):
            return _PARSE if line.strip() else _SKIP
        kind = m.group(1)
        failed = ERROR_RE.search(line) is not None
    if kind == b"step":
        return _PARSE if failed else _OK_STEP
    return _PARSE if kind in MARKER_KINDS else _SKIP


_PAIRED_KINDS = frozenset((wire.BEGIN, wire.STEP, wire.START, wire.ROLLBACK))
_BEGIN_WORD = b'"begin"'


def _scan_lines(data: bytes, base_seq: int, out: ScanResult, suspects: set[int] | None = None) -> None:
    """Lines in other forms are present: classify line by line, parsing only those a look cannot tell.

    ``suspects``: lines that hold a NUL or ``\\xff`` byte; they are parsed whatever they look like."""
    parts = data.split(b"\n")
    parts.pop()  # the bytes after the last newline (none in whole lines)
    markers = out.markers
    ok = 0
    steps = 0
    step_kind = Kind.STEP.value  # looked up once, not per line (an enum member lookup costs ~100 ns)
    # begins in another form than the writer's are paired by parsing the lines of that form (a look cannot pair them)
    pair_other = _BEGIN_WORD in data
    for k, line in enumerate(parts):
        try:
            if pair_other and line and not line.startswith(_WRITER):
                rec = parse_line(line)
                out.pairs.parsed(rec, base_seq + k)
            else:
                if not (suspects and k in suspects):  # a suspect line is parsed whatever it looks like
                    look = _glance(line)
                    if look is _OK_STEP:
                        steps += 1
                        ok += 1
                        continue
                    if look is _SKIP:
                        continue
                rec = parse_line(line)
        except ValueError as e:  # damaged: a marker, and the fold gives it its place; foreign: skipped
            ok = _damaged(line, base_seq + k, ok, out, str(e))
            continue
        kind_v = rec.get("kind")
        if kind_v is None or kind_v == step_kind:  # no kind: a step (the minimal format)
            steps += 1
            if rec.get("error") is None:
                ok += 1
                continue
            rec["kind"] = step_kind
        if add_marker(rec, base_seq + k, markers):
            markers[-1].ok_before = ok
            ok = 0
    out.steps += steps
    if ok:
        markers.append(Marker(base_seq + len(parts), STEPS, ok_before=ok))


def iter_new_regions(
    path: Path, start: int, first_seq: int, first_line: int | None = None, *, chunk: int = CHUNK
) -> Iterator[tuple[Region, bytes]]:
    """Regions of whole lines of ``path`` from byte ``start`` (a line start, whose line has seq
    ``first_seq``) to its committed end, with their bytes: :meth:`JournalFile.chunks` of one file.

    ``first_line`` is the line number at ``start``; unknown, it is found as ``JournalFile.line_at`` does.
    """
    jf = JournalFile.open(path)
    if jf is None:
        return
    with jf:
        if start >= jf.end or not jf.is_line_start(start):
            return  # nothing new, or the file was rewritten in place under the caller: nothing to place
        line = first_line if first_line is not None else jf.line_at(start, first_seq, chunk=chunk)
        for c in jf.chunks(start, first_seq, line, chunk=chunk):
            yield c.region, c.data


def scan_positions(regions: list[Region], count: int) -> dict[int, tuple[int, int]]:
    """Where a live scan goes on in each file (by inode): the end of its last region and the line
    number there. ``regions`` are a scan's, in order; ``count`` the lines it scanned."""
    out: dict[int, tuple[int, int]] = {}
    for i, r in enumerate(regions):
        next_seq = regions[i + 1].first_seq if i + 1 < len(regions) else count
        out[r.ino] = (r.end, r.first_line + next_seq - r.first_seq)
    return out


def scan_journal(source: Path, cancelled: Callable[[], bool] | None = None, *, index: bool = True) -> ScanResult:
    """One pass over the raw bytes (count lines, find markers, record regions); then index a reader."""
    res = ScanResult()
    for c in read_stream(source, res.end, chunk=CHUNK):
        c.n_lines = scan_bytes(c.data, res.count, res)
        res.count += c.n_lines
        res.regions.append(c.region)
        if not res.usage and USAGE_WORD in c.data:  # one C-speed look per chunk, while the bytes are here
            res.usage = True
        if cancelled is not None and cancelled():
            return res
    res.folded = SeqBits(res.pairs.hidden)
    if index:
        reader = JournalReader(source)
        try:
            reader.index()
        except OSError:
            return res
        res.reader = reader
    return res


def _current_paths(regions: list[Region]) -> dict[int, Path]:
    """Where each region's file is now (by inode), after any rotation."""
    out: dict[int, Path] = {}
    for d in {r.path.parent for r in regions}:
        for p in segment_paths(d) if (d / "journal.jsonl").exists() or any(d.glob("journal.*.jsonl")) else []:
            try:
                out[os.stat(p).st_ino] = p
            except OSError:
                continue
    return out


def search_regions(
    regions: list[Region], query: str, cancelled: Callable[[], bool] | None = None, limit: int = 1_000_000
) -> list[int]:
    """Seqs of the lines whose raw JSON text contains ``query``, region by region.

    Smart case, as in less and vim: a query in lower case matches any case.
    """
    where = _current_paths(regions)
    needle = query.encode()
    fold = needle == needle.lower() and needle != needle.upper()
    hits: list[int] = []
    handle = None
    current: Path | None = None
    try:
        for r in regions:
            path = where.get(r.ino, r.path)
            if path != current:
                if handle is not None:
                    handle.close()
                try:
                    handle = os.fdopen(rundir.open_run_file(path, os.O_RDONLY), "rb")
                except FileNotFoundError:
                    handle, current = None, None
                    continue
                current = path
            if handle is None:
                continue
            handle.seek(r.start)
            data = handle.read(r.end - r.start)
            hay = data.lower() if fold else data
            i = hay.find(needle)
            seq, pos = r.first_seq, 0
            while i >= 0:
                start = hay.rfind(b"\n", 0, i) + 1
                seq += hay.count(b"\n", pos, start)
                hits.append(seq)
                pos = hay.find(b"\n", i) + 1
                seq += 1
                if len(hits) >= limit or pos == 0:
                    return hits
                i = hay.find(needle, pos)
            if cancelled is not None and cancelled():
                break
    finally:
        if handle is not None:
            handle.close()
    return hits


def journal_regions(source: Path) -> list[Region]:
    """Regions of the whole journal, for a search before (or without) a scan."""
    return [c.region for c in read_stream(source, chunk=CHUNK)]


def search_journal(source: Path, query: str, cancelled: Callable[[], bool] | None = None) -> list[int]:
    """Search the whole journal (reads it twice: use ``search_regions`` with a scan's regions)."""
    return search_regions(journal_regions(source), query, cancelled)
