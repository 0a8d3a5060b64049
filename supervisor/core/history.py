"""The effective history: the journal with rollbacks folded in, by the one incremental :class:`Fold`.

A ``rollback`` record names a checkpoint. The effective history is everything up
to that checkpoint plus everything after the rollback record; the records in
between are an abandoned branch, kept in the file and shown as such. A rollback
that names no effective checkpoint is a problem, not a cut.

Positions: a ``begin`` or ``step`` record's ``pos`` is the call's position as the
SDK wrote it (assigned when the step is *called*, in call order); a record
without one (a hand-written journal) gets the position after the highest so far
(the number of successful steps before it in the effective history, the same
for sequential code). A step's
records are paired by ``pos``, not by adjacency: with concurrent steps
(``asyncio.gather``, threads) other records come between a ``begin`` and its
``step``, and ``step`` records are committed in another order than their ``pos``.
``History.steps`` is in ``pos`` order (the order resume matches in),
:meth:`History.in_flight_steps` the begins still waiting for their step.

Every reader folds here: the SDK (parsed records and lazy step lines), the
supervisor and the runs list (a counting fold), the TUI (markers found in raw
bytes, with the number of successful steps between them).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from . import wire
from .cursor import Shape, StateCursor
from .journal_reader import Entry, JournalReader
from .pairing import Pairing
from .records import (
    DAMAGED,
    BadLine,
    Kind,
    LazyRecord,
    Record,
    damaged_holds_step,
    step_name,
)

__all__ = [
    "DAMAGED",
    "BadLine",
    "Branch",
    "Fold",
    "History",
    "Marker",
    "fold",
    "fold_shape",
    "load",
    "rollback_record",
    "shape_of",
    "state_at",
]

ERROR = "error"
"""Marker kind of a failed step (a ``step`` record with an ``error``)."""
STEPS = "steps"
"""Marker kind that carries only successful steps (those after the last marker of a scan)."""
# DAMAGED (from records) is also a marker kind: a damaged line, ``name`` the kind its first bytes show
MISSING_TARGET = "rollback names a checkpoint not in the effective history"

# The fold runs once per record of a million-record resume: plain-string kinds (:mod:`.wire`), no enum lookups.
_STEP, _CHECKPOINT, _ROLLBACK, _BEGIN, _START = wire.STEP, wire.CHECKPOINT, wire.ROLLBACK, wire.BEGIN, wire.START
_PAUSE, _CHOICE = wire.PAUSE, wire.CHOICE

# The resume view (``JournalReader.resume_view``) hands out successful step lines unparsed and leaves
# the begin lines out. A lazy step's ``pos`` is taken as the one after the highest so far (the count of
# successful steps before it: file order is pos order for sequential code) unless a file shows overlapping
# steps (:data:`wire.AFTER_BEGIN`: the verdict the read gives, else :func:`wire.overlaps` over the bytes).
# Then, or when a file's last step line does not carry the pos it was given (positions skipped), the fold is
# done again with every step line's ``pos`` read from its bytes.


@dataclass(slots=True)
class Marker:
    """A record the fold and the TUI's navigation need, found in raw bytes without parsing steps.

    ``ok_before`` is the number of successful step records between the previous
    marker of the same scan and this one: the fold counts steps from it, so a scan
    never parses a step line.
    """

    seq: int
    kind: str
    """``Kind.CHECKPOINT``, ``Kind.ROLLBACK``, ``Kind.START``, :data:`ERROR` or :data:`STEPS`."""
    name: str = ""
    """Checkpoint: its name; rollback: the checkpoint it names; error: the step."""
    file: str = ""
    attempt: int | None = None
    checkpoint_seq: int | None = None
    """Rollback: the ``checkpoint_seq`` field as written."""
    target_seq: int | None = None
    """Rollback, set by the fold: the checkpoint it returned to (-1: the start; ``None``: none, a problem)."""
    ok_before: int = 0


FoldInput = Entry | LazyRecord | Marker
"""What a fold takes: a parsed record or bad line, a lazy step line, or a scan marker."""


@dataclass
class Branch:
    """Records abandoned by the rollback at ``rollback_seq``."""

    rollback_seq: int
    checkpoint: str | None
    records: list[Record]


@dataclass
class History:
    """A journal folded into its effective history and abandoned branches.

    Concurrent steps: ``steps`` is in ``pos`` order (call order; records with the
    same ``pos`` in file order), whatever order their records were committed in;
    :meth:`in_flight_steps`
    gives the begins that have no step yet, :attr:`concurrent` says whether any
    two steps overlapped. For a sequential journal ``steps[i]["pos"] == i``.
    """

    entries: list[Entry]
    effective: list[Record] = field(default_factory=list)
    steps: list[Record] = field(default_factory=list)
    """Successful steps of the effective history in ``pos`` order (sequential code: ``steps[pos]``)."""
    branches: list[Branch] = field(default_factory=list)
    problems: list[BadLine] = field(default_factory=list)
    checkpoints: list[Record] = field(default_factory=list)
    """Checkpoint records of the effective history, in order."""
    rollbacks: list[Record] = field(default_factory=list)
    """Rollback records of the effective history, in order (one naming no checkpoint included)."""
    pauses: list[Record] = field(default_factory=list)
    """``pause`` and ``choice`` records, in order (a fold that keeps its history): ``core.pauses``."""
    damaged: list[Record] = field(default_factory=list)
    """The :data:`DAMAGED` records of the effective history that a resume cannot pass (all but damaged
    ``begin`` and ``start`` lines), in order: the SDK stops at the first."""
    _shape: tuple[int, Shape] | None = field(default=None, repr=False)
    _overlap: bool | None = field(default=None, repr=False)  # the lazy fold's answer to ``concurrent``

    @property
    def abandoned_seqs(self) -> set[int]:
        return {r["seq"] for b in self.branches for r in b.records}

    @property
    def next_pos(self) -> int:
        """The position after the highest of the effective steps (0 without steps)."""
        return int(self.steps[-1]["pos"]) + 1 if self.steps else 0

    def consecutive_failures(self, pos: int | None = None) -> int:
        """Failed attempts of the step at ``pos`` (default: :attr:`next_pos`) since its last success or the
        last rollback; for sequential code also since any later success (as before steps could overlap)."""
        pos = self.next_pos if pos is None else pos
        n = 0
        concurrent: bool | None = None
        for r in reversed(self.effective):
            kind = r.get("kind")
            if kind == Kind.ROLLBACK:
                break
            if kind == Kind.STEP:
                if r.get("error") is None:
                    if r.get("pos") == pos:
                        break
                    if concurrent is None:
                        concurrent = self.concurrent
                    if not concurrent:
                        break
                elif r.get("pos") == pos and not r.get("transient"):
                    n += 1
        return n

    def pairing(self) -> Pairing:
        """The begins of the effective history paired with their steps (:class:`Pairing`)."""
        p = Pairing()
        for r in self.effective:
            p.add(r)
        return p

    @property
    def concurrent(self) -> bool:
        """Whether two steps of the effective history overlapped (a begin came while another was in flight).

        The SDK's resume view has no begins: there the fold's look at the files' bytes answers."""
        if self._overlap is not None:
            return self._overlap
        return self.pairing().overlapped

    def in_flight_steps(self) -> list[Record]:
        """The ``begin`` records, in ``pos`` order, of the steps of the last process attempt that have no
        ``step`` record (running now, or interrupted by a crash if the process is gone)."""
        return sorted(self.pairing().open.values(), key=lambda r: (r.get("pos", -1), r["seq"]))

    def in_flight(self) -> Record | None:
        """The first of :meth:`in_flight_steps` (the step a crash interrupted, for sequential code), or ``None``."""
        fl = self.in_flight_steps()
        return fl[0] if fl else None

    def find_checkpoint(self, ref: str) -> Record | None:
        """The latest effective checkpoint whose name, file or seq is ``ref``."""
        return _find_checkpoint(self.checkpoints, ref)


def _find_checkpoint(cps: list[Record], ref: str) -> Record | None:
    for r in reversed(cps):
        if ref in (r.get("name"), r.get("file"), str(r.get("seq"))):
            return r
    return None


class Fold:
    """The one incremental fold: feed entries in journal order, read the effective history as it grows.

    ``keep=True`` builds the :class:`History` (every entry, the effective records,
    the steps by position, the abandoned branches). ``keep=False`` is a counting
    fold: it keeps only the effective checkpoints and rollbacks and the counters,
    so a process that follows a journal for days keeps flat memory; it also takes
    the TUI scan's :class:`Marker` s (a checkpoint or rollback marker becomes a
    small record with the fields the fold reads).
    """

    def __init__(self, keep: bool = True) -> None:
        self._known: Mapping[Any, bool] = {}  # the overlap verdicts given to extend() (ResumeView.overlaps)
        self._reset(keep)

    def _reset(self, keep: bool) -> None:
        self.keep = keep
        self.step_count = 0
        """Successful steps in the effective history."""
        self.problem_count = 0
        """Bad lines and rollbacks that name no effective checkpoint."""
        self.last_target: int | None = None
        """The seq of the checkpoint the last rollback returned to (-1: the start; ``None``: a problem)."""
        self._history = History([])
        self.checkpoints: list[Record] = self._history.checkpoints
        """Effective checkpoint records, in order."""
        self.rollbacks: list[Record] = self._history.rollbacks
        """Effective rollback records, in order."""
        self.damaged: list[Record] = self._history.damaged
        """The damaged lines of the effective history a resume cannot pass (``History.damaged``)."""
        self._cp_ok: list[int] = []  # successful steps before each effective checkpoint
        self._cp_at: list[int] = []  # keep: the index of each effective checkpoint in ``effective``
        self._rb_cps: list[int] = []  # effective checkpoints before each effective rollback
        self.rollback_total = 0
        """Every rollback record folded, abandoned ones included: a limit on rollbacks counts these
        (each rollback to the same checkpoint abandons the one before, so the effective ones stay at 1)."""
        self.cuts: list[tuple[int, int]] = []
        """``(target seq, rollback seq)`` of every rollback that cut, abandoned ones too (for :class:`Shape`)."""
        self._top = -1  # keep: the highest pos among ``steps`` (-1: none)
        self._ordered = True  # keep: ``steps`` in pos order is also file order (a rollback cuts its tail)
        self._exact = False  # keep: read every lazy step line's pos from its bytes (see wire.AFTER_BEGIN)
        self._src: Any = None  # keep: the mapped file of the last lazy step (checked for overlapping steps)
        self._overlapping = False  # keep: a mapped file shows overlapping steps
        self._lazy_lasts: list[LazyRecord] = []  # keep: the last lazy step of each file, not checked yet

    @property
    def history(self) -> History:
        """The folded history (``keep=True`` only)."""
        if not self.keep:
            raise ValueError("a counting fold (keep=False) keeps no history")
        return self._history

    def find_checkpoint(self, ref: str) -> Record | None:
        """The latest effective checkpoint whose name, file or seq is ``ref``."""
        return _find_checkpoint(self.checkpoints, ref)

    def stop_keeping(self) -> None:
        """Go on as a counting fold (``keep=False``) and let go of the records kept so far.

        The effective checkpoints and rollbacks, the counters and the cuts stay: the
        SDK calls it once it runs live, so a run of millions of steps keeps flat memory.
        """
        if not self.keep:
            return
        h = self._history
        self.keep = False
        self.step_count = len(h.steps)
        self._history = History([], checkpoints=h.checkpoints, rollbacks=h.rollbacks, damaged=h.damaged)
        self._cp_at.clear()
        self._src, self._known, self._lazy_lasts = None, {}, []  # keep-only: they held the resume view's map open

    @property
    def steps_after_checkpoint(self) -> int:
        """Successful steps after the latest effective checkpoint (all of them without one)."""
        return self.step_count - (self._cp_ok[-1] if self._cp_ok else 0)

    def add(self, entry: FoldInput) -> None:
        """Fold one more entry (the next in journal order)."""
        if self.keep and type(entry) is dict:  # the SDK's path after each live step: no batch machinery
            self._history.entries.append(entry)
            self._record(entry)
            return
        self.extend((entry,))

    def extend(self, entries: Iterable[FoldInput], overlaps: Mapping[Any, bool] | None = None) -> None:
        """Fold entries in journal order (the loop is inlined for the resume of a million steps).

        With ``keep=True`` the first list given becomes ``history.entries`` itself
        (not a copy: a million pointers), and later entries are appended to it.
        ``overlaps``: the read's verdicts on the files' maps (:attr:`journal_reader.ResumeView.overlaps`);
        a map without one is checked by its bytes.
        """
        if self.keep:
            self._extend_keep(entries, {} if overlaps is None else overlaps)
        else:
            self._count(entries)

    def _extend_keep(self, entries: Iterable[FoldInput], overlaps: Mapping[Any, bool]) -> None:
        """:meth:`extend` of a fold that keeps its history."""
        self._known = overlaps
        h = self._history
        if isinstance(entries, list) and not h.entries and not h.effective:
            h.entries = entries  # the first batch: keep the caller's list, no copy of a million pointers
            self._fold_keep(entries, h)
        else:
            entries = list(entries)
            h.entries.extend(cast(list[Entry], entries))
            self._fold_keep(entries, h)
        if self._lazy_lasts and not self._exact and not self._lazy_in_order():
            self._refold_exact()
        if self._src is not None:  # the resume view (no begin lines): the files' bytes told
            self._history._overlap = self._overlapping

    def _count(self, entries: Iterable[FoldInput]) -> None:
        """:meth:`extend` of a counting fold (``keep=False``)."""
        e: Any
        for e in entries:
            t = type(e)
            if t is LazyRecord:
                if e.kind == _STEP:
                    self.step_count += 1
            elif t is Marker:
                self._marker(e)
            elif t is BadLine:
                self.problem_count += 1
                if e.holds_step:
                    self.step_count += 1  # a damaged line keeps its step position
            else:
                self._record(e)

    def _fold_keep(self, entries: Iterable[FoldInput], h: History) -> None:
        eff = h.effective
        steps = h.steps
        top = self._top
        exact = self._exact
        src = self._src
        lasts = self._lazy_lasts
        e: Any
        for e in entries:
            t = type(e)
            if t is LazyRecord:  # the resume fast path: no parsing, no dict lookups
                if e.src is not src:
                    src = self._src = e.src
                    lasts.append(e)
                    if _overlaps(src, self._known):
                        self._overlapping = True
                        self._exact = exact = True  # refolded at the end of extend()
                else:
                    lasts[-1] = e
                p = _lazy_pos(e, top + 1) if exact else top + 1
                e.pos = p
                if p >= top:
                    steps.append(e)
                    top = p
                else:
                    self._insert_step(e, p)
                eff.append(e)
                continue
            if t is dict:
                kind = e.get("kind", _STEP)
                if kind == _STEP and e.get("error") is None:
                    p = e.get("pos")
                    if type(p) is not int:
                        p = e["pos"] = top + 1
                    if p >= top:
                        steps.append(e)
                        top = p
                    else:
                        self._insert_step(e, p)
                    eff.append(e)
                    continue
                if kind != _ROLLBACK and kind != _CHECKPOINT:  # begin, start, note, fork, a failed step
                    if kind in (_PAUSE, _CHOICE):
                        h.pauses.append(e)
                    if type(e.get("pos")) is not int:
                        e["pos"] = top + 1
                    eff.append(e)
                    continue
                self.step_count = len(steps)
                self._top = top
                self._record(e)
                top = self._top
                continue
            if t is BadLine:
                h.problems.append(e)
                self.problem_count += 1
                if not e.foreign:
                    self._top = top
                    self._damaged(e, h)
                    top = self._top
                continue
            if t is Marker:
                raise TypeError("markers carry no records: fold them with Fold(keep=False)")
            # a LazyRecord or dict subclass
            self.step_count = len(steps)
            self._top = top
            self._record(e.record() if isinstance(e, LazyRecord) else e)
            top = self._top
        self._top = top
        self.step_count = len(steps)

    def _insert_step(self, e: Any, pos: int) -> None:
        """A step whose ``pos`` is below the highest so far (committed out of call order): put it in place."""
        steps = self._history.steps
        steps.insert(bisect.bisect_right(steps, pos, key=_pos_of), e)
        self._ordered = False

    def _lazy_in_order(self) -> bool:
        """Whether each file's last lazy step line (so far) carries the pos the fold gave it (none skipped)."""
        lasts = self._lazy_lasts
        for last in lasts:
            m = wire.STEP_POS.match(last.src, last.start, last.end)
            if m is not None and int(m.group(1)) != last.pos:
                return False
        del lasts[:-1]  # the current file's last step may still change
        return True

    def _refold_exact(self) -> None:
        """Fold the entries again, every lazy step line's pos read from its bytes (overlapping steps)."""
        entries = self._history.entries
        self._reset(True)
        self._exact = True
        self._history.entries = entries
        self._fold_keep(entries, self._history)

    def _damaged(self, bad: BadLine, h: History) -> None:
        """A damaged line keeps its place: a :data:`DAMAGED` record in the effective history, and a step
        position if it may have been a step (:func:`records.damaged_holds_step`), so nothing after it shifts.
        Its position: the ``pos`` its bytes still show, else the one after the highest so far."""
        rec = bad.record()
        m = wire.TEXT_POS.search(bad.text)
        rec["pos"] = int(m.group(1)) if m else self._top + 1
        if rec["holds_step"]:
            if rec["pos"] >= self._top:
                h.steps.append(rec)
                self._top = rec["pos"]
            else:
                self._insert_step(rec, rec["pos"])
        h.effective.append(rec)
        if not bad.harmless:
            h.damaged.append(rec)
        self.step_count = len(h.steps)

    def _record(self, e: Record) -> None:
        """Fold one parsed record (in keep mode ``step_count`` is ``len(steps)`` on entry)."""
        kind = e.get("kind", _STEP)
        keep = self.keep
        if kind == _STEP and e.get("error") is None:
            if keep:
                p = e.get("pos")
                if type(p) is not int:
                    p = e["pos"] = self._top + 1
                if p >= self._top:
                    self._history.steps.append(e)
                    self._top = p
                else:
                    self._insert_step(e, p)
                self._history.effective.append(e)
            self.step_count += 1
            return
        if kind == _ROLLBACK:
            self._rollback(e)
        elif kind == _CHECKPOINT:
            self._cp_ok.append(self.step_count)
            if keep:
                self._cp_at.append(len(self._history.effective))
            self.checkpoints.append(e)
        if keep:
            if type(e.get("pos")) is not int:
                e["pos"] = self._top + 1
            self._history.effective.append(e)

    def _rollback(self, rb: Record) -> None:
        """Cut the effective history back to the checkpoint ``rb`` names, then count ``rb`` as effective."""
        self.rollback_total += 1
        i = self._target(rb)
        if i is None:
            self.last_target = None
            self.problem_count += 1
            if self.keep:
                self._history.problems.append(BadLine("journal", 0, rb["seq"], MISSING_TARGET, ""))
        else:
            n_ok = self._cp_ok[i] if i >= 0 else 0
            self.last_target = int(self.checkpoints[i]["seq"]) if i >= 0 else -1
            self.cuts.append((self.last_target, int(rb["seq"])))
            if self.keep:
                self._cut(rb, i, n_ok, self.last_target)
            del self.checkpoints[i + 1 :]
            del self._cp_ok[i + 1 :]
            rbs = self._rb_cps
            while rbs and rbs[-1] > i:  # rollbacks after the checkpoint are on the abandoned branch
                rbs.pop()
                self.rollbacks.pop()
            self.step_count = n_ok
        self.rollbacks.append(rb)
        self._rb_cps.append(len(self.checkpoints))

    def _cut(self, rb: Record, i: int, n_ok: int, target_seq: int) -> None:
        """A kept history's part of a rollback to checkpoint ``i`` (-1: the start): the records after it become
        a branch; the steps before it (``n_ok`` of them) stay."""
        h = self._history
        cut = self._cp_at[i] + 1 if i >= 0 else 0
        h.branches.append(Branch(rb["seq"], rb.get("checkpoint"), h.effective[cut:]))
        if h.damaged and cut < len(h.effective):
            first_cut = h.effective[cut]["seq"]
            h.damaged[:] = [d for d in h.damaged if d["seq"] < first_cut]
        del h.effective[cut:]
        if self._ordered:
            del h.steps[n_ok:]
        else:  # steps in pos order are not in file order: keep those before the checkpoint
            h.steps[:] = [r for r in h.steps if r["seq"] < target_seq]
        self._top = int(h.steps[-1]["pos"]) if h.steps else -1
        del self._cp_at[i + 1 :]

    def _target(self, rb: Record) -> int | None:
        """Index in ``checkpoints`` of the checkpoint a rollback names; -1 for the start of the run."""
        cp_seq = rb.get("checkpoint_seq")
        name = rb.get("checkpoint")
        if cp_seq is None and name in (None, "", "start"):
            return -1
        cps = self.checkpoints
        for i in range(len(cps) - 1, -1, -1):
            r = cps[i]
            if cp_seq is not None:
                if r.get("seq") == cp_seq:
                    return i
            elif name in (r.get("name"), r.get("file")):
                return i
        return None

    def _marker(self, m: Marker) -> None:
        self.step_count += m.ok_before
        if m.kind == DAMAGED:
            self.problem_count += 1
            if damaged_holds_step(m.name):
                self.step_count += 1
        elif m.kind == Kind.CHECKPOINT:
            self._record({"kind": Kind.CHECKPOINT, "seq": m.seq, "name": m.name, "file": m.file})
        elif m.kind == Kind.ROLLBACK:
            self._record({"kind": Kind.ROLLBACK, "seq": m.seq, "checkpoint": m.name, "checkpoint_seq": m.checkpoint_seq})
            m.target_seq = self.last_target
        # start, error (a failed step) and steps markers only carry their ok_before


def _pos_of(r: Any) -> int:
    return r.pos if type(r) is LazyRecord else int(r["pos"])


def _overlaps(src: Any, known: Mapping[Any, bool]) -> bool:
    """Whether a mapped journal file shows overlapping steps: the resume view's read has told it from the
    lines (``known``: :attr:`journal_reader.ResumeView.overlaps`), else the rule walks the file's bytes."""
    verdict = known.get(src)
    return wire.overlaps(src) if verdict is None else verdict


def _lazy_pos(e: LazyRecord, count: int) -> int:
    """The ``pos`` a lazy step line carries (``count`` if its bytes do not show one where the writer puts it)."""
    m = wire.STEP_POS.match(e.src, e.start, e.end)
    return int(m.group(1)) if m is not None else count


def fold(entries: Iterable[Entry]) -> History:
    """Fold rollbacks into the effective history; give every record its ``pos``."""
    f = Fold()
    f.extend(entries)
    return f.history


def load(source: Path) -> History:
    """Read and fold a run directory's journal (or a bare ``.jsonl`` file)."""
    return fold(JournalReader(source).load())


def shape_of(entries: Iterable[Any]) -> Shape:
    """The snapshots and rollback cuts of a journal's records, for a :class:`StateCursor`."""
    return fold_shape(entries)[0]


def fold_shape(entries: Iterable[Any]) -> tuple[Shape, Fold]:
    """:func:`shape_of`, with the counting fold of the checkpoints and rollbacks (its ``problem_count``
    says how many rollbacks named no checkpoint among ``entries``)."""
    f = Fold(keep=False)
    cps: list[tuple[int, str]] = []
    for e in entries:
        if type(e) is dict:
            k = e.get("kind")
            if k == Kind.CHECKPOINT:
                f.add(e)
                if e.get("file"):
                    cps.append((int(e["seq"]), str(e["file"])))
            elif k == Kind.ROLLBACK:
                f.add(e)
    return Shape(tuple(cps), tuple(f.cuts)), f


def state_at(
    run_dir: Path, history: History, seq: int, *, after_result: bool = False, problems: list[str] | None = None
) -> Any:
    """The agent's state right after the record at ``seq``, abandoned branches included.

    Starts from the latest checkpoint snapshot on the effective path to ``seq``
    and applies the ``state_patch`` of every record after it on that path: what a
    replay up to that record rebuilds (a fork starts there). ``after_result=True``
    is the state as the CLI and the TUI show it: for a step, after its result,
    up to the record that carries what the agent did with it (:meth:`StateCursor.result_seq`).
    ``problems`` collects why a snapshot on the way was not used (missing, damaged: the patches rebuilt it).
    """
    cached = history._shape
    if cached is None or cached[0] != len(history.entries):
        cached = history._shape = (len(history.entries), shape_of(history.entries))
    cursor = StateCursor(run_dir, records=history.entries)
    doc = cursor.state_at(seq, cached[1], after_result=after_result)
    if problems is not None:
        problems.extend(p for p in cursor.problems if p not in problems)
    return doc


def damaged_message(rec: Record, run_dir: Path, checkpoints: list[Record]) -> str:
    """Why a resume stops at the :data:`DAMAGED` record ``rec``, naming the line and how to repair it.

    The repair keeps every position: put the line back as it was (from a backup),
    or roll back to the latest effective checkpoint before it (the steps after that
    checkpoint run again; the damaged line stays in the file, on an abandoned branch).
    """
    where = f"{rec.get('file')}:{rec.get('line')} (seq {rec.get('seq')}"
    offset = rec.get("offset")
    where += f", byte {offset})" if isinstance(offset, int) and offset >= 0 else ")"
    if rec.get("holds_step"):
        name = f" {rec['step']!r}" if rec.get("step") else ""
        what = f"it held step{name} at position {rec.get('pos')}, which cannot be served"
    else:
        what = f"it held a {rec.get('was')!r} record the resume would need"
    before = [c for c in checkpoints if int(c.get("seq", -1)) < int(rec.get("seq", -1))]
    to = str(before[-1]["seq"]) if before else "start"
    label = f"checkpoint {before[-1].get('name')!r}" if before else "the start of the run"
    return (
        f"cannot resume past a damaged journal line: {where} is damaged ({rec.get('reason')}); {what}. "
        f"Repair it: put the line back from a backup, or roll back to {label} before it with "
        f"'agent-supervisor rollback {run_dir} --to {to}' (the steps after it run again)"
    )


def describe(rec: Record) -> str:
    """A short human label of a record for messages: ``#12 step search:q2``."""
    kind = rec.get("kind", Kind.STEP)
    label = step_name(rec) if kind in (Kind.STEP, Kind.BEGIN) else rec.get("name") or rec.get("checkpoint") or ""
    return f"#{rec.get('seq')} {kind} {label}".rstrip()


def rollback_record(target: Record | None, reason: str, *, by: str, failed_step: str | None = None) -> Record:
    """The record that rolls the effective history back to checkpoint ``target`` (``None``: the start).

    Every writer of rollbacks (the SDK's failure policy, the supervisor, the CLI,
    the TUI) builds it here, so they all fold the same way.
    """
    rec: Record = {
        "kind": Kind.ROLLBACK,
        "checkpoint": target.get("name") if target else None,
        "checkpoint_seq": target.get("seq") if target else None,
        "reason": reason,
        "by": by,
    }
    if failed_step is not None:
        rec["failed_step"] = failed_step
    return rec
