"""Streaming reads of the effective history, for the headless commands (``log``, ``state``, ``diff``).

The same answers as :func:`history.load` gives, in constant memory, in two passes:

1. :func:`plan` reads the raw bytes once and parses only the lines that a
   ``bytes.find`` of ``"checkpoint"`` or ``"rollback"`` hits (and, in a chunk that
   is not all in the writer's form, the lines that are not): the counting
   :class:`history.Fold` gives every rollback's cut, so the abandoned branches are
   known as seq ranges before a single record is printed (a rollback record comes
   *after* the records it abandons: it cannot be streamed in one pass).
2. :class:`Walk` reads the stream again and yields each record the effective
   history (or ``--all``) holds, with what the fold gives it (its ``pos``, whether
   it is abandoned), as it is read.

**Canonical lines.** A ``begin`` or ``step`` line as this package's writer (orjson,
compact) writes it needs no normalisation: it starts
``{"kind":"step"|"begin","step":"…","pos":N,`` and ends ``,"seq":S,"id":"…","ts":"…"}``
with ``S`` its position in the stream, so ``kind``, ``seq``, ``ts`` and ``pos`` are
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
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from .cursor import Shape
from .history import MISSING_TARGET, Fold
from .records import DAMAGED, BadLine, Kind, Record, normalize, parse_line, preview
from .segments import CHUNK, Chunk, Region, read_stream

__all__ = ["Item", "Plan", "StreamPairing", "Walk", "entry_seq", "plan"]

_STEP, _BEGIN, _CHECKPOINT, _ROLLBACK = Kind.STEP.value, Kind.BEGIN.value, Kind.CHECKPOINT.value, Kind.ROLLBACK.value
_WRITER = b'{"kind":"'
_END_WRITER = b'}\n' + _WRITER
_MARKS = (b'"kind":"checkpoint"', b'"kind":"rollback"')
_WORDS = (b"checkpoint", b"rollback")
_CANON = re.compile(
    rb'\{"kind":"(step|begin)","step":"([^"\\]*(?:\\.[^"\\]*)*)","pos":(\d+),.*,"seq":(\d+),"id":"[^"\\]*","ts":"([^"\\]*)"\}',
    re.DOTALL,
)
"""A writer begin/step line whole: its head (kind, the step name as JSON string content, pos) and its tail
(seq, ts: the last ``,"seq":`` of the line, the greedy ``.*`` backtracks from the end), all top-level."""
_TEXT_POS = re.compile(r'"pos"\s*:\s*(\d+)')
_ERROR = b'"error":'
_S = ord("s")
_PLAIN_BEGIN = re.compile(
    rb'\{"kind":"begin","step":"([^"\\]*)","pos":\d+,.*,"seq":(\d+),"id":"[^"\\]*","ts":"([\x20\x21\x23-\x5b\x5d-\x7e]{23})[\x20\x21\x23-\x5b\x5d-\x7e]*"\}',
    re.DOTALL,
)
"""A writer begin line (:data:`_CANON`) whose name has no escape and whose ``ts`` is ASCII, 23 characters or more:
the text ``log`` copies the name and the first 23 of the ``ts`` (groups: name, seq, the 23)."""
_TRANSIENT = b'"transient":'


def _suspect(data: bytes) -> bool:
    """A NUL or ``\\xff`` byte: never in a line this package writes (a damaged line may still look whole)."""
    return b"\x00" in data or b"\xff" in data


def _writer_chunk(data: bytes, n: int) -> bool:
    """Every line of ``data`` starts as the writer's lines start and ends with ``}``, and none is suspect."""
    return (
        n > 0
        and data.startswith(_WRITER)
        and data.endswith(b"}\n")
        and data.count(_END_WRITER) == n - 1
        and not _suspect(data)
    )


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
    """(``plan(pairs=True)``) Every ``begin`` line is in the writer's form and followed by its own step
    line (same name and pos, not a try to be retried), but maybe the stream's last line: then no step was
    ever in flight when another began, and no begin was interrupted (the text ``log``'s look ahead is not
    needed; with overlapping steps or a crash it is)."""
    open_at_end: tuple[int, int] | None = None
    """(``paired``) ``(seq, pos)`` of the begin that is the stream's last line, in flight."""
    writer: dict[tuple[int, int, int], bool] = field(default_factory=dict)
    """``(inode, start, end)`` of each chunk read -> whether all its lines are in the writer's form (the
    second pass reads the same chunks and need not count again)."""

    def writer_chunk(self, c: Chunk, n: int) -> bool:
        r = c.region
        known = self.writer.get((r.ino, r.start, r.end))
        return _writer_chunk(c.data, n) if known is None else known

    def is_abandoned(self, seq: int) -> bool:
        r = self.abandoned
        i = bisect.bisect_right(r, (seq, 1 << 62)) - 1
        return i >= 0 and r[i][0] <= seq < r[i][1]


_BEGIN_LINE = b'{"kind":"begin",'
_NL_BEGIN = b"\n" + _BEGIN_LINE
_UNCLOSED = re.compile(
    rb'\n\{"kind":"begin",(?!"step":("[^"\\\n]*(?:\\.[^"\\\n]*)*","pos":\d+,)[^\n]*+\n\{"kind":"step","step":\1)'
)
"""A writer begin line not followed by its own step line (the backreference: the same name and pos; a begin
not in the head's form counts). Led by a newline, not ``^``: a literal prefix lets the engine search for it at
C speed (``^`` tries every byte); a possessive ``[^\\n]*+`` (nothing to give back before the newline)."""
_LAST_BEGIN = re.compile(rb'\{"kind":"begin","step":"[^"\\\n]*(?:\\.[^"\\\n]*)*","pos":(\d+),')


_FIRST = 1 << 16
"""Bytes of a chunk's first lines given to the pattern when the chunk starts with a begin (a begin and its step fit)."""


def _pairs(data: bytes, carry: bytes | None) -> tuple[bool, bytes | None]:
    """Whether every begin line of a writer chunk is followed by its own step line (C-speed scans); the
    step head a begin that is the chunk's last line wants from the next chunk. ``carry``: what the
    previous chunk's last begin wants from this one's first line. One search for the first begin that
    is not (:data:`_UNCLOSED`): no list of matches, no count of the begins."""
    if carry is not None and not data.startswith(carry):
        return False, None
    head = data.startswith(_BEGIN_LINE)
    if not head and _NL_BEGIN not in data:
        return True, None
    if _TRANSIENT in data:
        return False, None  # a failed try to be retried does not close its begin: the look ahead decides
    last = data.rfind(b"\n", 0, len(data) - 1) + 1
    open_last = False
    if head and _UNCLOSED.match(b"\n" + data[:_FIRST]) is not None:
        if last:
            return False, None
        open_last = True  # the chunk is that one begin line
    m = _UNCLOSED.search(data)
    if m is not None:
        if m.start() + 1 != last:
            return False, None
        open_last = True
    if not open_last:
        return True, None
    h = _CLOSED_HEAD.match(data, last)  # the last line is a begin: its step may start the next chunk
    if h is None:
        return False, None
    return True, b'{"kind":"step","step":' + h.group(1) + b',"pos":' + h.group(2) + b","


_CLOSED_HEAD = re.compile(rb'\{"kind":"begin","step":("[^"\\\n]*(?:\\.[^"\\\n]*)*"),"pos":(\d+),')


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


def plan(source: Path, *, chunk: int = CHUNK, pairs: bool = False) -> Plan:
    """The first pass over the raw bytes (see the module's docstring); ``pairs``: also find whether the
    begins pair with their steps line by line (:attr:`Plan.paired`)."""
    p = Plan()
    p.paired = pairs
    carry: bytes | None = None
    last_data = b""
    fold = Fold(keep=False)
    cps: list[tuple[int, str]] = []

    def marker(rec: Record, seq: int) -> None:
        kind = rec.get("kind", _STEP)
        if kind == _CHECKPOINT:
            fold.add(rec)
            if rec.get("file"):
                cps.append((seq, str(rec["file"])))
        elif kind == _ROLLBACK:
            before, n_cuts = fold.problem_count, len(fold.cuts)
            fold.add(rec)
            if fold.problem_count > before:
                p.missing.add(seq)
                p.problems.append(BadLine("journal", 0, seq, MISSING_TARGET, ""))
            elif len(fold.cuts) > n_cuts:
                p.cuts[seq] = fold.cuts[-1][0]

    def bad(b: BadLine) -> None:
        p.problems.append(b)
        p.no_record.add(b.seq)
        if not b.foreign:
            p.last = b.seq

    for c in read_stream(source, chunk=chunk):
        data, reg = c.data, c.region
        first = reg.first_seq
        n = c.count()
        p.regions.append(reg)
        w = p.writer[(reg.ino, reg.start, reg.end)] = _writer_chunk(data, n)
        if w:
            starts: set[int] = set()
            for needle in _MARKS:
                i = data.find(needle)
                while i >= 0:
                    starts.add(data.rfind(b"\n", 0, i) + 1)
                    i = data.find(needle, i + 1)
            for s, k in _line_numbers(data, n, starts):
                e = data.find(b"\n", s)
                ent = _parse(data[s:e], first + k, reg.path, reg.first_line + k, reg.start + s)
                if isinstance(ent, BadLine):
                    bad(ent)
                elif ent is not None:
                    marker(ent, first + k)
            p.last = max(p.last, first + n - 1)
            if p.paired:
                p.paired, carry = _pairs(data, carry)
                last_data = data
        else:
            p.paired = False
            lines = c.lines()
            off = reg.start
            for k, raw in enumerate(lines):
                seq = first + k
                if (
                    raw.startswith(_WRITER)
                    and raw.endswith(b"}")
                    and not _suspect(raw)
                    and not any(w in raw for w in _WORDS)
                ):
                    p.last = seq
                else:
                    ent = _parse(raw, seq, reg.path, reg.first_line + k, off)
                    if ent is None:
                        p.no_record.add(seq)
                    elif isinstance(ent, BadLine):
                        bad(ent)
                    else:
                        marker(ent, seq)
                        p.last = seq
                off += len(raw) + 1
        p.count = first + n
    if p.paired and carry is not None:  # the stream ends with a begin: in flight
        m = _LAST_BEGIN.match(last_data, last_data.rfind(b"\n", 0, len(last_data) - 1) + 1)
        if m is None:
            p.paired = False
        else:
            p.open_at_end = (p.count - 1, int(m.group(1)))
    p.problems.sort(key=lambda b: b.seq)
    p.checkpoints = list(fold.checkpoints)
    p.shape = Shape(tuple(cps), tuple(fold.cuts))
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
    name: bytes | None = None
    """A canonical line's step name, as JSON string content."""
    ts: bytes | None = None
    """A canonical line's ``ts``."""

    def record(self) -> Record:
        """The record (parsed from the line if canonical)."""
        if self.rec is not None:
            return self.rec
        assert self.raw is not None
        rec: Record = orjson.loads(self.raw)
        return rec

    def step_name(self) -> str | None:
        """The ``step`` field as text (``None``: none)."""
        if self.name is not None:
            if b"\\" in self.name:
                text: str = orjson.loads(b'"' + self.name + b'"')
                return text
            return self.name.decode()
        v = self.rec.get("step") if self.rec is not None else None
        return None if v is None else v if isinstance(v, str) else str(v)

    def time(self) -> str | None:
        """The ``ts`` field (``None``: none, or not text)."""
        if self.ts is not None:
            return self.ts.decode()
        v = self.rec.get("ts") if self.rec is not None else None
        return v if isinstance(v, str) else None


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

    # the fold's per-record rules for a parsed entry
    def _entry(self, ent: Record | BadLine, abandoned: bool, warn: Any) -> Item | None:
        if type(ent) is BadLine:
            if warn is not None:
                warn(ent)
            if ent.foreign:
                return None
            rec = ent.record()
            m = _TEXT_POS.search(ent.text)
            pos = int(m.group(1)) if m else self.top + 1
            if rec["holds_step"] and pos >= self.top:
                self.top = pos
            if self.all:
                return Item(ent.seq, DAMAGED, None, None, ent.record(), abandoned)  # as --all showed it: no pos
            rec["pos"] = pos
            return Item(ent.seq, DAMAGED, pos, None, rec, abandoned)
        rec = ent  # type: ignore[assignment]
        kind = rec.get("kind", _STEP)
        seq = rec["seq"]
        if kind == _STEP and rec.get("error") is None:
            p = rec.get("pos")
            if type(p) is not int:
                p = rec["pos"] = self.top + 1
            if p >= self.top:
                self.top = p
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
        return Item(seq, kind, rec["pos"], None, rec, abandoned)

    def __iter__(self) -> Iterator[Item]:
        return self.items()

    def items(self, warn: Any = None) -> Iterator[Item]:
        """Walk the whole stream (the loop runs once a line of a million-record journal: kept tight)."""
        ranges = self.plan.abandoned
        ri = 0  # the first range not wholly before the current seq
        nxt = ranges[0][0] if ranges else 1 << 62  # the next seq where "abandoned" changes
        ab = False
        all_ = self.all
        kinds = self.kinds
        canon = _CANON.fullmatch
        new = tuple.__new__  # an Item without the namedtuple's Python-level __new__
        step_b, step_s, begin_s = b"step", _STEP, _BEGIN
        limit = self.plan.count  # lines appended since the first pass are left out: it did not see them
        for c in read_stream(self.source, chunk=self.chunk):
            data, reg = c.data, c.region
            first = reg.first_seq
            if first >= limit:
                break
            lines = c.lines()
            fast = self.plan.writer_chunk(c, len(lines))
            if first + len(lines) > limit:
                del lines[limit - first :]
            off_k, off = 0, reg.start  # a known line start (line off_k at byte off): offsets counted on from it
            seq = first - 1
            for raw in lines:
                seq += 1
                if seq >= nxt:  # abandoned: inside one of the merged ranges (seqs only grow)
                    while ri < len(ranges) and ranges[ri][1] <= seq:
                        ri += 1
                    ab = ri < len(ranges) and ranges[ri][0] <= seq
                    nxt = (ranges[ri][1] if ab else ranges[ri][0]) if ri < len(ranges) else 1 << 62
                if fast:
                    m = canon(raw)
                    if m is not None and _ERROR not in raw:
                        kind, name, p, s, ts = m.groups()
                        if int(s) == seq:
                            pos = int(p)
                            if kind == step_b:
                                if pos >= self.top:
                                    self.top = pos
                                kind = step_s
                            else:
                                kind = begin_s
                            if (ab and not all_) or (kinds is not None and kind not in kinds):
                                continue
                            yield new(Item, (seq, kind, pos, raw, None, ab, name, ts))
                            continue
                    k = seq - first
                    off += sum(map(len, lines[off_k:k])) + k - off_k
                    off_k = k
                    ent = _parse(raw, seq, reg.path, reg.first_line + k, off)
                else:
                    ent = _parse(raw, seq, reg.path, reg.first_line + seq - first, off)
                    off += len(raw) + 1
                if ent is None:
                    continue
                item = self._entry(ent, ab, warn)
                if item is not None and (all_ or not ab):
                    yield item

    def json_lines(self, warn: Any = None) -> Iterator[list[bytes]]:
        """``log --json`` without filters: the output lines, a chunk's at a time, as :meth:`items` would give
        them to be encoded (the same walk, inlined: a canonical line goes to the output as its bytes with
        no :class:`Item` made; the few others are parsed, given their ``pos`` and encoded)."""
        ranges = self.plan.abandoned
        ri = 0
        nxt = ranges[0][0] if ranges else 1 << 62
        ab = False
        all_ = self.all
        canon = _CANON.fullmatch
        step_b = b"step"
        dumps, opt = orjson.dumps, orjson.OPT_NON_STR_KEYS
        limit = self.plan.count  # lines appended since the first pass are left out: it did not see them
        for c in read_stream(self.source, chunk=self.chunk):
            data, reg = c.data, c.region
            first = reg.first_seq
            if first >= limit:
                break
            lines = c.lines()
            fast = self.plan.writer_chunk(c, len(lines))
            if first + len(lines) > limit:
                del lines[limit - first :]
            out: list[bytes] = []
            add = out.append
            off_k, off = 0, reg.start
            seq = first - 1
            top = self.top
            for raw in lines:
                seq += 1
                if seq >= nxt:
                    while ri < len(ranges) and ranges[ri][1] <= seq:
                        ri += 1
                    ab = ri < len(ranges) and ranges[ri][0] <= seq
                    nxt = (ranges[ri][1] if ab else ranges[ri][0]) if ri < len(ranges) else 1 << 62
                if fast:
                    m = canon(raw)
                    if m is not None:
                        kind, _, p, s, _ = m.groups()
                        if int(s) == seq:
                            if kind != step_b:  # a begin: its pos sets nothing
                                if not ab:
                                    add(raw)
                                elif all_:
                                    add(raw[:-1] + b',"abandoned":true}')
                                continue
                            if _ERROR not in raw:
                                pos = int(p)
                                if pos >= top:
                                    top = pos
                                if not ab:
                                    add(raw)
                                elif all_:
                                    add(raw[:-1] + b',"abandoned":true}')
                                continue
                    k = seq - first
                    off += sum(map(len, lines[off_k:k])) + k - off_k
                    off_k = k
                    ent = _parse(raw, seq, reg.path, reg.first_line + k, off)
                else:
                    ent = _parse(raw, seq, reg.path, reg.first_line + seq - first, off)
                    off += len(raw) + 1
                if ent is None:
                    continue
                self.top = top
                item = self._entry(ent, ab, warn)
                top = self.top
                if item is not None and (all_ or not ab):
                    line = dict(item.rec)  # type: ignore[arg-type]
                    if ab:
                        line["abandoned"] = True
                    add(dumps(line, option=opt))
            self.top = top
            yield out

    def rendered(
        self,
        canon: Callable[[int, bool, int, bytes, bool, bytes, bytes], bytes],
        other: Callable[[Item], bytes],
        warn: Any = None,
        *,
        summary: Callable[[Record], str] | None = None,
        marked: frozenset[int] | set[int] = frozenset(),
    ) -> Iterator[list[bytes]]:
        """Text ``log`` without filters: each record's output line, a chunk's at a time. A canonical line goes to
        ``canon(seq, is_step, pos, raw, abandoned, name, ts)`` with no :class:`Item` made (the walk of
        :meth:`items`, inlined), any other record to ``other``.

        ``summary`` (given when no ``#pos`` is shown: the steps did not overlap; the loop runs once a line of
        a million-record journal, so the common lines are made here, no call a line): a begin line in the
        writer's form whose seq is not in ``marked`` (the begins shown in flight or interrupted), whose name
        has no escape and whose ``ts`` is ASCII is ``%6d %-23s begin      NAME`` from its bytes. A step line
        of a writer chunk is parsed (its output is shown: it would be anyway) and, when it is what the parsed
        path takes as is (its own seq, an integer ``pos``, text ``step`` and ``ts``, no ``error``), made here
        as :func:`format_record` makes it, with ``summary(rec)`` after it for a model or tool call (``usage``
        or ``call``); any other goes the parsed path. ``--all`` puts ``~ `` or two spaces before each line,
        as ``canon`` and ``other`` do."""
        ranges = self.plan.abandoned
        ri = 0
        nxt = ranges[0][0] if ranges else 1 << 62
        ab = skip = False
        all_ = self.all
        match = _CANON.fullmatch
        plain = _PLAIN_BEGIN.fullmatch
        step_b = b"step"
        limit = self.plan.count
        inline = summary is not None
        lo_mark = min(marked) if marked else 1 << 62  # a seq before the first marked one needs no set look-up
        mark_seqs = set(marked)
        loads, bad_json, step_s = orjson.loads, orjson.JSONDecodeError, _STEP
        no_rec: Record = {}
        fields = operator.itemgetter("seq", "pos", "step", "ts", "kind")  # one call for the five, KeyError: parsed path
        s_byte = _S
        for c in read_stream(self.source, chunk=self.chunk):
            data, reg = c.data, c.region
            first = reg.first_seq
            if first >= limit:
                break
            lines = c.lines()
            fast = self.plan.writer_chunk(c, len(lines))
            if first + len(lines) > limit:
                del lines[limit - first :]
            out: list[bytes] = []
            add = out.append
            off_k, off = 0, reg.start
            seq = first - 1
            top = self.top
            end = first + len(lines)
            if first >= nxt:  # the state at the chunk's first line
                while ri < len(ranges) and ranges[ri][1] <= first:
                    ri += 1
                ab = ri < len(ranges) and ranges[ri][0] <= first
                nxt = (ranges[ri][1] if ab else ranges[ri][0]) if ri < len(ranges) else 1 << 62
                skip = ab and not all_
            lead = ("~ " if ab else "  ") if all_ else ""
            fmt_step = lead + "%6d %-23.23s step       %s  -> %s"  # the --all mark in the format: no concatenation a line
            fmt_begin = lead.encode() + b"%6d %s begin      %s"
            lead_b = lead.encode()
            if fast and inline and not ab and nxt >= end and (lo_mark >= end or not any(first <= m_ < end for m_ in mark_seqs)):
                # the common chunk: writer lines, none abandoned, no begin marked; its own loop, kept tight
                for seq, raw in enumerate(lines, first):
                    if raw[9] == s_byte:  # {"kind":"s…: a step (or a start: the parsed path)
                        try:
                            rec = loads(raw)
                            s, p, name, ts, kind = fields(rec)
                        except (bad_json, KeyError):
                            s = None
                        if s == seq and type(s) is int is type(p) and kind == step_s and rec.get("error") is None:
                            if type(name) is str is type(ts):
                                if p >= top:
                                    top = p
                                o = rec.get("output")
                                if type(o) is not str or len(o) > 70 or "\n" in o:
                                    o = preview(o, 70)
                                if "usage" in rec or "call" in rec:
                                    o += summary(rec)  # type: ignore[misc]
                                add((fmt_step % (seq, ts, name, o)).encode())
                                continue
                    else:
                        m = plain(raw)
                        if m is not None:
                            name_b, s_b, ts_b = m.groups()
                            if int(s_b) == seq:
                                add(fmt_begin % (seq, ts_b, name_b))
                                continue
                        m = match(raw)
                        if m is not None and m[1] != step_b and int(m[4]) == seq:
                            add(canon(seq, False, int(m[3]), raw, False, m[2], m[5]))
                            continue
                    k = seq - first
                    off += sum(map(len, lines[off_k:k])) + k - off_k
                    off_k = k
                    ent = _parse(raw, seq, reg.path, reg.first_line + k, off)
                    if ent is None:
                        continue
                    self.top = top
                    item = self._entry(ent, False, warn)
                    top = self.top
                    if item is not None:
                        add(other(item))
                self.top = top
                yield out
                continue
            for raw in lines:
                seq += 1
                if seq >= nxt:
                    while ri < len(ranges) and ranges[ri][1] <= seq:
                        ri += 1
                    ab = ri < len(ranges) and ranges[ri][0] <= seq
                    nxt = (ranges[ri][1] if ab else ranges[ri][0]) if ri < len(ranges) else 1 << 62
                    skip = ab and not all_
                    lead = ("~ " if ab else "  ") if all_ else ""
                    fmt_step = lead + "%6d %-23.23s step       %s  -> %s"
                    fmt_begin = lead.encode() + b"%6d %s begin      %s"
                    lead_b = lead.encode()
                if fast:
                    if raw[9] == _S and inline:  # {"kind":"s…: a step (or a start: the parsed path)
                        try:
                            rec = loads(raw)
                        except bad_json:
                            rec = no_rec
                        s, p = rec.get("seq"), rec.get("pos")
                        if s == seq and type(s) is int is type(p) and rec.get("kind") == step_s and rec.get("error") is None:
                            name, ts = rec.get("step"), rec.get("ts")
                            if type(name) is str is type(ts):
                                if p >= top:
                                    top = p
                                if skip:
                                    continue
                                o = rec.get("output")
                                if type(o) is not str or len(o) > 70 or "\n" in o:
                                    o = preview(o, 70)
                                if "usage" in rec or "call" in rec:
                                    o += summary(rec)  # type: ignore[misc]
                                add((fmt_step % (seq, ts, name, o)).encode())
                                continue
                    elif inline and (m := plain(raw)) is not None:
                        name_b, s_b, ts_b = m.groups()
                        if int(s_b) == seq and (seq < lo_mark or seq not in mark_seqs):
                            if not skip:
                                add(fmt_begin % (seq, ts_b, name_b))
                            continue
                        m = match(raw)  # marked: as canon makes it
                        if m is not None and int(m[4]) == seq:
                            if not skip:
                                add(canon(seq, False, int(m[3]), raw, ab, m[2], m[5]))
                            continue
                    else:
                        m = match(raw)
                        if m is not None:
                            kind, name_b, p_b, s_b, ts_b = m.groups()
                            if int(s_b) == seq:
                                if kind == step_b:
                                    if _ERROR in raw:
                                        m = None
                                    else:
                                        pos = int(p_b)
                                        if pos >= top:
                                            top = pos
                                if m is not None:
                                    if skip:
                                        continue
                                    if (
                                        inline
                                        and kind != step_b
                                        and b"\\" not in name_b
                                        and ts_b.isascii()
                                        and (seq < lo_mark or seq not in mark_seqs)
                                    ):
                                        add(b"%s%6d %-23s begin      %s" % (lead_b, seq, ts_b[:23], name_b))
                                    else:
                                        add(canon(seq, kind == step_b, int(p_b), raw, ab, name_b, ts_b))
                                    continue
                    k = seq - first
                    off += sum(map(len, lines[off_k:k])) + k - off_k
                    off_k = k
                    ent = _parse(raw, seq, reg.path, reg.first_line + k, off)
                else:
                    ent = _parse(raw, seq, reg.path, reg.first_line + seq - first, off)
                    off += len(raw) + 1
                if ent is None:
                    continue
                self.top = top
                item = self._entry(ent, ab, warn)
                top = self.top
                if item is not None and (all_ or not ab):
                    add(other(item))
            self.top = top
            yield out

    def entries(self, entries: list[Record | BadLine], warn: Any = None) -> Iterator[Item]:
        """Walk parsed entries (a window read from the end: ``JournalReader.tail``)."""
        plan_ = self.plan
        for ent in entries:
            ab = plan_.is_abandoned(entry_seq(ent))
            item = self._entry(ent, ab, warn)
            if item is not None and (self.all or not ab):
                yield item


def entry_seq(ent: Record | BadLine) -> int:
    return ent.seq if isinstance(ent, BadLine) else int(ent["seq"])


class StreamPairing:
    """:class:`history.Pairing` for a stream: the same rules, without the begin -> step map (a million
    entries for a million steps); ``open`` holds ``{"seq": S}`` for each begin in flight."""

    __slots__ = ("interrupted", "open", "overlapped")

    def __init__(self) -> None:
        self.open: dict[Any, Record] = {}
        self.interrupted: set[int] = set()
        self.overlapped = False

    def add(self, item: Item) -> None:
        kind = item.kind
        if kind == _BEGIN:
            if self.open:
                self.overlapped = True
            old = self.open.get(item.pos)
            if old is not None:
                self.interrupted.add(int(old["seq"]))
            self.open[item.pos] = {"seq": item.seq}
        elif kind == _STEP:
            if not self.open:
                return
            if item.raw is not None:
                if _TRANSIENT in item.raw and item.record().get("transient"):
                    return
            elif item.rec is not None and item.rec.get("transient"):
                return
            if self.open.pop(item.pos, None) is None:
                self.open.pop(None, None)
        elif kind == Kind.START or kind == _ROLLBACK:
            for b in self.open.values():
                self.interrupted.add(int(b["seq"]))
            self.open.clear()
