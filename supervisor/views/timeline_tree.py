"""Nested steps in the timeline (no Textual): which rows are a step's children, their depth, and folding them.

A nested step's records carry ``parent``, the ``id`` of the ``begin`` of the step they run in (``core.nesting``).
Nothing here runs for a run without one: the model asks for the tree once a record it parsed for the screen is
nested, and only then does the reading worker read the journal for it (:class:`TreeScan`: the lines that hold
:data:`wire.PARENT_WORD`, found in the raw bytes, parsed; a parent's begin and step found by their bytes), and
then the bytes of each read after it. What it finds goes to the UI thread as :class:`Facts`; :class:`StepTree`
keeps them there, with the folds and the rows they hide.

Rows: a nested step's row is indented under its parent's, with a tree mark. A parent's row stays where its step
began (its children's rows come after it in the journal, and its step record after theirs): with the begins
folded into their steps' rows, a finished parent's row is at its begin's place and shows its step record (its
begin and step swap which one has no row). A folded parent's descendants have no row; its row says how many it
hides. With a filter, or every begin row shown, rows stay in journal order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..core import wire
from ..core.nesting import find_begin, nested_in
from ..core.records import Record, parse_line
from ..core.segments import CHUNK, Region, read_stream
from .scan import SeqBits

__all__ = ["Facts", "NestedRows", "Parent", "StepTree", "TreeScan"]

INDENT = "  "
"""Each level of nesting below the first."""
TREE_MARK = "└ "
"""Before a nested step's name."""
OPEN_MARK, FOLDED_MARK = "▾ ", "▸ "
"""Before a parent step's name: its children shown, or folded into its row."""
_REGION_MAX = 16 * 1024 * 1024
"""The worker's regions are merged up to this many bytes (live reads add one a read)."""


@dataclass(slots=True)
class Facts:
    """What one read of the journal's bytes found about its nesting (the worker's, handed to the UI thread)."""

    parents: list[tuple[str, int, str | None]] = field(default_factory=list)
    """Steps found to have nested steps: the id of their begin, its seq (-1: not found), their own parent's id."""
    children: list[tuple[int, str]] = field(default_factory=list)
    """The records of nested steps: their seq and their parent's id, in seq order."""
    closed: list[tuple[str, int]] = field(default_factory=list)
    """Parents whose step record was found: their id and that record's seq."""

    def __bool__(self) -> bool:
        return bool(self.parents or self.children or self.closed)


# --------------------------------------------------------------------------- the worker's half
@dataclass(slots=True)
class _Wait:
    """A parent whose step record is looked for: its name as a JSON string (the bytes looked for), its key."""

    needle: bytes
    name: Any
    pos: Any
    attempt: Any


_NESTED, _CANDIDATE, _END = 0, 1, 2
"""What a place in a chunk is (:meth:`TreeScan.feed`): a line that may be nested, a line that may be a waiting
parent's step record, a new attempt or a rollback (the steps still open end there)."""


class _Lines:
    """The seq of a line start in a chunk, asked in increasing order (the newlines counted once)."""

    __slots__ = ("at", "data", "seq")

    def __init__(self, data: bytes, first_seq: int) -> None:
        self.data, self.at, self.seq = data, 0, first_seq

    def __call__(self, start: int) -> int:
        self.seq += self.data.count(b"\n", self.at, start)
        self.at = start
        return self.seq


class TreeScan:
    """The reading worker's half: the nesting in the journal's bytes, chunk after chunk (:meth:`feed`), handed
    out as :class:`Facts` (:meth:`take`). Memory: the parents found (their ids), the nested begins still open."""

    def __init__(self) -> None:
        self.regions: list[Region] = []
        """The regions fed, merged (where a parent's begin is looked for before the chunk read)."""
        self._located: set[str] = set()  # parents reported
        self._open: dict[str, tuple[int, Record]] = {}  # nested begins whose step is open: id -> (seq, record)
        self._open_keys: dict[tuple[Any, Any, Any], str] = {}  # (name, pos, attempt) of an open nested begin -> id
        self._waiting: dict[str, _Wait] = {}  # parents whose step record is not found yet
        self._facts = Facts()
        self._cur = Region(Path(), 0, 0, 0)  # the chunk being read

    @classmethod
    def build(cls, source: Path, lines: int, chunk: int = CHUNK) -> TreeScan:
        """The nesting of the journal's first ``lines`` lines (the ones the model's scan counted)."""
        tree = cls()
        for c in read_stream(source, chunk=chunk):
            first = c.region.first_seq
            if first >= lines:
                break
            data, region = c.data, c.region
            if first + c.count() > lines:  # lines appended since the scan: the live reads take them
                cut = 0
                for _ in range(lines - first):
                    cut = data.find(b"\n", cut) + 1
                data, region = data[:cut], replace(region, end=region.start + cut)
            tree.feed(data, region)
        return tree

    def take(self) -> Facts:
        """What was found since the last call."""
        facts, self._facts = self._facts, Facts()
        return facts

    def feed(self, data: bytes, region: Region) -> None:
        """The next chunk of whole lines (``region`` its place). The places that matter (nested lines, the
        waiting parents' step records, attempt ends) are visited in order, so its newlines are counted once."""
        self._add_region(region)
        if not self._waiting and wire.PARENT_WORD not in data:
            return
        heap: list[tuple[int, int, int, str]] = []
        for pid, w in self._waiting.items():
            self._push(heap, data, w.needle, 0, _CANDIDATE, pid)
        self._push(heap, data, wire.PARENT_WORD, 0, _NESTED, "")
        for end in _attempt_ends(data):
            heapq.heappush(heap, (end, _END, 0, ""))
        seq_at = _Lines(data, region.first_seq)
        while heap:
            at, what, _, pid = heapq.heappop(heap)
            if what == _END:
                self._waiting.clear()  # the steps still open were interrupted: no step record closes them
                self._open.clear()
                self._open_keys.clear()
                continue
            a = data.rfind(b"\n", 0, at) + 1
            e = data.find(b"\n", at)
            e = len(data) if e < 0 else e
            if what == _NESTED:
                self._nested(data, a, e, seq_at(a), heap)
                self._push(heap, data, wire.PARENT_WORD, e, _NESTED, "")
            elif pid in self._waiting:
                if self._closes(data[a:e], self._waiting[pid]):
                    del self._waiting[pid]
                    self._facts.closed.append((pid, seq_at(a)))
                else:
                    self._push(heap, data, self._waiting[pid].needle, e, _CANDIDATE, pid)

    @staticmethod
    def _push(heap: list[tuple[int, int, int, str]], data: bytes, needle: bytes, start: int, what: int, pid: str) -> None:
        i = data.find(needle, start)
        if i >= 0:
            heapq.heappush(heap, (i, what, len(heap), pid))

    def _nested(self, data: bytes, a: int, e: int, seq: int, heap: list[tuple[int, int, int, str]]) -> None:
        """A line that holds :data:`wire.PARENT_WORD` (``data[a:e]``, at ``seq``): a nested record, or not."""
        try:
            rec = parse_line(data[a:e])
        except ValueError:
            return  # a damaged line: the scan marks it
        parent = nested_in(rec)
        if parent is None:
            return  # the word was in a value, not the record's own field
        if parent not in self._located:
            self._locate(parent, data, a, seq, e, heap)
        self._facts.children.append((seq, parent))
        kind = rec.get("kind", wire.STEP)
        key = (rec.get("step"), rec.get("pos"), rec.get("attempt"))
        rid = rec.get("id")
        if kind == wire.BEGIN and isinstance(rid, str):
            self._open[rid] = (seq, rec)  # it may be a parent too: its children's records come before its step's
            self._open_keys[key] = rid
        elif kind == wire.STEP and not rec.get("transient"):
            done = self._open_keys.pop(key, None)
            if done is not None:
                self._open.pop(done, None)

    def _locate(self, pid: str, data: bytes, a: int, seq: int, e: int, heap: list[tuple[int, int, int, str]]) -> None:
        """A parent met for the first time (at its first child's line ``data[a:e]``, seq ``seq``): its begin (an
        open nested one, else found by its bytes before, in this chunk or the ones before), then its step."""
        self._located.add(pid)
        got: tuple[int, Record] | None = self._open.get(pid)
        if got is None:
            j = data.rfind(wire.id_needle(pid), 0, a)
            if j >= 0:
                b = data.rfind(b"\n", 0, j) + 1
                try:
                    got = (seq - data.count(b"\n", b, a), parse_line(data[b : data.find(b"\n", j)]))
                except ValueError:
                    got = None
            else:
                found = find_begin(self._before(), pid)
                got = None if found is None else (found[1], found[0])
        if got is None:
            self._facts.parents.append((pid, -1, None))  # its children show as nested, under no row
            return
        bseq, brec = got
        self._facts.parents.append((pid, bseq, nested_in(brec)))
        w = _Wait(orjson.dumps(brec.get("step")), brec.get("step"), brec.get("pos"), brec.get("attempt"))
        self._waiting[pid] = w
        self._push(heap, data, w.needle, e, _CANDIDATE, pid)

    @staticmethod
    def _closes(line: bytes, w: _Wait) -> bool:
        """Whether ``line`` is the step record that closes a waiting parent's begin (a retried try does not)."""
        try:
            rec = parse_line(line)
        except ValueError:
            return False
        return (
            rec.get("kind", wire.STEP) == wire.STEP
            and rec.get("step") == w.name
            and rec.get("pos") == w.pos
            and rec.get("attempt") == w.attempt
            and not rec.get("transient")
        )

    def _before(self) -> list[Region]:
        """The regions fed before the chunk being read (the last one merged with it is cut where it starts)."""
        cur = self._cur
        out = [r for r in self.regions if r.ino != cur.ino or r.start < cur.start]
        if out and out[-1].ino == cur.ino and out[-1].end > cur.start:
            out[-1] = replace(out[-1], end=cur.start)
        return out

    def _add_region(self, r: Region) -> None:
        self._cur = r
        rs = self.regions
        last = rs[-1] if rs else None
        if last is not None and last.ino == r.ino and last.path == r.path and last.end == r.start and r.end - last.start <= _REGION_MAX:
            rs[-1] = replace(last, end=r.end)
        else:
            rs.append(r)


def _attempt_ends(data: bytes) -> Iterator[int]:
    """Where the writer's ``start`` and ``rollback`` lines of ``data`` start: the steps still open end there."""
    for head in (wire.START_HEAD, wire.ROLLBACK_HEAD):
        if data.startswith(head):
            yield 0
        i = data.find(b"\n" + head)
        while i >= 0:
            yield i + 1
            i = data.find(b"\n" + head, i + 1)


# --------------------------------------------------------------------------- the UI thread's half
@dataclass(slots=True)
class Parent:
    """A step with nested steps, as the timeline knows it."""

    begin: int
    """The seq of its begin record (-1: not found)."""
    parent: str | None
    """The id of the begin of the step it is nested in (``None``: a top-level step)."""
    depth: int
    """0 for a top-level step."""
    step: int | None = None
    """The seq of its step record, once written."""
    children: list[int] = field(default_factory=list)
    """The seqs of its children's records (begins, steps, failed tries), in order."""
    kids: list[str] = field(default_factory=list)
    """The ids of its children that are parents too."""


class StepTree:
    """The nesting the UI thread knows (:class:`Facts` taken in order), the folds, and the rows they change.

    ``gone`` is the set of records without a row in the unfiltered timeline when the tree changes it (a
    finished parent's row moved to its begin, a fold): ``None`` while it changes nothing, and the model maps
    rows as it does for a run without nesting.
    """

    def __init__(self) -> None:
        self.parents: dict[str, Parent] = {}
        self.folded: set[str] = set()
        self.fold_bits = SeqBits()
        """The records of the folded parents' descendants."""
        self.moved: dict[int, int] = {}
        """A finished parent's begin seq -> its step's seq (with the begins folded, the row at its begin shows its
        step record, and its step has no row of its own)."""
        self.back: dict[int, int] = {}
        self.gone: SeqBits | None = None
        self._at: dict[int, str] = {}  # a parent's begin seq and step seq -> its id
        self._counts: dict[tuple[str, bool], int] = {}  # a folded parent's rows hidden, by show_begins (until a change)

    # -- what the rows show
    def depth(self, rec: Record) -> int:
        """How deep the record's step is (0: top-level; a parent not known yet counts as top-level)."""
        pid = nested_in(rec)
        if pid is None:
            return 0
        p = self.parents.get(pid)
        return 1 if p is None else p.depth + 1

    def parent_at(self, seq: int) -> str | None:
        """The id of the parent whose begin or step record is at ``seq`` (``None``: not a parent's)."""
        return self._at.get(seq)

    def label(self, rec: Record, name: str) -> str:
        """The name cell of a record's row: indented by its depth, the tree mark, a parent's fold mark, the name."""
        d = self.depth(rec)
        head = INDENT * (d - 1) + TREE_MARK if d else ""
        pid = self._at.get(int(rec.get("seq", -1)))
        if pid is not None:
            head += FOLDED_MARK if pid in self.folded else OPEN_MARK
        return head + name

    def hidden_rows(self, seq: int, hidden: SeqBits, show_begins: bool) -> int | None:
        """How many rows the folded parent whose row is record ``seq`` hides (``None``: not a folded parent)."""
        pid = self._at.get(seq)
        if pid is None or pid not in self.folded:
            return None
        n = self._counts.get((pid, show_begins))
        if n is None:
            n = sum(1 for s in self.descendants(pid) if show_begins or not self._no_row(s, hidden))
            self._counts[(pid, show_begins)] = n
        return n

    def _no_row(self, seq: int, hidden: SeqBits) -> bool:
        """With the begins folded: whether record ``seq`` has no row of its own, fold aside (a begin folded into
        its step's row; a finished parent's step, shown at its begin)."""
        return seq in self.back or (seq in hidden and seq not in self.moved)

    def descendants(self, pid: str) -> Iterator[int]:
        """The seqs of the records of ``pid``'s descendants (its children's, theirs...)."""
        todo = [pid]
        while todo:
            p = self.parents.get(todo.pop())
            if p is not None:
                yield from p.children
                todo.extend(p.kids)

    def ancestors(self, pid: str) -> Iterator[str]:
        """``pid`` and the parents it is nested in, inner first."""
        seen: set[str] = set()
        cur: str | None = pid
        while cur is not None and cur not in seen:
            seen.add(cur)
            yield cur
            p = self.parents.get(cur)
            cur = p.parent if p is not None else None

    # -- the rows (while :attr:`gone` is not ``None``)
    def no_row(self, seq: int, show_begins: bool) -> bool:
        """Whether record ``seq`` has no row (a finished parent's step has its begin's)."""
        assert self.gone is not None
        return (show_begins or seq not in self.back) and seq in self.gone

    def row_index(self, seq: int, show_begins: bool) -> int:
        """The row of record ``seq`` among the records' rows."""
        assert self.gone is not None
        p = seq if show_begins else self.back.get(seq, seq)
        return p - self.gone.rank(p)

    def row_seq(self, index: int, show_begins: bool) -> int:
        """The record the ``index``-th of the records' rows shows."""
        assert self.gone is not None
        p = self.gone.select_free(index)
        return p if show_begins else self.moved.get(p, p)

    def filter_hidden(self, hidden: SeqBits, show_begins: bool) -> SeqBits:
        """With a filter (rows in journal order, none moved): the records without a row."""
        out = SeqBits() if show_begins else hidden.copy()
        out.add_many(self.fold_bits)
        return out

    # -- changes
    def take(self, facts: Facts, hidden: SeqBits, show_begins: bool) -> bool:
        """Take what a read found; whether the rows changed (a row moved, a folded parent's child came)."""
        for pid, bseq, grand in facts.parents:
            up = self.parents.get(grand) if grand is not None else None
            self.parents[pid] = Parent(bseq, grand, 0 if up is None else up.depth + 1)
            if up is not None:
                up.kids.append(pid)
            if bseq >= 0:
                self._at[bseq] = pid
        hide: list[int] = []
        for seq, pid in facts.children:
            p = self.parents.get(pid)
            if p is not None:
                p.children.append(seq)
                if self.folded and any(a in self.folded for a in self.ancestors(pid)):
                    hide.append(seq)
        moves: dict[int, int] = {}
        for pid, sseq in facts.closed:
            p = self.parents.get(pid)
            if p is not None and p.begin >= 0:
                p.step = sseq
                self._at[sseq] = pid
                moves[p.begin] = sseq
        self.moved.update(moves)
        self.back.update((v, k) for k, v in moves.items())
        if hide:
            self.fold_bits.add_many(hide)
        self._counts.clear()
        if not moves and not hide:
            return False
        if self.gone is None:
            self.regone(hidden, show_begins)
        else:  # a live read's few: the rows changed in place
            if moves and not show_begins:
                self.gone.discard_many(moves)
                self.gone.add_many(moves.values())
            self.gone.add_many(hide)
        return True

    def toggle(self, pid: str, hidden: SeqBits, show_begins: bool) -> bool:
        """Fold ``pid``'s descendants into its row, or unfold them; whether it is folded now."""
        if pid in self.folded:
            self.folded.discard(pid)
        else:
            self.folded.add(pid)
        self.fold_bits = SeqBits()
        for f in self.folded:
            self.fold_bits.add_many(self.descendants(f))
        self._counts.clear()
        self.regone(hidden, show_begins)
        return pid in self.folded

    def fold(self, seq: int, record: Callable[[int], Any], hidden: SeqBits, show_begins: bool) -> tuple[int, bool] | None:
        """Fold or unfold the parent whose row is record ``seq`` (a nested step's record: its parent; ``record``
        reads one); the seq that is the parent's row now and whether it is folded (``None``: no parent there)."""
        pid = self._at.get(seq)
        if pid is None:
            rec = record(seq)
            pid = nested_in(rec) if type(rec) is dict else None
        if pid is None or pid not in self.parents:
            return None
        folded = self.toggle(pid, hidden, show_begins)
        p = self.parents[pid]
        if p.step is not None and (p.begin < 0 or (not show_begins and p.begin in hidden and p.begin not in self.moved)):
            return p.step, folded  # its begin has no row: its step's row is the parent's
        return p.begin, folded

    def unfold_to(self, seq: int, record: Callable[[int], Any], hidden: SeqBits, show_begins: bool) -> bool:
        """Unfold the folded parents record ``seq`` is nested in (``record`` reads it); whether any was."""
        if seq not in self.fold_bits:
            return False
        rec = record(seq)
        pid = nested_in(rec) if type(rec) is dict else None
        folded = [] if pid is None else [a for a in self.ancestors(pid) if a in self.folded]
        for a in folded:
            self.toggle(a, hidden, show_begins)
        return bool(folded)

    def regone(self, hidden: SeqBits, show_begins: bool) -> None:
        """Make :attr:`gone` again (the begins shown or folded again, a fold, a row moved)."""
        self._counts.clear()
        folds = len(self.fold_bits) > 0
        if show_begins:
            self.gone = self.fold_bits.copy() if folds else None
            return
        if not self.moved and not folds:
            self.gone = None
            return
        gone = hidden.copy()
        gone.discard_many(self.moved)
        gone.add_many(self.moved.values())
        if folds:
            gone.add_many(self.fold_bits)
        self.gone = gone

    def add_hidden(self, seqs: Iterable[int]) -> None:
        """More begins folded into their steps' rows (live reads), with the begins folded."""
        if self.gone is not None:
            self.gone.add_many(s for s in seqs if s not in self.moved)
        self._counts.clear()

    def filter_hides(self, hidden: SeqBits, show_begins: bool) -> Callable[[int], bool]:
        """With a filter (rows in journal order): whether a record has no row (a folded begin, a fold)."""
        folds = self.fold_bits
        return lambda seq: (not show_begins and seq in hidden) or seq in folds


class NestedRows:
    """The timeline model's nested steps (a mixin of ``TimelineModel``, which makes these attributes): the tree
    asked for, taken from the worker, folded and unfolded."""

    tree: StepTree | None
    on_nested: Callable[[], None] | None
    show_begins: bool
    _hidden: SeqBits

    if TYPE_CHECKING:
        def record(self, seq: int) -> Any: ...
        def _refold(self) -> None: ...

    def _see(self, entries: Iterable[Any]) -> None:
        """Records parsed for the screen: the first nested one makes the tree wanted (the worker reads it)."""
        if self.tree is None and any(type(e) is dict and nested_in(e) is not None for e in entries):
            self.tree = StepTree()
            if self.on_nested is not None:
                self.on_nested()

    def _take_tree(self, found: Facts | StepTree) -> bool:
        """Take what the worker found about the nesting (the first time, the whole tree); whether the rows (or
        their marks) changed."""
        if isinstance(found, StepTree):
            self.tree = found  # no fold before it: there was no parent to fold
            found.regone(self._hidden, self.show_begins)
            self._refold()
            return True
        if self.tree is None:
            self.tree = StepTree()
        if self.tree.take(found, self._hidden, self.show_begins):
            self._refold()
        return bool(found)

    def toggle_fold(self, seq: int) -> tuple[int, bool] | None:
        """Fold the descendants of the parent step whose row is record ``seq`` (a nested step's: its parent's), or
        unfold them: :meth:`StepTree.fold`'s answer (``None``: no parent step there)."""
        got = None if self.tree is None else self.tree.fold(seq, self.record, self._hidden, self.show_begins)
        if got is not None:
            self._refold()
        return got

    def unfold_to(self, seq: int) -> bool:
        """Unfold the parents whose fold hides record ``seq``; whether any did."""
        if self.tree is None or not self.tree.unfold_to(seq, self.record, self._hidden, self.show_begins):
            return False
        self._refold()
        return True
