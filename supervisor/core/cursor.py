"""The one "state at": a checkpoint snapshot on the effective path, then the ``state_patch`` es after it.

The state at a step is the state after its result (:meth:`StateCursor.result_seq`:
the patch that carries what the agent did with a step's result is on the next
record that saves the state). Below, "the state at ``seq``" is the state right
after the record at ``seq`` on the *effective path to it*: the journal up to ``seq`` with the rollbacks before it
folded in (abandoned branches included: a point inside one has its own path).
That path is ``0..seq`` minus the records each rollback cut, so a :class:`Shape`
(every checkpoint with a snapshot file, and every rollback's cut) is all a
cursor needs besides the records. It starts from the latest loadable snapshot
on the path and streams the patches after it in bounded chunks (memory stays
flat however far the checkpoint is); moving forward from its last answer it
applies only the patches in between.

From files it reads forward through the one reader primitive
(:meth:`JournalFile.chunks`) with its own file handles and no line index: it
starts at the nearest known line start before the records it needs (where its
last read stopped, or one of the regions a scan found), so it never shares a
reader with another thread and a million-record journal costs it no index.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from . import checkpoints
from . import state as state_mod
from .records import BadLine, Kind, LazyRecord, Record, parse_line
from .segments import JournalFile, Region, segment_paths

_STEP, _BEGIN, _CHECKPOINT, _ROLLBACK = Kind.STEP.value, Kind.BEGIN.value, Kind.CHECKPOINT.value, Kind.ROLLBACK.value

READ_CHUNK = 1024 * 1024
"""Bytes read at a time when patches are streamed from the files."""
LOOK_CHUNK = 64 * 1024
"""Bytes read at a time by a step's look ahead (it needs the next few lines)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """What finding the effective path to a point takes: the journal's snapshots and rollback cuts.

    Immutable, so a worker thread can use one while another thread builds the next.
    """

    checkpoints: tuple[tuple[int, str], ...] = ()
    """``(seq, file)`` of every checkpoint with a snapshot file, abandoned ones too, in seq order."""
    cuts: tuple[tuple[int, int], ...] = ()
    """``(target seq, rollback seq)`` of every rollback that cut (target -1: the start), in rollback order."""


NO_SHAPE = Shape()


def path_ranges(shape: Shape, seq: int) -> list[tuple[int, int]]:
    """Half-open seq ranges of the effective path up to and including ``seq``."""
    removed = sorted((t + 1, r) for t, r in shape.cuts if r <= seq and r > t + 1)
    out: list[tuple[int, int]] = []
    at = 0
    for a, b in removed:
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at <= seq:
        out.append((at, seq + 1))
    return out


def _on_path(ranges: list[tuple[int, int]], seq: int) -> bool:
    i = bisect.bisect_right(ranges, (seq, 1 << 62)) - 1
    return i >= 0 and ranges[i][0] <= seq < ranges[i][1]


def _holds_step(e: Any) -> bool:
    """Whether the entry is a ``step`` or ``begin`` record (the state at it is after the step's result)."""
    if type(e) is BadLine:
        return False
    kind = e.kind if type(e) is LazyRecord else e.get("kind", _STEP)
    return kind in (_STEP, _BEGIN)


def _seq_of(e: Any) -> int:
    if type(e) is dict:
        return int(e["seq"])
    return int(e.seq) if isinstance(e, (BadLine, LazyRecord)) else int(e["seq"])


def _start_file(start: Region | None, paths: list[Path]) -> tuple[Region | None, int]:
    """The region to start a read at and the index of its file in ``paths`` (``None``, 0: its file is gone,
    read from the start)."""
    if start is None:
        return None, 0
    inos = []
    for p in paths:
        try:
            inos.append(os.stat(p).st_ino)
        except OSError:
            inos.append(-1)
    if start.ino not in inos:
        return None, 0
    return start, inos.index(start.ino)


def _records(lines: list[bytes], lo: int, hi: int, s0: int) -> Iterator[tuple[int, Record]]:
    """``(seq, record)`` of lines ``lo:hi`` (the first at seq ``s0``); blank and bad lines carry no state."""
    for n, raw in enumerate(lines[lo:hi], s0 + lo):
        if raw:
            try:
                rec = parse_line(raw)
            except ValueError:
                continue
            yield n, rec


def _begin_end(seq: int, pos: int, it: Iterator[tuple[int, Any]]) -> int:
    """Where the SDK's begin at ``seq`` (of step ``pos``) ends: its own step record, not a failed try to be
    retried (``seq``: none before a rollback or the end).

    Not :mod:`.pairing`'s rule, on purpose: a step is identified by its position across attempts, so the
    state at a begin its crash interrupted is the state after the step that finished it in a later attempt
    (pairing ends every open begin at a ``start``: it marks which begins were interrupted)."""
    for s, e in it:
        if s <= seq or type(e) is BadLine:
            continue
        if type(e) is LazyRecord:
            if e.pos == pos or (e.pos < 0 and e.record().get("pos") == pos):
                return s
            continue
        kind = e.get("kind", _STEP)
        if kind == _ROLLBACK:
            return seq
        if kind == _STEP and e.get("pos") == pos and (e.get("error") is None or not e.get("transient")):
            return s  # its step: done, or failed for good (a failed try is retried: go on)
    return seq


class StateCursor:
    """The state at any point of one journal; forward moves apply only the patches in between.

    Records come from ``records`` (an in-memory journal in seq order: a History's
    entries, or the SDK's effective list) or else from the files of ``source``,
    read with the cursor's own handles, so a worker thread never shares a reader
    with the UI thread. Not thread-safe itself: one caller at a time.

    The document :meth:`state_at` returns is the caller's to read, not to change;
    the cursor copies it before moving on from it.
    """

    def __init__(
        self,
        run_dir: Path,
        source: Path | None = None,
        *,
        records: Sequence[Any] | None = None,
        chunk: int = READ_CHUNK,
    ) -> None:
        self.run_dir = run_dir
        self.source = source or run_dir
        self.records = records
        self.chunk = chunk
        self.regions: Sequence[Region] = ()
        """Known line starts of the files in seq order (a scan's regions): where a read may begin."""
        self.seq = -1
        """The point of the last answer (-1: before the first record)."""
        self.doc: Any = {}
        self.patches = 0
        """Patches applied so far (the SDK asks whether the state changed)."""
        self.origin = -1
        """The snapshot the last answer started from (its checkpoint's seq; -1: the start of the journal)."""
        self.problems: list[str] = []
        """Why a snapshot on a path could not be used (missing, damaged): the state came from the patches instead."""
        self._cuts: tuple[tuple[int, int], ...] = ()  # the cuts on the path of the last answer
        self._i = 0  # records: the index of the first record after ``seq``
        self._shared = False  # ``doc`` was handed out: copy it before patching
        self._next: Region | None = None  # files: where the last read stopped (the next line's start)
        self._mark: Region | None = None  # files: where the last look ahead started (a step's line)
        self._last: tuple[int, Record] | None = None  # files: the last record a move read, with its seq

    def state_at(
        self, seq: int, shape: Shape | None = None, *, current: Record | None = None, after_result: bool = True
    ) -> Any:
        """The state at the record at ``seq``: for a step, the state after its result (see :meth:`result_seq`).

        ``after_result=False``: the state right after the record itself, as the
        patches so far have it (what a replay up to that record rebuilds; a fork).
        ``shape`` ``None``: the records are the effective path already and no
        snapshot is used (the SDK's own state must be exactly its patches).
        ``current`` is the parsed record at ``seq`` if the caller has it (a lazy one is not parsed again).
        """
        if after_result and self.records is None and seq > self.seq:
            # from files, forward: read on to seq (once), then look ahead from the line after it
            self._move(seq, shape, current)
            last = self._last
            if last is not None and last[0] == seq:
                end = self._end_after(seq, self._following(seq + 1), last[1]) if _holds_step(last[1]) else seq
            else:
                end = self.result_seq(seq)  # seq came from a snapshot, or is a bad line
        else:
            end = self.result_seq(seq) if after_result else seq
        self._move(end, shape, current if end == seq else None)
        self._shared = True
        return self.doc

    def result_seq(self, seq: int) -> int:
        """The record whose patch completes the state at ``seq``: ``seq`` itself, or for a step a later one.

        A step's record carries the changes made before and while it ran; what the
        agent does with its result (``run.state["plan"] = plan``) is carried by the
        next record that saves the state: the next successful step, a checkpoint,
        or a record with a ``state_patch`` (the "state at exit" note). So for a
        ``step`` (or ``begin``) record the state at it is the state after that
        record, with the records in between (begins, starts, failed tries). A
        rollback ends the branch: the state stops before it. A change a step's own
        function makes to the state is in the step's record, so it shows at the
        step before it too (the journal cannot tell the two apart). With concurrent
        steps the next record that saves the state may be another step's (one that
        was in flight): the state at a step is then the state through that record,
        as the file has it. A ``begin`` with a ``pos`` ends at its own step's record,
        paired by ``pos`` (:meth:`_end_after`), not at the next step in the file.
        Checkpoints, rollbacks, starts and notes: the record itself.
        """
        it = self._following(seq)
        for s, e in it:
            if s < seq:
                continue
            if s != seq or not _holds_step(e):
                return seq
            return self._end_after(seq, it, e)
        return seq

    def _end_after(self, seq: int, it: Iterator[tuple[int, Any]], at: Any = None) -> int:
        """:meth:`result_seq` of the step at ``seq`` (its entry ``at``), from the entries after it.

        A ``begin`` as the SDK writes it (with its ``pos`` and ``attempt``; a reader
        gives a hand-written one a ``pos``, so ``attempt`` tells them apart) ends at its
        own step: the next ``step`` record with that ``pos`` that is not a failed try
        to be retried (with concurrent steps, other steps' records come in between:
        they are passed, their patches included, as they are in the file before it).
        If none comes before a rollback or the end, the state right after the begin.
        """
        if type(at) is dict and at.get("kind") == _BEGIN and type(at.get("pos")) is int and "attempt" in at:
            return _begin_end(seq, at["pos"], it)
        end = seq
        for s, e in it:
            if s <= seq or type(e) is BadLine:
                continue
            rec = e.record() if type(e) is LazyRecord else e
            kind = rec.get("kind", _STEP)
            if kind == _ROLLBACK:
                return end
            end = s
            if (kind == _STEP and rec.get("error") is None) or kind == _CHECKPOINT or rec.get("state_patch"):
                return end
        return end

    def _following(self, seq: int) -> Iterator[tuple[int, Any]]:
        """``(seq, entry)`` from ``seq`` on, in seq order (without moving the cursor; files: bad lines left out)."""
        recs = self.records
        if recs is None:
            saved = self._next  # a look ahead must not move the start of the next forward read past it
            try:
                yield from self._read(seq, 1 << 62, mark=True)
            finally:
                self._next = saved
            return
        i = bisect.bisect_left(recs, seq, key=_seq_of)
        for e in itertools.islice(recs, i, None):
            yield _seq_of(e), e

    def advance(self, seq: int, current: Record | None = None) -> bool:
        """Move forward to ``seq`` along ``records`` that are the effective path, patching ``doc`` in place.

        The SDK's replay, one step at a time (the loop is inlined: a million steps
        replay through it); return whether any patch was applied.
        """
        recs = self.records
        if recs is None or seq < self.seq or self._i < 0 or self._cuts:
            before = self.patches
            self._move(seq, None, current)
            return self.patches != before
        if self._shared:
            self.doc = state_mod.json_copy(self.doc)
            self._shared = False
        doc = self.doc
        n = 0
        i = self._i
        end = len(recs)
        while i < end:
            e = recs[i]
            if type(e) is LazyRecord:
                if e.seq > seq:
                    break
                patch = (current if current is not None and e.seq == seq else e.record()).get("state_patch")
            elif type(e) is dict:
                if e["seq"] > seq:
                    break
                patch = e.get("state_patch")
            else:
                if _seq_of(e) > seq:
                    break
                patch = None
            if patch:
                doc = state_mod.apply_patch(doc, patch)
                n += 1
            i += 1
        self._i = i
        self.doc = doc
        self.seq = seq
        self.patches += n
        return n > 0

    def step_over(self, e: Any, seq: int) -> bool:
        """:meth:`advance` over one record known to hold no patch, when it is the next of ``records``: nothing
        changes but where the cursor is. ``False`` (nothing done): the caller advances as usual. The SDK's
        sequential resume calls it for each served step without a patch (most of them)."""
        recs, at = self.records, self._i
        if recs is None or at < 0 or self._cuts or at >= len(recs) or recs[at] is not e:
            return False
        self._i = at + 1
        self.seq = seq
        return True

    def applied(self, seq: int) -> None:
        """The caller has applied the patch of ``seq``, the last of ``records``, itself (a live record)."""
        self.seq = seq
        self._i = len(self.records) if self.records is not None else 0

    def reset(self) -> None:
        """Forget the last answer (the next one starts from a snapshot)."""
        self.seq = self.origin = -1
        self.doc = {}
        self._cuts = ()
        self._i = 0
        self._shared = False

    # ------------------------------------------------------------------ moving
    def _move(self, seq: int, shape: Shape | None, current: Record | None) -> None:
        self._last = None
        sh = NO_SHAPE if shape is None else shape
        if seq == self.seq and self._cuts_before(sh, seq) == self._cuts:
            return
        linear = self._linear(seq, sh)
        # a snapshot after the last answer is nearer than it, if it loads
        nearer = linear and any(self.seq < c <= seq for c, _ in sh.checkpoints)
        doc: Any
        if linear and not nearer:
            origin, doc = -1, None  # on from the last answer
        elif shape is None:
            origin, doc = -1, {}  # no snapshots: from the start
        else:
            origin, doc = self._origin(seq, sh)
        if linear and origin <= self.seq:
            if self._shared:
                self.doc = state_mod.json_copy(self.doc)
                self._shared = False
            lo = self.seq + 1
        else:
            self.doc, self.seq, self._shared, self.origin = doc, origin, False, origin
            self._i = 0 if origin < 0 else -1
            lo = origin + 1
        for a, b in path_ranges(sh, seq):
            a = max(a, lo)
            if a < b:
                self._apply(a, b, current)
        self.seq = seq
        self._cuts = self._cuts_before(sh, seq)

    @staticmethod
    def _cuts_before(shape: Shape, seq: int) -> tuple[tuple[int, int], ...]:
        return tuple(c for c in shape.cuts if c[1] <= seq) if shape.cuts else ()

    def _linear(self, seq: int, shape: Shape) -> bool:
        """Whether the path to ``seq`` is the path to the last answer plus the records in between."""
        if seq < self.seq or self._cuts_before(shape, self.seq) != self._cuts:
            return False
        return not any(self.seq < r <= seq for _, r in shape.cuts)

    def _origin(self, seq: int, shape: Shape) -> tuple[int, Any]:
        """The latest loadable snapshot on the path to ``seq``: its seq and state (-1 and ``{}``: none).

        A snapshot is used only if it loads and its ``seq`` (when it has one) is its record's; else it
        is a problem, and an earlier snapshot or the patches from the start give the state."""
        ranges = path_ranges(shape, seq)
        for c, fname in reversed(shape.checkpoints):
            if c > seq or not _on_path(ranges, c):
                continue
            try:
                doc = checkpoints.load_checkpoint(self.run_dir, fname)
                at = doc.get("seq")
                if type(at) is int and at != c:  # the cheap check against the journal: another record's snapshot
                    raise CheckpointError(
                        f"checkpoint file {checkpoints.checkpoint_dir(self.run_dir) / Path(fname).name} holds the state at seq {at}, "
                        f"not at its record's seq {c}"
                    )
                return c, doc["state"]
            except CheckpointError as e:
                if str(e) not in self.problems:
                    self.problems.append(str(e))
                continue  # a missing or damaged snapshot: an earlier one, or the patches from the start
        return -1, {}

    def _apply(self, a: int, b: int, current: Record | None) -> None:
        """Apply the patches of the records with ``a <= seq < b``."""
        doc = self.doc
        n = 0
        cur_seq = -1 if current is None else current.get("seq")
        for e in self._entries(a, b):
            t = type(e)
            if t is dict:
                patch = e.get("state_patch")
            elif t is LazyRecord:
                patch = (current if e.seq == cur_seq else e.record()).get("state_patch")  # type: ignore[union-attr]
            else:
                continue  # a bad line carries no state
            if patch:
                doc = state_mod.apply_patch(doc, patch)
                n += 1
        self.doc = doc
        self.patches += n

    def _entries(self, a: int, b: int) -> Iterator[Any]:
        recs = self.records
        if recs is None:
            for s, rec in self._read(a, b):
                self._last = (s, rec)
                yield rec
            return
        i = self._i
        if not (0 <= i <= len(recs) and (i == 0 or _seq_of(recs[i - 1]) < a) and (i == len(recs) or _seq_of(recs[i]) >= a)):
            i = bisect.bisect_left(recs, a, key=_seq_of)
        n = len(recs)
        while i < n:
            e = recs[i]
            if _seq_of(e) >= b:
                break
            yield e
            i += 1
        self._i = i

    def _start(self, a: int) -> Region | None:
        """The nearest known line start at or before seq ``a`` (``None``: the start of the journal)."""
        best: Region | None = None
        regions = self.regions
        i = bisect.bisect_right(regions, a, key=lambda r: r.first_seq) - 1
        if i >= 0:
            best = regions[i]
        for hint in (self._next, self._mark):
            if hint is not None and hint.first_seq <= a and (best is None or hint.first_seq >= best.first_seq):
                best = hint
        return best

    def _read(self, a: int, b: int, *, mark: bool = False) -> Iterator[tuple[int, Record]]:
        """``(seq, record)`` with ``a <= seq < b``, parsed as they are read (bad lines carry no state: left out).

        ``mark``: remember where line ``a`` starts (a look ahead: the next one starts at or after it).
        """
        start = self._start(a)
        try:
            yield from self._read_from(start, a, b, mark)
        except ValueError:
            if start is None:
                raise
            # the file changed under the hint (rewritten, not appended to): read from the start
            self._next = self._mark = None
            yield from self._read_from(None, a, b, mark)

    def _read_from(self, start: Region | None, a: int, b: int, mark: bool = False) -> Iterator[tuple[int, Record]]:
        paths = segment_paths(self.source)
        start, first = _start_file(start, paths)
        seq = start.first_seq if start is not None else 0
        for n, p in enumerate(paths[first:]):
            jf = JournalFile.open(p)
            if jf is None:
                continue
            with jf:
                at, line = (start.start, start.first_line) if n == 0 and start is not None else (0, 1)
                for c in jf.chunks(at, seq, line, chunk=min(self.chunk, LOOK_CHUNK) if mark else self.chunk):
                    s0 = c.region.first_seq
                    cnt = c.count()
                    seq = s0 + cnt
                    if seq <= a:
                        continue
                    lines = c.lines()
                    lo = max(0, a - s0)
                    hi = min(cnt, b - s0)
                    if mark and lo < hi:
                        off = c.region.start + sum(map(len, lines[:lo])) + lo
                        self._mark = Region(c.region.path, off, c.region.end, s0 + lo, c.region.first_line + lo, c.region.ino)
                        mark = False
                    yield from _records(lines, lo, hi, s0)
                    if hi < cnt:  # stopped inside the chunk: remember where line ``b`` starts
                        off = c.region.start + sum(map(len, lines[:hi])) + hi
                        self._next = Region(c.region.path, off, c.region.end, b, c.region.first_line + hi, c.region.ino)
                        return
                    self._next = Region(c.region.path, c.region.end, c.region.end, seq, c.region.first_line + cnt, c.region.ino)
                    if seq >= b:
                        return
