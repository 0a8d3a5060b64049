"""Streaming reads of the effective history, for the headless commands (``log``, ``state``, ``diff``).

The same answers as :func:`history.load` gives, in constant memory, in two passes:

1. :func:`plan` reads the raw bytes once and parses only the lines that a
   ``bytes.find`` of ``"checkpoint"`` or ``"rollback"`` hits (and, in a chunk that
   is not all in the writer's form, the lines that are not; for the text ``log``'s
   pairing marks, its begins and the lines after them): the counting
   :class:`history.Fold` gives every rollback's cut, so the abandoned branches are
   known as seq ranges before a single record is printed (a rollback record comes
   *after* the records it abandons: it cannot be streamed in one pass).
2. :class:`Walk` reads the stream again and yields each record the effective
   history (or ``--all``) holds, with what the fold gives it (its ``pos``, whether
   it is abandoned), as it is read.

**Canonical lines.** A ``begin`` or ``step`` line as this package's writer (orjson,
compact) writes it needs no normalisation: it matches :data:`wire.CANON` (the kind, the
step name and ``pos`` first, ``seq``, ``id`` and ``ts`` last)
with ``seq`` its position in the stream, so ``kind``, ``seq``, ``ts`` and ``pos`` are
all there at the top level (the quotes and braces of the head and tail are
unescaped, so they cannot be inside a string), and a step line without
``"error":`` is a success. The walk hands such a line out as its bytes (``log
--json`` writes them as they are, no decode, no encode) and reads its ``pos``
from them. Any other line (start, checkpoint, rollback, note, failed steps,
hand-written lines, any line of a chunk that holds a NUL or ``\\xff`` byte or a line
not in the writer's form) is parsed and normalised as the reader does it. As in the
TUI's scan, a line damaged in a way that keeps its writer head and tail and leaves no
NUL or ``\\xff`` byte (a byte flipped inside a string) is taken by its head and tail.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from . import pairing, wire
from .cursor import Shape
from .history import MISSING_TARGET, Fold
from .nesting import Nesting, find_begin
from .records import DAMAGED, BadLine, Record, normalize, parse_line
from .segments import CHUNK, Chunk, Region, read_stream

__all__ = ["BATCH", "Item", "NestedItem", "Plan", "Walk", "entry_seq", "plan"]

_STEP, _BEGIN, _CHECKPOINT, _ROLLBACK, _START = wire.STEP, wire.BEGIN, wire.CHECKPOINT, wire.ROLLBACK, wire.START
_loads = orjson.loads


def _parse(raw: bytes, seq: int, path: Path, line_no: int, offset: int) -> Record | BadLine | None:
    """One line as :class:`journal.JournalReader` parses it (blank: ``None``)."""
    if not raw.strip():
        return None
    try:
        rec = parse_line(raw)
    except ValueError as e:
        return BadLine(str(path), line_no, seq, str(e), raw[:200].decode("utf-8", "replace"), offset)
    if rec.get("seq") != seq or "kind" not in rec or "ts" not in rec:
        normalize(rec, seq)
    return rec


@dataclass
class Plan:
    """What the first pass finds: the rollbacks' cuts, the snapshots, the effective checkpoints."""

    count: int = 0
    """Lines in the stream (the next seq)."""
    regions: list[Region] = field(default_factory=list)
    """The chunks read, in order (known line starts, for a :class:`cursor.StateCursor`)."""
    cuts: dict[int, int] = field(default_factory=dict)
    """Rollback seq -> the seq of the checkpoint it returned to (-1: the start), for every rollback that cut."""
    missing: set[int] = field(default_factory=set)
    """Seqs of the rollbacks that named no effective checkpoint (a problem, no cut)."""
    abandoned: list[tuple[int, int]] = field(default_factory=list)
    """Half-open seq ranges of the abandoned branches, merged, in order."""
    shape: Shape = field(default_factory=Shape)
    checkpoints: list[Record] = field(default_factory=list)
    """The checkpoint records of the effective history, in order."""
    problems: list[BadLine] = field(default_factory=list)
    """Bad lines and rollbacks naming no checkpoint, in seq order (as ``History.problems``)."""
    no_record: set[int] = field(default_factory=set)
    """Seqs of the lines that are no record (blank or bad)."""
    last: int = -1
    """The seq of the last record of the effective history (a damaged line counts; -1: none)."""
    paired: bool = False
    """(``plan(pairs=True)``) Every ``begin`` is followed on the next line by its own step (a writer line: the
    same name and pos, :func:`pairing.writer_pairs`; in a chunk not all in the writer's form, any record of the
    same integer pos, :func:`pairing.foreign_pairs`), not a try to be retried, but maybe the stream's last line:
    then no step was ever in flight when another began, and no begin was interrupted (the text ``log``'s look
    ahead is not needed; with overlapping steps or a crash it is)."""
    open_at_end: tuple[int, int] | None = None
    """(``paired``) ``(seq, pos)`` of the begin that is the stream's last line, in flight."""
    writer: dict[tuple[int, int, int], bool] = field(default_factory=dict)
    """``(inode, start, end)`` of each chunk read -> whether all its lines are in the writer's form (the
    second pass reads the same chunks and need not count again)."""

    def writer_chunk(self, c: Chunk, n: int) -> bool:
        r = c.region
        known = self.writer.get((r.ino, r.start, r.end))
        return wire.is_writer_chunk(c.data, n) if known is None else known

    def is_abandoned(self, seq: int) -> bool:
        r = self.abandoned
        i = bisect.bisect_right(r, (seq, 1 << 62)) - 1
        return i >= 0 and r[i][0] <= seq < r[i][1]


def _line_numbers(data: bytes, n: int, starts: set[int]) -> list[tuple[int, int]]:
    """``(start, k)`` for each line start of ``data`` (``n`` lines) in ``starts``, in order: ``k`` its line
    number in ``data``, the newlines counted from the nearer known point (the hit before it, or for a hit in
    the second half the hit after it or the end), so the counts cover less than the chunk once."""
    order = sorted(starts)
    half = len(data) // 2
    out: list[tuple[int, int]] = []
    k = at = 0
    for s in order:
        if s > half:
            break
        k += data.count(b"\n", at, s)
        at = s
        out.append((s, k))
    back: list[tuple[int, int]] = []
    k, at = n, len(data)
    for s in reversed(order[len(out):]):
        k -= data.count(b"\n", s, at)
        at = s
        back.append((s, k))
    out.extend(reversed(back))
    return out


def plan(source: Path, *, chunk: int = CHUNK, pairs: bool = False, check: bool = True) -> Plan:
    """The first pass over the raw bytes (see the module's docstring); ``pairs``: also find whether the
    begins pair with their steps line by line (:attr:`Plan.paired`). ``check=False`` (a reader whose walk
    parses every line and reports the bad ones itself: ``log``): a line not in the writer's form is parsed
    only if a marker word is in it, so :attr:`Plan.problems`, :attr:`Plan.no_record` and :attr:`Plan.last`
    leave out bad lines (a foreign journal's lines are parsed once, not twice; with ``pairs``, its begins and
    the lines after them are parsed here too: less than the look ahead's walk they spare)."""
    pl = _Planner(pairs, check)
    for c in read_stream(source, chunk=chunk):
        pl.chunk(c)
    return pl.finish()


class _Planner:
    """The state of :func:`plan`'s pass: the counting fold of the markers, the pairing check's carry."""

    def __init__(self, pairs: bool, check: bool = True) -> None:
        self.p = Plan(paired=pairs)
        self.check = check
        self.carry: pairing.Carry | None = None  # what the last chunk's last begin wants from the next one's first line
        self.foreign = False  # a chunk not all in the writer's form was read
        self.nested = False  # a chunk held a nested record's word (:data:`wire.PARENT_WORD`)
        self.fold = Fold(keep=False)
        self.cps: list[tuple[int, str]] = []

    def marker(self, rec: Record, seq: int) -> None:
        """A parsed record: a checkpoint or rollback goes to the fold (a rollback's cut, or its problem)."""
        kind, fold, p = rec.get("kind", _STEP), self.fold, self.p
        if kind == _CHECKPOINT:
            fold.add(rec)
            if rec.get("file"):
                self.cps.append((seq, str(rec["file"])))
        elif kind == _ROLLBACK:
            before, n_cuts = fold.problem_count, len(fold.cuts)
            fold.add(rec)
            if fold.problem_count > before:
                p.missing.add(seq)
                p.problems.append(BadLine("journal", 0, seq, MISSING_TARGET, ""))
            elif len(fold.cuts) > n_cuts:
                p.cuts[seq] = fold.cuts[-1][0]

    def bad(self, b: BadLine) -> None:
        p = self.p
        p.problems.append(b)
        p.no_record.add(b.seq)
        if not b.foreign:
            p.last = b.seq

    def chunk(self, c: Chunk) -> None:
        reg, p = c.region, self.p
        n = c.count()
        p.regions.append(reg)
        w = p.writer[(reg.ino, reg.start, reg.end)] = wire.is_writer_chunk(c.data, n)
        if w:
            self._writer_chunk(c, n, wire.MARKS)
        elif self.check:
            self._other_chunk(c)
        else:  # only the lines a marker word is in are parsed, found as in a writer chunk
            self._writer_chunk(c, n, wire.WORDS)
        if p.paired:
            self._pair(c, w)
        p.count = reg.first_seq + n

    def _pair(self, c: Chunk, writer: bool) -> None:
        """The pairing check of one more chunk (:attr:`Plan.paired`). A journal not all in the writer's form
        that holds a nested record's word is left to the look ahead: its walk gives nested records their path
        (:meth:`Walk.batches`), as it did before such journals were checked here."""
        p, data = self.p, c.data
        self.foreign = self.foreign or not writer
        self.nested = self.nested or wire.PARENT_WORD in data
        if self.foreign and self.nested:
            p.paired, self.carry = False, None
        elif writer:
            p.paired, self.carry = pairing.writer_pairs(data, self.carry)
        else:
            p.paired, self.carry = pairing.foreign_pairs(data, self.carry)

    def _writer_chunk(self, c: Chunk, n: int, needles: tuple[bytes, ...]) -> None:
        """A chunk all in the writer's form (or any chunk, unchecked): only the lines one of ``needles`` is in
        are parsed (C-speed finds)."""
        data, reg, p = c.data, c.region, self.p
        first = reg.first_seq
        starts: set[int] = set()
        for needle in needles:
            i = data.find(needle)
            while i >= 0:
                starts.add(data.rfind(b"\n", 0, i) + 1)
                i = data.find(needle, i + 1)
        for s, k in _line_numbers(data, n, starts):
            e = data.find(b"\n", s)
            ent = _parse(data[s:e], first + k, reg.path, reg.first_line + k, reg.start + s)
            if isinstance(ent, BadLine):
                self.bad(ent)
            elif ent is not None:
                self.marker(ent, first + k)
        p.last = max(p.last, first + n - 1)

    def _other_chunk(self, c: Chunk) -> None:
        """A chunk not all in the writer's form: every line not plainly a writer line without a marker word parsed."""
        reg, p = c.region, self.p
        first, off = reg.first_seq, reg.start
        for k, raw in enumerate(c.lines()):
            seq = first + k
            if wire.is_writer_line(raw) and not wire.is_marker_line(raw):
                p.last = seq
            else:
                ent = _parse(raw, seq, reg.path, reg.first_line + k, off)
                if ent is None:
                    p.no_record.add(seq)
                elif isinstance(ent, BadLine):
                    self.bad(ent)
                else:
                    self.marker(ent, seq)
                    p.last = seq
            off += len(raw) + 1

    def finish(self) -> Plan:
        p, fold = self.p, self.fold
        if p.paired and self.carry is not None:  # the stream ends with a begin: in flight
            p.open_at_end = (p.count - 1, self.carry[1])
        p.problems.sort(key=lambda b: b.seq)
        p.checkpoints = list(fold.checkpoints)
        p.shape = Shape(tuple(self.cps), tuple(fold.cuts))
        merged: list[tuple[int, int]] = []
        for a, b in sorted((t + 1, r) for t, r in fold.cuts if r > t + 1):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        p.abandoned = merged
        return p


class Item(NamedTuple):
    """A record of the effective history (or of ``--all``) as the walk hands it out."""

    seq: int
    kind: str
    pos: Any
    raw: bytes | None
    """The line as written, when it is canonical (``rec`` is then ``None``)."""
    rec: Record | None
    """The parsed, normalised record (with the fold's ``pos``) of a line that is not canonical."""
    abandoned: bool
    name: Any = None
    """A canonical line's step name, as JSON string content (bytes; text when ``rec`` is parsed too)."""
    ts: Any = None
    """A canonical line's ``ts`` (bytes; text when ``rec`` is parsed too)."""

    def record(self) -> Record:
        """The record (parsed from the line if canonical)."""
        if self.rec is not None:
            return self.rec
        assert self.raw is not None
        rec: Record = orjson.loads(self.raw)
        return rec

    def step_name(self) -> str | None:
        """The ``step`` field as text (``None``: none)."""
        if self.rec is not None:
            v = self.rec.get("step")
            return None if v is None else v if isinstance(v, str) else str(v)
        if self.name is not None:
            if b"\\" in self.name:
                text: str = orjson.loads(b'"' + self.name + b'"')
                return text
            return str(self.name.decode())
        return None

    def time(self) -> str | None:
        """The ``ts`` field (``None``: none, or not text)."""
        if self.rec is not None:
            v = self.rec.get("ts")
            return v if isinstance(v, str) else None
        return None if self.ts is None else str(self.ts.decode())


class NestedItem(Item):
    """The item of a nested step's record (parsed): an :class:`Item` that also knows the names of the steps it
    is nested in (:attr:`path`)."""

    path: tuple[str, ...]
    """The enclosing steps' names, outermost first (:data:`nesting.UNKNOWN` for one whose begin was not found)."""


Row = tuple[int, str, Any, bytes | None, Record | None, bool, Any, Any]
"""What :meth:`Walk.batches` hands out: an :class:`Item`, or a plain tuple of its fields."""


class Walk:
    """The second pass: the records of the effective history (``all_``: and of the abandoned branches) in
    journal order, each given the ``pos`` the fold gives it, in constant memory.

    It follows :class:`history.Fold` record by record: ``top`` is the highest ``pos``
    among the effective steps (a rollback sets it back to what it was at its checkpoint),
    a record without an integer ``pos`` gets ``top + 1``. ``problems`` collects the
    bad lines and the rollbacks naming no checkpoint as it meets them (``warn``: a
    callable given each).
    """

    def __init__(
        self, source: Path, plan_: Plan, *, all_: bool = False, kinds: set[str] | None = None, chunk: int = CHUNK
    ) -> None:
        """``kinds``: the canonical lines of other kinds are passed over without an :class:`Item` (the
        caller still filters the others)."""
        self.source = source
        self.plan = plan_
        self.all = all_
        self.kinds = kinds
        self.chunk = chunk
        self.top = -1
        self._cp_top: dict[int, int] = {}
        self._at = (0, 0)  # the last line parsed in the chunk being walked: its index and byte offset
        self._cur: tuple[list[bytes], int] = ([], 0)  # the chunk's lines and the index of the line being parsed
        self._ab: tuple[int, bool, int] = (0, False, _NEVER)
        """Where :meth:`batches` is: the first abandoned range not wholly before it, whether it is in one, the
        next seq where that changes."""
        self._nesting: Nesting | None = None
        """The paths of nested records, once one is met (:meth:`_nested_rows`); ``None`` while none was."""
        self._region: Region | None = None
        """The region of the last chunk that held nested records (a parent's begin is looked for before it)."""
        self._chunk: Chunk | None = None
        """That chunk while it is walked (a parent's begin is looked for in its bytes first)."""

    # the fold's per-record rules for a parsed entry
    def _entry(self, ent: Record | BadLine, abandoned: bool, warn: Any) -> Item | None:
        if isinstance(ent, BadLine):
            return self._bad(ent, abandoned, warn)
        rec = ent
        kind = rec.get("kind", _STEP)
        seq = rec["seq"]
        if kind == _STEP and rec.get("error") is None:
            p = rec.get("pos")
            if type(p) is not int:
                p = rec["pos"] = self.top + 1
            self.top = max(self.top, p)
        elif kind == _CHECKPOINT:
            self._cp_top[seq] = self.top
        elif kind == _ROLLBACK:
            if seq in self.plan.missing and warn is not None:
                warn(BadLine("journal", 0, seq, MISSING_TARGET, ""))
            target = self.plan.cuts.get(seq)
            if target is not None:
                self.top = self._cp_top.get(target, -1) if target >= 0 else -1
        if type(rec.get("pos")) is not int:
            rec["pos"] = self.top + 1
        if self._nesting is not None:
            path = self._nesting.add(rec)
            if path is not None:
                item = NestedItem(seq, kind, rec["pos"], None, rec, abandoned)
                item.path = path
                return item
        return Item(seq, kind, rec["pos"], None, rec, abandoned)

    def _bad(self, ent: BadLine, abandoned: bool, warn: Any) -> Item | None:
        """A line that is no record: a damaged one keeps its place (and maybe a step position)."""
        if warn is not None:
            warn(ent)
        if ent.foreign:
            return None
        rec = ent.record()
        m = wire.TEXT_POS.search(ent.text)
        pos = int(m.group(1)) if m else self.top + 1
        if rec["holds_step"] and pos >= self.top:
            self.top = pos
        if self.all:
            return Item(ent.seq, DAMAGED, None, None, ent.record(), abandoned)  # as --all showed it: no pos
        rec["pos"] = pos
        return Item(ent.seq, DAMAGED, pos, None, rec, abandoned)

    def __iter__(self) -> Iterator[Item]:
        return self.items()

    def items(self, warn: Any = None, *, parse_steps: bool = False) -> Iterator[Item]:
        """Walk the whole stream, an :class:`Item` at a time (:meth:`batches`' rows made items)."""
        new = tuple.__new__
        for batch in self.batches(warn, parse_steps=parse_steps):
            for row in batch:
                yield row if isinstance(row, Item) else new(Item, row)  # an Item (maybe a NestedItem) as it is

    def batches(self, warn: Any = None, *, parse_steps: bool = False, plain_begins: bool = False) -> Iterator[list[Row]]:
        """Walk the whole stream, :data:`BATCH` rows at most at a time: the one loop of the second pass. A row is
        an :class:`Item`, or for a canonical line a plain tuple of the same fields (a third of the cost of an
        ``Item`` a line, measured on the text ``log``), whose ``name`` and ``ts`` are text for a parsed step.

        The fast branch (a chunk all in the writer's form, :meth:`Plan.writer_chunk`) takes a canonical line by
        its bytes, no parse, no normalisation: the loop runs once a line of a million-record journal, and the
        parsed path costs twice as much a line. ``parse_steps`` (the text ``log``, which shows every step's
        output and so parses it anyway): a step line is parsed in place of the :data:`wire.CANON` match (a
        regex as dear as the parse), and handed out with both ``raw`` and ``rec`` when it is what the parsed
        path takes as is (its own seq, an integer ``pos``, text ``step`` and ``ts``, no ``error``).
        ``plain_begins`` (the text ``log`` of steps that did not overlap, which shows no begin's ``pos``): a begin
        line of :data:`wire.PLAIN_BEGIN` comes with ``pos`` ``None`` and its ``ts`` cut at 23 (a third of the
        :data:`wire.CANON` match's cost; 8% of the text ``log``). In a chunk not all in the writer's form the text
        ``log`` takes such rows from each line's one parse (:meth:`_parsed_rows`).

        The text ``log`` (``parse_steps``) shows a nested step's record with its path: in a chunk that holds
        :data:`wire.PARENT_WORD`, the lines that hold it are parsed (:meth:`_nested_rows`), the others walked as
        ever. Where the first pass found every begin followed by its own step (:attr:`Plan.paired`), no step ran
        inside another: not even that one look a chunk."""
        ranges = self.plan.abandoned
        self._ab = (0, False, ranges[0][0] if ranges else _NEVER)
        nest = parse_steps and not self.plan.paired
        for c in read_stream(self.source, chunk=self.chunk):
            lines, fast = self._lines(c)
            if lines is None:
                break
            self._at = (0, c.region.start)
            self._cur = (lines, 0)
            if nest and wire.PARENT_WORD in c.data:
                yield from self._nested_rows(c, lines, fast, warn, parse_steps, plain_begins)
                continue
            for lo in range(0, len(lines), BATCH):  # a chunk's rows in parts: their parsed records do not pile up
                yield self._rows(c, lines, lo, lo + BATCH, fast, warn, parse_steps, plain_begins)

    def _nested_rows(
        self, c: Chunk, lines: list[bytes], fast: bool, warn: Any, parse_steps: bool, plain_begins: bool
    ) -> Iterator[list[Row]]:
        """The rows of a chunk that may hold nested records: each line that holds :data:`wire.PARENT_WORD` parsed and
        fed to the nesting (a nested record's item knows its path), the lines between them walked by :meth:`_rows`.
        A top-level parent's begin, taken by its bytes, is found by its bytes when its first child comes."""
        if self._nesting is None:
            self._nesting = Nesting(self._find_begin)
        self._region, self._chunk = c.region, c
        data, n = c.data, len(lines)
        starts: set[int] = set()
        i = data.find(wire.PARENT_WORD)
        while i >= 0:
            starts.add(data.rfind(b"\n", 0, i) + 1)
            i = data.find(wire.PARENT_WORD, data.find(b"\n", i) + 1 or len(data))
        if len(starts) * _DENSE > n:  # nested lines everywhere: parsing each line costs less than cutting between
            for lo in range(0, n, BATCH):
                yield self._rows(c, lines, lo, lo + BATCH, False, warn, parse_steps, plain_begins)
            self._chunk = None
            return
        out: list[Row] = []
        lo = 0
        for _, k in _line_numbers(data, c.count(), starts):
            if k >= n:
                break  # appended after the first pass
            for a in range(lo, k, BATCH):
                out += self._rows(c, lines, a, min(a + BATCH, k), fast, warn, parse_steps, plain_begins)
            out += self._rows(c, lines, k, k + 1, False, warn, parse_steps, plain_begins)
            lo = k + 1
            if len(out) >= BATCH:
                yield out
                out = []
        for a in range(lo, n, BATCH):
            out += self._rows(c, lines, a, min(a + BATCH, n), fast, warn, parse_steps, plain_begins)
            yield out
            out = []
        self._chunk = None  # its bytes are let go with it
        if out:
            yield out

    def _rows(
        self, c: Chunk, lines: list[bytes], lo: int, hi: int, fast: bool, warn: Any, parse_steps: bool, plain_begins: bool
    ) -> list[Row]:
        """The rows of ``lines[lo:hi]`` (chunk ``c``; ``fast``: all in the writer's form): the loop of
        :meth:`batches`. Where the walk is between two lines (the abandoned range it is in, ``top``) is kept on
        the walk (``_ab``, ``top``) from one batch to the next."""
        if not fast and parse_steps and self._nesting is None:
            return self._parsed_rows(c, lines, lo, hi, warn, plain_begins)
        ranges = self.plan.abandoned
        ri, ab, nxt = self._ab  # the first range not wholly before the seq; abandoned; the next seq where that changes
        show_step, show_begin = self._shows(ab)
        canon, plain = wire.CANON.fullmatch, wire.PLAIN_BEGIN.fullmatch
        loads, bad_json = orjson.loads, orjson.JSONDecodeError
        fields = operator.itemgetter("seq", "pos", "step", "ts", "kind")  # one call for the five; KeyError: parsed
        s_byte, k_off, error = wire.S_BYTE, wire.KIND_AT, wire.ERROR_KEY
        step_b, step_s, begin_s = b"step", wire.STEP, wire.BEGIN
        first = c.region.first_seq
        top = self.top
        out: list[Row] = []
        add = out.append
        for seq, raw in enumerate(lines[lo:hi], first + lo):
            if seq >= nxt:  # abandoned: inside one of the merged ranges (seqs only grow)
                ri, ab, nxt = _abandoned_at(ranges, ri, seq)
                show_step, show_begin = self._shows(ab)
            if fast:
                if parse_steps and raw[k_off] == s_byte:  # {"kind":"s…: a step (or a start: parsed below)
                    try:
                        rec = loads(raw)
                        s, p, name, ts, kind = fields(rec)
                    except (bad_json, KeyError):
                        s = p = name = ts = kind = None
                    if (
                        (s, kind) == (seq, step_s)
                        and type(s) is int is type(p)
                        and type(name) is str is type(ts)
                        and rec.get("error") is None
                    ):
                        if p >= top:
                            top = p
                        if show_step:
                            add((seq, step_s, p, raw, rec, ab, name, ts))
                        continue
                elif plain_begins and (m := plain(raw)) is not None and int(m[2]) == seq:
                    if show_begin:
                        add((seq, begin_s, None, raw, None, ab, m[1], m[3]))
                    continue
                elif (m := canon(raw)) is not None and int(m[4]) == seq:
                    kind, name, p, s, ts = m.groups()
                    pos = int(p)
                    if kind != step_b:  # a begin: its pos sets nothing
                        if show_begin:
                            add((seq, begin_s, pos, raw, None, ab, name, ts))
                        continue
                    if error not in raw:
                        if pos >= top:
                            top = pos
                        if show_step:
                            add((seq, step_s, pos, raw, None, ab, name, ts))
                        continue
            self.top = top
            item = self._parsed(c, lines, seq - first, ab, warn)
            top = self.top
            if item is not None and (self.all or not ab):
                add(item)
        self.top = top
        self._ab = (ri, ab, nxt)
        return out

    def _parsed_rows(
        self, c: Chunk, lines: list[bytes], lo: int, hi: int, warn: Any, plain_begins: bool
    ) -> list[Row]:
        """:meth:`_rows` of a chunk not all in the writer's form for the text ``log`` (``parse_steps``; a foreign
        journal's every chunk): each line parsed once. A step the parsed path takes as it is (its own seq, an
        integer ``pos``, text ``step`` and ``ts``, no ``error``, no ``source``) is handed out as the fast branch
        hands out a writer step (both ``raw`` and ``rec``); with ``plain_begins`` a begin of the same shape whose
        name holds no backslash as a plain begin (its name and its ``ts`` cut or padded to 23 as bytes). The text
        of such a row is made without :func:`~supervisor.cli.log_text.format_record` (half the text ``log``'s
        time on a foreign journal), the same text. Any other line takes the fold's rules (:meth:`_entry`)."""
        ranges = self.plan.abandoned
        ri, ab, nxt = self._ab
        show_step, show_begin = self._shows(ab)
        loads, bad_json = orjson.loads, orjson.JSONDecodeError
        fields = operator.itemgetter("seq", "pos", "step", "ts", "kind")
        step_s, begin_s = wire.STEP, wire.BEGIN
        first = c.region.first_seq
        top = self.top
        out: list[Row] = []
        add = out.append
        for seq, raw in enumerate(lines[lo:hi], first + lo):
            if seq >= nxt:
                ri, ab, nxt = _abandoned_at(ranges, ri, seq)
                show_step, show_begin = self._shows(ab)
            try:
                rec = loads(raw)
                s, p, name, ts, kind = fields(rec)
            except bad_json:
                rec = s = None
            except (KeyError, TypeError):  # not all five, or no object
                s = None
            if s == seq and type(s) is int and type(name) is str is type(ts) and "source" not in rec:
                if kind == step_s and type(p) is int and rec.get("error") is None:
                    if p >= top:
                        top = p
                    if show_step:
                        add((seq, step_s, p, raw, rec, ab, name, ts))
                    continue
                if kind == begin_s and plain_begins and "\\" not in name:
                    if show_begin:
                        add((seq, begin_s, None, raw, None, ab, name.encode(), f"{ts[:23]:23}".encode()))
                    continue
            self.top = top
            if type(rec) is dict:  # as :meth:`_parsed` takes a JSON object
                if rec.get("seq") != seq or "kind" not in rec or "ts" not in rec:
                    normalize(rec, seq)
                item = self._entry(rec, ab, warn)
            else:
                item = self._parsed(c, lines, seq - first, ab, warn)
            top = self.top
            if item is not None and (self.all or not ab):
                add(item)
        self.top = top
        self._ab = (ri, ab, nxt)
        return out

    def _find_begin(self, record_id: str) -> Record | None:
        """A parent's begin not fed (taken by its bytes): searched for before the line being walked, in its chunk,
        then in the chunks before, backwards."""
        cur, chunk = self._region, self._chunk
        if cur is None:
            return None
        if chunk is not None and chunk.region is cur:
            j = chunk.data.rfind(wire.id_needle(record_id), 0, self._offset() - cur.start)
            if j >= 0:
                try:
                    return parse_line(chunk.data[chunk.data.rfind(b"\n", 0, j) + 1 : chunk.data.find(b"\n", j)])
                except ValueError:
                    return None
        before = [r for r in self.plan.regions if r.first_seq < cur.first_seq]
        if before and before[-1].ino == cur.ino and before[-1].end > cur.start:  # the plan's chunks may be larger
            before[-1] = replace(before[-1], end=cur.start)
        got = find_begin(before, record_id)
        return None if got is None else got[0]

    def _shows(self, ab: bool) -> tuple[bool, bool]:
        """Whether a canonical step and a canonical begin make a row (abandoned: ``ab``)."""
        show = self.all or not ab
        kinds = self.kinds
        return show and (kinds is None or _STEP in kinds), show and (kinds is None or _BEGIN in kinds)

    def _lines(self, c: Chunk) -> tuple[list[bytes] | None, bool]:
        """A chunk's lines up to the first pass's end (``None``: past it; lines appended since it are left out:
        it did not see them) and whether they are all in the writer's form."""
        first, limit = c.region.first_seq, self.plan.count
        if first >= limit:
            return None, False
        lines = c.lines()
        fast = self.plan.writer_chunk(c, len(lines))
        if first + len(lines) > limit:
            del lines[limit - first :]
        return lines, fast

    def _parsed(self, c: Chunk, lines: list[bytes], k: int, ab: bool, warn: Any) -> Item | None:
        """Line ``k`` of chunk ``c`` the fast branch did not take: parsed and given the fold's rules. A JSON object
        is taken at once (a foreign journal's every line comes here); anything else goes through :func:`_parse`
        with its byte offset (:meth:`_offset`)."""
        self._cur = (lines, k)
        raw = lines[k]
        seq = c.region.first_seq + k
        try:
            rec = _loads(raw)
        except orjson.JSONDecodeError:
            rec = None
        if type(rec) is dict:
            if rec.get("seq") != seq or "kind" not in rec or "ts" not in rec:
                normalize(rec, seq)
            return self._entry(rec, ab, warn)
        reg = c.region
        ent = _parse(raw, seq, reg.path, reg.first_line + k, self._offset())
        return None if ent is None else self._entry(ent, ab, warn)

    def _offset(self) -> int:
        """The byte offset of the line being walked (``_cur``), counted on from the last one asked (``_at``)."""
        lines, k = self._cur
        at_k, off = self._at
        off += sum(map(len, lines[at_k:k])) + k - at_k
        self._at = (k, off)
        return off

    def entries(self, entries: list[Record | BadLine], warn: Any = None) -> Iterator[Item]:
        """Walk parsed entries (a window read from the end: ``JournalReader.tail``). A nested record whose
        parent's begin is before the window has :data:`nesting.UNKNOWN` in its path."""
        plan_ = self.plan
        if self._nesting is None:
            self._nesting = Nesting()
        for ent in entries:
            ab = plan_.is_abandoned(entry_seq(ent))
            item = self._entry(ent, ab, warn)
            if item is not None and (self.all or not ab):
                yield item


_NEVER = 1 << 62
"""A seq past any stream's end."""

BATCH = 256
"""The most items :meth:`Walk.batches` hands out at once."""
_DENSE = 8
"""A chunk with a nested record in more than one line of this many is parsed whole (:meth:`Walk._nested_rows`)."""


def _abandoned_at(ranges: list[tuple[int, int]], ri: int, seq: int) -> tuple[int, bool, int]:
    """At ``seq`` (seqs only grow; ``ri`` the first range not wholly before the last one asked): the first
    range not wholly before ``seq``, whether ``seq`` is abandoned, and the next seq where that changes."""
    while ri < len(ranges) and ranges[ri][1] <= seq:
        ri += 1
    if ri == len(ranges):
        return ri, False, _NEVER
    ab = ranges[ri][0] <= seq
    return ri, ab, ranges[ri][1] if ab else ranges[ri][0]


def entry_seq(ent: Record | BadLine) -> int:
    return ent.seq if isinstance(ent, BadLine) else int(ent["seq"])
