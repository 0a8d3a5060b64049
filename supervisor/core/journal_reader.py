"""The append-only JSONL journal's lazy indexed reader (the resume view, ``tail``, ``get``, ``read_new``).

Every reader reads through the one primitive in :mod:`.segments`
(:meth:`JournalFile.chunks`, :func:`read_stream`); ``tail`` reads backward with the
same committed end (:meth:`JournalFile.last_lines`).
"""

from __future__ import annotations

import gc
import operator
import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import accumulate, compress, islice, repeat
from pathlib import Path
from typing import Any, NamedTuple, cast

import orjson

from ..errors import JournalError
from . import rundir, wire
from .records import BadLine, LazyRecord, Record, normalize, parse_line
from .segments import (
    CHUNK,
    Chunk,
    JournalFile,
    StreamPos,
    count_file,
    count_lines,
    read_stream,
    sealed_since,
    segment_paths,
)

Entry = Record | BadLine
"""A journal line: a record, or a line that is not one. (Lazy loads hand out :class:`LazyRecord`
in place of some records; it answers the same reads.)"""



class ResumeView(NamedTuple):
    """What the resume view's read gives (:meth:`JournalReader.resume_view`): the entries, and the overlap
    verdict of each file's map it read whole, for :meth:`history.Fold.extend`."""

    entries: list[Entry]
    overlaps: dict[Any, bool]
    """A file's map (the ``LazyRecord.src`` of its steps) -> whether its lines show overlapping steps
    (:data:`wire.AFTER_BEGIN`), told from the lines the read split anyway: the fold need not walk every byte
    of the file with :data:`wire.OVERLAP`. A map not here (read otherwise, or longer than what was read) is
    searched by the regex."""



def _parse(raw: bytes, seq: int, path: Path, line_no: int) -> Entry | None:
    if not raw.strip():
        return None
    try:
        rec = parse_line(raw)
    except ValueError as e:
        return BadLine(str(path), line_no, seq, str(e), raw[:200].decode("utf-8", "replace"))
    if rec.get("seq") != seq or "kind" not in rec or "ts" not in rec:
        normalize(rec, seq)
    return rec


ANCHOR = 64
"""The reader's index keeps where every ``ANCHOR``-th line of a file starts (an eighth of a byte a line),
not every line: ``get`` reads from the anchor before its line (some 16 kB of a 250-byte-a-record journal)."""

ANCHOR_BYTES = 64 * 1024
"""... and where each line starts that begins ``ANCHOR_BYTES`` or more after the anchor before it: a journal of
large records (a 2 MB tool output a line) is read a line at a time, not 64 of them (an anchor a line there)."""


class _Lines:
    """The line index of one file: the lines where reads start (anchors: every ``ANCHOR``-th line, and each line
    that starts ``ANCHOR_BYTES`` past the anchor before it) and their offsets, how many lines are indexed and
    where the last one ends. Shared by twin readers (``JournalReader.twin``): it only grows, and ``offsets``,
    then ``starts``, then ``end``, then ``n`` are written in that order, so a reader that takes ``n`` first finds
    the anchors and an end for every line it counted (a file rewritten in place gets a new one)."""

    __slots__ = ("end", "n", "offsets", "starts")

    def __init__(self) -> None:
        self.starts: array[int] = array("q")  # anchor lines (0-based, ascending; line 0 first)
        self.offsets: array[int] = array("q")  # where each starts
        self.end = 0
        self.n = 0

    def block(self, i: int) -> tuple[int, int, int]:
        """The anchor at or before line ``i``: its line, where it starts, and where the lines up to the next
        anchor end."""
        starts = self.starts
        n = len(starts)
        a = i // ANCHOR
        if a >= n or starts[a] != i - i % ANCHOR or (a + 1 < n and starts[a + 1] <= i):
            a = bisect_right(starts, i) - 1  # byte anchors before it: find it
        return starts[a], self.offsets[a], (self.offsets[a + 1] if a + 1 < n else self.end)

    def add(self, n: int, first: int, line_starts: list[int]) -> None:
        """Anchor the lines ``n``... of a chunk whose line starts (and end, last) are ``line_starts``; ``first``:
        the index of its first line that is an ``ANCHOR``-th line. In C unless the chunk has large records."""
        k = len(line_starts) - 1
        offsets, starts = self.offsets, self.starts
        picked = line_starts[first:k:ANCHOR]
        prev = offsets[-1] if offsets else line_starts[0]
        if line_starts[k] - prev <= ANCHOR_BYTES or max(map(operator.sub, [*picked[1:], line_starts[k]], [prev, *picked])) <= ANCHOR_BYTES:
            offsets.extend(picked)  # no anchor gap over ANCHOR_BYTES: every ANCHOR-th line only (the common case)
            starts.extend(range(n + first, n + k, ANCHOR))
            return
        for j in range(k):  # large records: a line at a time
            at = line_starts[j]
            if (n + j) % ANCHOR == 0 or at - prev >= ANCHOR_BYTES:
                offsets.append(at)
                starts.append(n + j)
                prev = at


@dataclass
class _Seg:
    path: Path
    ino: int
    first_seq: int = -1
    lines: _Lines = field(default_factory=_Lines)
    indexed: bool = False
    sealed: bool = False  # indexed to its end after it stopped being the last segment


_TAIL_BLOCK = 256 * 1024


class JournalReader:
    """Reads a run's journal lazily.

    ``tail(n)`` reads only the end of the files; ``index()`` records where every
    ``ANCHOR``-th line starts, without parsing (in chunks: memory stays small, and
    the index takes an eighth of a byte a line); ``get(seq)`` parses one
    record; ``load()`` parses everything as fast as orjson allows; ``read_new()``
    returns records committed since the last read. Bad lines are returned as
    ``BadLine`` entries (with their file and line number) and collected in
    ``problems``, never raised. Every read goes through :func:`read_stream` or
    :meth:`JournalFile.chunks`; ``chunk`` is their read size (tests make it tiny).
    """

    def __init__(self, source: Path, *, chunk: int = CHUNK) -> None:
        self.source = source
        self.chunk = chunk
        self.problems: list[BadLine] = []
        self._segs: list[_Seg] = []
        self._ov: tuple[Any, int, bool, bool] | None = None
        """The resume view's overlap check of the map being read (see :attr:`ResumeView.overlaps`): the map, where its next
        region must start, whether it overlaps so far, whether the last line read is a begin (``None``: unknown)."""
        self.overlaps: dict[Any, bool] = {}
        """The overlap verdicts of the maps the lazy reads so far read whole (:attr:`ResumeView.overlaps`)."""
        self._cursor = StreamPos()  # where read_new() goes on; load() moves it to the end

    # -- discovery
    def _refresh_segments(self) -> list[_Seg]:
        """The segments now, keeping what is known of each file by its inode: a rotation renames the
        active file, so its index stays valid under the sealed name."""
        known = {s.ino: s for s in self._segs}
        for _ in range(100):  # a rotation per try would be needed to go round again
            paths = segment_paths(self.source)
            segs = []
            for p in paths:
                try:
                    ino = os.stat(p).st_ino
                except FileNotFoundError:
                    continue  # renamed by a rotation after the listing: the next call sees it
                seg = known.get(ino)
                if seg is None:
                    seg = _Seg(p, ino)
                seg.path = p
                segs.append(seg)
            # a rotation between the listing and the stats: "journal.jsonl" was then the new active file,
            # and the segment sealed from the old one is missing from the listing; list again
            active = bool(paths) and paths[-1].name == rundir.JOURNAL and paths != [self.source]
            if not active or not sealed_since(self.source, paths):
                break
        self._segs = segs
        return segs

    def _open(self, seg: _Seg) -> JournalFile:
        """The file of an indexed segment, found by its inode if a rotation renamed it."""
        jf = JournalFile.open(seg.path)
        if jf is not None and jf.ino == seg.ino:
            return jf
        if jf is not None:
            jf.close()
        for p in segment_paths(self.source):
            jf = JournalFile.open(p)
            if jf is not None:
                if jf.ino == seg.ino:
                    seg.path = p
                    return jf
                jf.close()
        raise FileNotFoundError(f"{seg.path}: the journal file is gone")

    def _parse_lines(self, c: Chunk, out: list[Entry]) -> None:
        """Parse a region's lines into ``out``; bad lines also go to ``problems``."""
        r = c.region
        lines = c.lines()
        self._parse_some(lines, 0, len(lines), (r.first_seq, r.first_line, r.start, r.path), out)

    # -- bulk
    def iter_entries(self, *, lazy: bool = False) -> Iterator[Entry]:
        """Every committed entry in order, parsed chunk by chunk (bounded memory).

        ``lazy`` is the SDK's resume view: successful ``step`` lines written by this
        package come back unparsed, as :class:`LazyRecord`, and ``begin`` lines
        (which only say that a step started) are left out. After the last entry,
        ``read_new`` goes on from exactly where this read ended.
        """
        cursor = StreamPos()
        # the resume view keeps step lines as places in a read-only map of the file
        for c in read_stream(self.source, cursor, chunk=self.chunk, mapped=lazy):
            out: list[Entry] = []
            if lazy:
                self._lazy_entries(c, out, c.lines())
            else:
                self._parse_lines(c, out)
            yield from out
            c.release()
        self._cursor = cursor

    def _lazy_entries(self, c: Chunk, out: list[Entry], lines: list[bytes]) -> None:
        """One region for the resume view, with two C-speed passes instead of a Python step per line."""
        mapped = c.map
        assert mapped is not None  # a region has bytes, so its file is mapped
        seq0, line0, path, at = c.region.first_seq, c.region.first_line, c.region.path, c.region.start
        spath = str(path)
        starts = list(accumulate(map((1).__add__, map(len, lines)), initial=at))  # line k is starts[k]:starts[k+1]-1
        # Lines holding "error" (failed steps, rare): found by one scan of the region's bytes, not a scan per line.
        data, errors, error_key = c.data, [], wire.ERROR_WORD
        i = data.find(error_key)
        while i >= 0:
            k = bisect_right(starts, at + i) - 1
            errors.append(k)
            i = data.find(error_key, starts[k + 1] - at)
        # a step line without "error" is lazy; every other line but a begin without "error" is parsed
        # (telling the kinds by one byte of each line, checked by counting the two prefixes in the region, was
        # measured: 8% fewer instructions, but two more passes over the region's bytes, and no faster)
        lazy = list(map(bytes.startswith, lines, repeat(wire.STEP_HEAD)))  # one C-level pass, no Python step per line
        for k in errors:
            lazy[k] = False
        lazy_idx = list(compress(range(len(lines)), lazy))
        begins = list(map(bytes.startswith, lines, repeat(wire.BEGIN_HEAD)))
        self._check_overlap(c, lines, begins)
        other_idx = list(compress(range(len(lines)), map(operator.not_, map(operator.or_, lazy, begins))))
        if errors:
            other_idx = sorted(set(other_idx).union(errors))
        step = wire.STEP  # a plain str: an enum member lookup costs ~100 ns a line
        steps: list[Entry] = list(
            map(
                cast(Callable[..., Record], LazyRecord),  # a LazyRecord stands in for a step record
                repeat(step),
                repeat(mapped),
                compress(starts, lazy),
                map((-1).__add__, compress(islice(starts, 1, None), lazy)),
                map(seq0.__add__, lazy_idx),
                repeat(spath),
            )
        )
        if not other_idx:
            out.extend(steps)
            return
        j = 0
        for k in other_idx:  # few: start, checkpoint, rollback, note, failed steps, foreign lines
            i = bisect_left(lazy_idx, k, lo=j)
            out.extend(steps[j:i])
            j = i
            ent = _parse(lines[k], seq0 + k, path, line0 + k)
            if ent is None:
                continue
            if type(ent) is BadLine:
                ent = replace(ent, offset=starts[k])
                self.problems.append(ent)
            out.append(ent)
        out.extend(steps[j:])

    def _check_overlap(self, c: Chunk, lines: list[bytes], begins: list[bool]) -> None:
        """Go on with the overlap check of ``c``'s map (:data:`wire.AFTER_BEGIN`) over its next region, at C speed."""
        m: Any = c.map
        region = c.region
        ov = self._ov
        if ov is None or ov[0] is not m:
            if region.start != 0:
                self._ov = None  # not read from the file's start: the regex decides
                return
            ov = (m, 0, False, False)
        src, at, overlap, after_begin = ov
        if region.start != at:
            self._ov = None
            return
        # a region's first line after the last one's begin; then each begin's next line in the region
        if not overlap and (
            (after_begin and not wire.closes_begin(lines[0]))
            or not all(map(bytes.startswith, compress(islice(lines, 1, None), begins), repeat(wire.AFTER_BEGIN)))
        ):
            overlap = True
        if region.end == len(src):  # every line of the map read: a begin last is the end of the file, fine
            self.overlaps[src] = overlap
            self._ov = None
            return
        self._ov = (src, region.end, overlap, begins[-1])

    def resume_view(self) -> ResumeView:
        """The SDK's resume view (``load(lazy=True)``) with the overlap verdicts the read found."""
        self.overlaps = {}
        return ResumeView(self.load(lazy=True), self.overlaps)

    @property
    def end_seq(self) -> int:
        """The seq after the last line read by ``load()``/``read_new()`` (the next seq a writer gives)."""
        return self._cursor.seq

    def load(self, *, lazy: bool = False) -> list[Entry]:
        """Parse the whole journal into memory and remember the end for ``read_new``."""
        self.problems = []
        enabled = gc.isenabled()
        gc.disable()  # a million small dicts: the cyclic GC would rescan them again and again
        try:
            # iter_entries' loop into one list (no generator step per entry: a million-step resume reads here)
            out: list[Entry] = []
            cursor = StreamPos()
            for c in read_stream(self.source, cursor, chunk=self.chunk, mapped=lazy):
                if lazy:
                    self._lazy_entries(c, out, c.lines())
                else:
                    self._parse_lines(c, out)
            self._cursor = cursor
            return out
        finally:
            if enabled:
                gc.enable()

    # -- tail
    def tail(self, n: int) -> list[Entry]:
        """The entries among the last ``n`` lines, reading only the end of the journal.

        The seq of the last line is taken from its ``seq`` field when it has one (this
        package's writer always writes it), else by counting lines; a line's number in
        its file from the file's first ``seq`` the same way.
        """
        if n <= 0:
            return []
        parts = self._tail_parts(n)
        raws = [raw for part in parts for raw in part.lines]
        last_seq = _last_seq(raws)
        if last_seq is None:
            last_seq = count_lines(self.source, chunk=self.chunk) - 1
        out: list[Entry] = []
        seq = last_seq - len(raws) + 1
        for part in parts:
            if part.first_line < 0:
                if part.file_seq is not None:
                    part.first_line = seq - part.file_seq + 1
                else:  # a file whose first line has no seq: count its lines
                    part.first_line = count_file(part.path, self.chunk) - len(part.lines) + 1
            for k, raw in enumerate(part.lines):
                ent = _parse(raw, seq + k, part.path, part.first_line + k)
                if ent is not None:
                    if type(ent) is BadLine:
                        ent = replace(ent, offset=part.end - sum(len(x) + 1 for x in part.lines[k:]))
                        self.problems.append(ent)
                    out.append(ent)
            seq += len(part.lines)
        return out

    def _tail_parts(self, n: int) -> list[_TailPart]:
        """The last ``n`` lines of the stream, by file, first file first (what places them: see :class:`_TailPart`)."""
        paths = segment_paths(self.source)
        parts: list[_TailPart] = []
        got = 0
        for i in range(len(paths) - 1, -1, -1):
            if got >= n:
                break
            jf = JournalFile.open(paths[i])
            if jf is None:
                continue
            with jf:
                lines, whole = jf.last_lines(n - got, block=min(self.chunk, _TAIL_BLOCK))
                part = _TailPart(paths[i], lines, end=jf.end)
                if whole:
                    part.first_line = 1
                elif i == 0:
                    part.file_seq = 0  # the stream's first line is seq 0
                else:
                    part.file_seq = jf.first_seq_field()
            parts.insert(0, part)
            got += len(lines)
        return parts

    # -- random access
    def index(self) -> int:
        """Record where lines start, every ``ANCHOR``-th (no parsing); return the number of lines."""
        seq = 0
        segs = self._refresh_segments()
        held: list[bytes] = []
        for seg in segs:
            seg.first_seq = seq
            # sealed segments never change; the last one grows, up to its rotation
            if not seg.sealed:
                # the last lines split stay alive until the next segment's first split: freeing them
                # first costs a page fault per page of the next chunk (measured: 6 % of the index time)
                held = self._index_segment(seg) or held
                seg.sealed = seg.indexed and seg is not segs[-1]
            seq += seg.lines.n
        return seq

    def _index_segment(self, seg: _Seg) -> list[bytes]:
        """Index the lines of ``seg`` not yet indexed; return the last lines split (see ``index``)."""
        lines: list[bytes] = []
        jf = JournalFile.open(seg.path)
        if jf is None:
            return lines
        with jf:
            if jf.ino != seg.ino:
                return lines  # renamed by a rotation since the listing: the next index() finds it by its new name
            idx = seg.lines
            if not jf.is_line_start(idx.end):
                idx = _Lines()  # rewritten in place: index it again (a twin keeps the old index)
            n = idx.n
            for c in jf.chunks(idx.end, seg.first_seq + n, n + 1, chunk=self.chunk):
                lines = c.lines()  # the previous list is freed after this split, not before
                k = len(lines)
                first = -n % ANCHOR  # the chunk's first line that is an anchor
                if first < k or c.region.end - (idx.offsets[-1] if idx.offsets else c.region.start) > ANCHOR_BYTES:
                    # line starts, all in C: region start + running sum of (len + 1); see _Lines.add
                    idx.add(n, first, list(accumulate(map((1).__add__, map(len, lines)), initial=c.region.start)))
                n += k
                idx.end = c.region.end  # after the anchors, before the count (see _Lines)
                idx.n = n
        seg.lines = idx
        seg.indexed = True
        return lines

    def __len__(self) -> int:
        return sum(s.lines.n for s in self._segs if s.indexed)

    def get(self, seq: int) -> Entry | None:
        """Parse the line at ``seq`` (after ``index()``); ``None`` for a blank line.

        One read from the anchor before the line to the next anchor (indexed lines are committed), split
        in C only as far as the line."""
        for seg in self._segs:
            if seg.first_seq <= seq < seg.first_seq + seg.lines.n:
                i = seq - seg.first_seq
                line, at, stop = seg.lines.block(i)
                with self._open(seg) as jf:
                    data = os.pread(jf.fd, stop - at, at)
                if len(data) < stop - at:
                    raise JournalError(f"{seg.path} shrank while being read (committed lines are never removed)")
                k = i - line
                parts = data.split(b"\n", k + 1)  # split in C, only as far as the line
                ent = _parse(parts[k], seq, seg.path, i + 1)
                if type(ent) is BadLine:
                    return replace(ent, offset=at + sum(len(x) + 1 for x in parts[:k]))
                return ent
        raise IndexError(seq)

    def place(self, seq: int) -> tuple[Path, int] | None:
        """The file and line number (1-based) of the line at ``seq``; ``None`` if the journal has no such line.
        Indexes the journal first (for messages about one record: not a per-record path)."""
        self.index()
        for seg in self._segs:
            if seg.first_seq <= seq < seg.first_seq + seg.lines.n:
                return seg.path, seq - seg.first_seq + 1
        return None

    def get_range(self, start: int, stop: int) -> list[Entry]:
        """Parse lines ``start`` to ``stop`` (exclusive) after ``index()``, from the anchor before ``start``."""
        out: list[Entry] = []
        for seg in self._segs:
            idx = seg.lines
            n = idx.n  # first: the anchors and the end are there for every line counted (see _Lines)
            lo = max(start, seg.first_seq)
            hi = min(stop, seg.first_seq + n)
            if lo >= hi:
                continue
            a, b = lo - seg.first_seq, hi - seg.first_seq  # the file's lines a..b-1 (0-based)
            first, at, _ = idx.block(a)  # the anchor's line, where it starts
            end = idx.block(b - 1)[2]
            with self._open(seg) as jf:
                if end - at <= self.chunk:  # a screen's worth: one read, no chunk probes (indexed lines are committed)
                    data = os.pread(jf.fd, end - at, at)
                    if len(data) < end - at:
                        raise JournalError(f"{seg.path} shrank while being read (committed lines are never removed)")
                    lines = data.split(b"\n", b - first)  # split in C, only as far as the last line
                    self._parse_some(lines, a - first, b - first, (lo - (a - first), first + 1, at, seg.path), out)
                    continue
                for c in jf.chunks(at, seg.first_seq + first, first + 1, stop=end, chunk=self.chunk):
                    lines = c.lines()
                    k0 = c.region.first_line - 1  # the file's line of lines[0]
                    if k0 + len(lines) > a:
                        r = c.region
                        self._parse_some(lines, max(a - k0, 0), min(b - k0, len(lines)), (r.first_seq, r.first_line, r.start, r.path), out)
                    if k0 + len(lines) >= b:
                        break
        return out

    def _parse_some(
        self, lines: list[bytes], i: int, j: int, where: tuple[int, int, int, Path], out: list[Entry]
    ) -> None:
        """Parse ``lines[i:j]`` into ``out``; bad lines also go to ``problems``. ``where``: the seq, line
        number and byte offset of ``lines[0]``, and its file."""
        seq, line, at, path = where
        for k in range(i, j):
            ent = _parse(lines[k], seq + k, path, line + k)
            if ent is None:
                continue
            if type(ent) is BadLine:
                ent = replace(ent, offset=at + sum(len(x) + 1 for x in lines[:k]))  # rare: no running sum
                self.problems.append(ent)
            out.append(ent)

    # -- following
    def read_new(self) -> list[Entry]:
        """Entries committed since the last ``load()``/``read_new()`` (the first call reads all)."""
        out: list[Entry] = []
        for c in read_stream(self.source, self._cursor, chunk=self.chunk):
            self._parse_lines(c, out)
        return out

    def follow(self) -> Iterator[Chunk]:
        """The regions committed since the last read, unparsed (``read_new`` parses every line of them), for a
        follower that takes the writer's lines by their bytes and parses the others (:meth:`parse_at`)."""
        return read_stream(self.source, self._cursor, chunk=self.chunk)

    def parse_at(self, c: Chunk, lines: list[bytes], k: int) -> Entry | None:
        """Line ``k`` of ``c`` (``lines``: its lines) parsed as ``read_new`` would (a bad line also goes to
        ``problems``); ``None`` for a blank line."""
        r = c.region
        out: list[Entry] = []
        self._parse_some(lines, k, k + 1, (r.first_seq, r.first_line, r.start, r.path), out)
        return out[0] if out else None

    def twin(self) -> JournalReader:
        """A reader for another thread that shares this one's line index and nothing else.

        A file's index (:class:`_Lines`) only grows (``index()`` appends; a file
        rewritten in place gets a new one), so one twin may index while the other
        reads lines it has counted (each array operation is atomic under the GIL).
        Each keeps its own segment list, files, position and problems. The TUI's
        reading worker indexes one twin while the UI thread reads the other: the
        index is held once.
        """
        twin = JournalReader(self.source, chunk=self.chunk)
        twin._segs = [replace(s) for s in self._segs]  # a new _Seg each, the same ``lines`` index
        return twin


@dataclass
class _TailPart:
    """The last lines of one file, for ``tail``, and what places them: their first line number, or
    the seq of the file's first line."""

    path: Path
    lines: list[bytes]
    first_line: int = -1
    file_seq: int | None = None
    end: int = 0
    """The file's committed end: where the last line's newline ends."""


def _last_seq(raws: list[bytes]) -> int | None:
    """The seq of the last of ``raws`` from the ``seq`` field of the last line that parses (``None``: none has one)."""
    for k in range(len(raws) - 1, -1, -1):
        try:
            rec = orjson.loads(raws[k])
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict) and type(rec.get("seq")) is int:
            return int(rec["seq"]) + (len(raws) - 1 - k)
        return None
    return None


def read_json_lines(path: Path, *, chunk: int = CHUNK) -> list[dict[str, Any]]:
    """A small JSONL file (e.g. ``supervisor.jsonl``) as a list; bad and torn lines are skipped."""
    jf = JournalFile.open(path)
    if jf is None:
        return []
    out = []
    with jf:
        for c in jf.chunks(chunk=chunk):
            for raw in c.lines():
                if raw.strip():
                    try:
                        obj = parse_line(raw)
                    except ValueError:
                        continue  # an event file's reader wants the events; the damaged line stays in the file
                    out.append(obj)
    return out
