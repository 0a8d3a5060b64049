"""What the timeline shows, kept small enough for a million-record journal (no Textual here).

The model never holds every record. It keeps:

- the number of records and a bounded cache of parsed records near the screen
  (``tail(n)`` fills it for the first screen, ``get_range`` after the index);
- the seq ranges a rollback abandoned (a later rollback cut them off);
- one bit per record: the folded begins, and with a filter the records that pass it and
  their rows (:class:`SeqBits`, with a running count per 512 records for rank and select);
  the reader's index keeps where every 64th line starts. Nothing else grows with the
  journal: under a live load the model gains some 0.4 byte a record (0.7 with a filter);
- the seqs of the few records that matter for navigation and folding:
  checkpoints, rollbacks, errors and process starts, found in the raw bytes
  (``scan.py``, C speed) and parsed one by one;
- supervisor events (``supervisor.jsonl``), placed between records by attempt;
- the proxy's model calls (``llm.jsonl``, ``timeline_calls``), placed between records by time: held whole
  (they are few, and their detail is shown from memory), none read when the run has no such file.

Events and calls are the rows between records: one list of them in row order, each before a seq
(``timeline_between``).

One row per step: a ``begin`` record whose ``step`` record exists (paired by
``pos``, however many records of concurrent steps come between: the scan's
:class:`StepPairs`) has no row of its own, its step's row stands for both; a
step in flight keeps its begin row (running). ``show_begins`` gives every
record its row again. Rows map to seqs through the hidden seqs' rank and select.

Folding is ``history.Fold`` (``keep=False``) fed with the scan's markers, which
carry the number of successful steps between them: the effective step count is
exact, and a rollback to checkpoint ``c`` at ``r`` abandons ``c < seq < r``.
The state at a point is a ``StateCursor`` with its own reader.

Nested steps: ``timeline_tree`` (a run without them never reads for them, and maps rows as above).

A filter (``filters.RowFilter``) shows only the rows that pass it: the seqs a
worker found (``set_filter``/``add_filtered``, in seq order) less the folded
begins, and the supervisor rows that pass, placed as without a filter.
"""

from __future__ import annotations

import bisect
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.cursor import Shape, StateCursor
from ..core.history import ERROR, STEPS, Fold, fold_shape
from ..core.journal_reader import Entry, JournalReader
from ..core.pairing import Pairing
from ..core.records import DAMAGED, BadLine, Kind
from ..errors import JournalError
from .files import FilesIndex
from .scan import (
    CHANGED_INPUTS,
    Marker,
    Region,
    ScanResult,
    SeqBits,
    StepPairs,
    add_marker,
    scan_positions,
)
from .timeline_between import BetweenRows
from .timeline_calls import Call, CallsFollower, CallsRead
from .timeline_events import Event, place
from .timeline_read import Changes, LiveSide
from .timeline_tree import NestedRows, StepTree
from .timeline_worker import read_calls, read_changes, read_events_changed, run_files
from .timeline_worker import seq_of as _seq

if TYPE_CHECKING:
    # a filter is made when one is applied: not imported on the first screen's path
    from .filters import RowFilter

CACHE_MAX = 4_000
"""Parsed records kept (the screen's and a few screens around it; a live load parses the last 200 at each read):
the oldest half is let go past it. 20,000 made a live dashboard's memory swing by some 30 MB."""
REGION_MAX = 4 * 1024 * 1024
"""Live reads' regions are merged up to this many bytes (the search reads a region at a time)."""
STILL_INDEXING = "the journal is still being indexed; the state appears in a moment"


class TimelineModel(NestedRows):
    """Rows of the timeline: journal records with supervisor events between them.

    Call ``open()`` first (cheap: the tail only), ``adopt(scan_journal(...))`` from
    a worker for navigation and abandoned-branch dimming, then, when files change,
    ``read_changes()`` in a worker and ``apply()`` on the UI thread (``poll()`` does both).
    """

    def __init__(self, source: Path, tail_rows: int = 200) -> None:
        self.source = source
        self.run_dir = source if source.is_dir() else source.parent
        self.tail_rows = tail_rows
        self.reader = JournalReader(source)
        self.count = 0
        self.cache: dict[int, Entry | None] = {}
        self.indexed = False
        self.scanned = False
        self._cut_lo: list[int] = []
        self._cut_hi: list[int] = []
        """The abandoned seqs: ``_cut_lo[i] <= seq < _cut_hi[i]``, sorted, disjoint (a range a rollback)."""
        self.markers: list[Marker] = []
        self.checkpoint_seqs: list[int] = []
        self.error_seqs: list[int] = []
        self.rollback_seqs: list[int] = []
        self.start_seqs: dict[int, int] = {}  # attempt -> seq of its start record
        self.step_records = 0
        self.fold = Fold(keep=False)
        """The one fold, of the scan's markers (after ``adopt``): effective steps, checkpoints, cuts."""
        self.shape = Shape()
        """Snapshots and rollback cuts for the state cursor: replaced, never changed, so workers may read it."""
        self._snapshots: list[tuple[int, str]] = []
        self.events: list[Event] = []
        self._events_raw: list[dict[str, Any]] = []
        self.regions: list[Region] = []
        """Byte regions of the journal with their first seq (the search reads by region)."""
        self._live: queue.Queue[LiveSide] = queue.Queue(maxsize=1)
        self._live_gen = 0
        self._events_size = -1  # the size of supervisor.jsonl when the events shown were read
        self.applied_reads = 0
        """Reads applied since the live side last started over (after the scan: 1 means caught up)."""
        self._reset_live(JournalReader(source), indexed=False, count=0)
        self._cursor = StateCursor(self.run_dir, source)  # its own reader: state_at runs in workers
        self._state_lock = threading.Lock()
        self.deleted = False
        self.read_error: str | None = None
        """Why records could not be read (the journal shrank or was rewritten under the dashboard), once seen."""
        self.exited_attempts: set[int] = set()
        """Process attempts the supervisor saw exit (its ``exit`` events): their steps in flight were interrupted."""
        self._tail_markers: list[Marker] = []
        self.bad_seqs: set[int] = set()
        """Lines seen so far that are not JSON objects (the status bar counts them)."""
        self._hidden = SeqBits()
        self.show_begins = False
        """Every record its own row (the toggle): begins are shown beside their steps."""
        self.changed_inputs: dict[int, str] = {}
        """Steps served with changed inputs (the SDK's note): ``pos`` -> step name."""
        self._pairing = Pairing()  # before the scan: the parsed records' begins paired with their steps
        self.filter: RowFilter | None = None
        """The filter the rows pass (``None``: every row)."""
        self.filter_seqs = SeqBits()
        """Seqs of the records that pass the filter, folded begins too (a bit a record)."""
        self._fvis = SeqBits()  # filter_seqs less the folded begins: the records' rows
        self.calls: list[Call] = []
        """The proxy's calls and divergence notes (``llm.jsonl``), in row order."""
        self.served: dict[int, list[int]] = {}
        """A call's seq in ``llm.jsonl`` -> the attempts the proxy answered from its record (its served notes)."""
        self._between = BetweenRows()
        """The rows of the events and calls among the records' rows."""
        self.files = FilesIndex()
        """The workspace's changes (``files`` events of ``supervisor.jsonl``), by the records they belong to."""
        self.tree: StepTree | None = None
        """The steps' nesting, once a record read for the screen was nested (``None``: none was)."""
        self.on_nested: Callable[[], None] | None = None
        """Called when the first nested record is read: the reading worker has the tree to read (``_see``)."""

    # ------------------------------------------------------------------ loading
    def open(self) -> None:
        """Read the last screen of records and the supervisor events."""
        try:
            tail = self.reader.tail(self.tail_rows)
        except OSError:
            tail = []
        for ent in tail:
            if type(ent) is BadLine:
                self.bad_seqs.add(ent.seq)  # tail() gives its real line number
            self.cache[_seq(ent)] = ent
        if tail:
            self.count = _seq(tail[-1]) + 1
        else:
            self.count = 0
        for ent in tail:
            if not isinstance(ent, BadLine):
                add_marker(ent, _seq(ent), self._tail_markers)
            elif not ent.foreign:
                self._tail_markers.append(Marker(ent.seq, DAMAGED, ent.was))
        self._apply_markers(self._tail_markers, provisional=True)
        self._pair_parsed(tail)
        self._see(tail)
        self._reset_live(JournalReader(self.source), indexed=False, count=self.count)
        self.load_events()
        self.load_calls()

    def adopt(self, scan: ScanResult) -> None:
        """Take a full scan made in a worker: markers, counts, abandoned flags, regions, the index."""
        self.markers = []
        self.checkpoint_seqs = []
        self.error_seqs = []
        self.rollback_seqs = []
        self.start_seqs = {}
        self._cut_lo, self._cut_hi = [], []
        self.step_records = scan.steps
        self.fold = Fold(keep=False)
        self._snapshots = []
        self.shape = Shape()
        self._apply_markers(scan.markers, provisional=False)
        self.regions = list(scan.regions)
        self.count = scan.count  # the next read_changes() brings count, markers and cache up to date
        self.scanned = True
        if scan.reader is not None:
            self.reader = scan.reader  # indexed in the worker
        self.indexed = True
        self._set_hidden(scan.folded if scan.folded is not None else SeqBits(scan.pairs.hidden))
        self.changed_inputs = dict(scan.pairs.changed)
        pairs = scan.pairs.copy()
        pairs.hidden.clear()
        self._reset_live(
            self.reader.twin(),  # the worker's reader: the same line offsets, its own everything else
            indexed=True,
            count=scan.count,
            scan_pos=scan_positions(scan.regions, scan.count),
            scanned=scan.count,
            pairs=pairs,
        )
        self.place_events()

    def _apply_markers(self, markers: list[Marker], *, provisional: bool) -> None:
        """Take markers in seq order; after the scan (not ``provisional``) the fold counts and cuts with them."""
        shape_changed = False
        for m in markers:
            if m.kind == STEPS:  # only successful steps: for the fold
                if not provisional:
                    self.fold.add(m)
                continue
            if provisional and any(x.seq == m.seq for x in self.markers):
                continue
            self.markers.append(m)
            if not provisional:
                self.fold.add(m)  # counts the steps before it; resolves a rollback's checkpoint
            shape_changed |= self._index_marker(m, provisional)
        if shape_changed:
            self.shape = Shape(tuple(self._snapshots), tuple(self.fold.cuts))

    def _index_marker(self, m: Marker, provisional: bool) -> bool:
        """File a marker under its kind's seqs; whether the state cursor's shape changed (a snapshot, a cut)."""
        if m.kind == Kind.CHECKPOINT:
            bisect.insort(self.checkpoint_seqs, m.seq)
            if m.file and not provisional:
                self._snapshots.append((m.seq, m.file))
                return True
        elif m.kind == ERROR:
            bisect.insort(self.error_seqs, m.seq)
        elif m.kind == Kind.START and m.attempt is not None:
            self.start_seqs.setdefault(m.attempt, m.seq)
        elif m.kind == Kind.ROLLBACK:
            bisect.insort(self.rollback_seqs, m.seq)
            if not provisional:
                self._mark_abandoned(m)
                return True
        elif m.kind == DAMAGED:
            self.bad_seqs.add(m.seq)  # a damaged line the scan found (the fold gave it its step position)
        return False

    def _mark_abandoned(self, m: Marker) -> None:
        """Mark what rollback ``m`` abandoned (the fold resolved its checkpoint into ``m.target_seq``)."""
        target = m.target_seq
        if target is None:
            return  # names no effective checkpoint: the fold reports it as a problem, nothing is cut
        lo, hi = target + 1, m.seq
        if lo >= hi:
            return
        # merged with the ranges it touches: they stay sorted and disjoint
        i = bisect.bisect_left(self._cut_hi, lo)
        j = bisect.bisect_right(self._cut_lo, hi)
        if i < j:
            lo, hi = min(lo, self._cut_lo[i]), max(hi, self._cut_hi[j - 1])
        self._cut_lo[i:j] = [lo]
        self._cut_hi[i:j] = [hi]

    @property
    def effective_steps(self) -> int:
        """Successful steps in the effective history (as ``history.fold(...).steps``), exact after the scan."""
        return self.fold.step_count

    def marker(self, seq: int) -> Marker | None:
        for m in self.markers:
            if m.seq == seq:
                return m
        return None

    def is_abandoned(self, seq: int) -> bool:
        i = bisect.bisect_right(self._cut_lo, seq) - 1
        return i >= 0 and seq < self._cut_hi[i]

    def abandoned_count(self, start: int, stop: int) -> int:
        """How many of the seqs ``start`` to ``stop`` (exclusive) are abandoned."""
        i = bisect.bisect_right(self._cut_hi, start)
        n = 0
        while i < len(self._cut_lo) and self._cut_lo[i] < stop:
            n += max(0, min(stop, self._cut_hi[i]) - max(start, self._cut_lo[i]))
            i += 1
        return n

    @property
    def effective_checkpoints(self) -> list[int]:
        return [s for s in self.checkpoint_seqs if not self.is_abandoned(s)]

    # ------------------------------------------------------------------ live
    def _reset_live(
        self, reader: JournalReader, *, indexed: bool, count: int, scan_pos: dict[int, tuple[int, int]] | None = None,
        scanned: int = 0, pairs: StepPairs | None = None,
    ) -> None:
        """Start the worker side over (after the tail, after the scan); a read in flight becomes stale."""
        self._live_gen += 1
        self.applied_reads = 0
        try:
            self._live.get_nowait()
        except queue.Empty:
            pass  # the worker holds it: its changes come back stale and are dropped
        calls = CallsFollower(run_files(self.source, self.run_dir))
        self._live.put(LiveSide(self._live_gen, reader, indexed, count, scan_pos or {}, scanned, self._events_size,
                                pairs or StepPairs(), calls=calls))

    def read_changes(self, timeout: float | None = None) -> Changes | None:
        """Read what was committed since the last read (a worker's half: only I/O, only ``LiveSide``:
        ``timeline_worker.read_changes``).

        Waits up to ``timeout`` seconds for the previous changes to be applied;
        ``None`` if they were not.
        """
        try:
            live = self._live.get(timeout=timeout)
        except queue.Empty:
            return None
        return read_changes(live, self.source, self.run_dir, self.tail_rows, tree=self.tree is not None)

    def load_calls(self) -> bool:
        """Read ``llm.jsonl`` now, on this thread (the first screen: placed among the records read so far; the
        scan's live side reads it again with every record's time); whether the rows changed."""
        live = self._live.get()
        try:
            got = read_calls(live, [e for e in self.cache.values() if e is not None])
        finally:
            self._live.put(live)
        return self._take_calls(got, reset=True)

    def _take_calls(self, got: CallsRead | None, *, reset: bool) -> bool:
        """Take calls read (``reset``: every call of the file, replacing those shown); whether the rows changed."""
        if got is None:
            return False
        if reset:
            self.calls, self.served, self._between.call_pass = [], {}, {}
        for seq, attempts in got.served.items():
            self.served.setdefault(seq, []).extend(attempts)
        if got.rows:
            self.calls.extend(got.rows)
            self.calls.sort(key=lambda c: (c.before, c.ts, c.order))
        self._between.dirty = True
        self._place_event_rows()
        return True

    def apply(self, ch: Changes) -> tuple[int, bool]:
        """Take what ``read_changes`` found (the UI thread's half); return (new records, events changed)."""
        live = ch.live
        if live.gen != self._live_gen:
            return 0, False  # read before the scan was adopted: the new live side reads it again
        try:
            if ch.indexed and self.indexed:
                live.reader, self.reader = self.reader, live.reader
            if ch.deleted:
                self.deleted = True
                return 0, False
            if ch.shrank and not self.read_error:
                self.read_error = ch.shrank
            self.deleted = False
            old = self.count
            if ch.count > old:
                self.count = ch.count
                self._add_regions(ch.regions)
                self.step_records += ch.steps
                self._take_new(old, ch.new, ch.markers)
                if ch.hidden:
                    self.add_hidden(ch.hidden)
                if ch.changed:
                    self.changed_inputs.update(ch.changed)
            tree = ch.tree is not None and self._take_tree(ch.tree)
            if ch.events is not None:
                self._events_raw = ch.events
                self._events_size = ch.events_size
                self.place_events()
            calls = self._take_calls(ch.calls, reset=ch.calls_reset)
            self.applied_reads += 1
            return self.count - old, ch.events is not None or calls or tree
        finally:
            self._live.put(live)

    def _add_regions(self, regions: list[Region]) -> None:
        """Keep the regions of live reads, a region that goes on from the last one merged into it (up to
        ``REGION_MAX`` bytes): a read every few ms under a live load would otherwise add a region each."""
        rs = self.regions
        for r in regions:
            last = rs[-1] if rs else None
            if (
                last is not None and last.ino == r.ino and last.path == r.path and last.end == r.start
                and r.end - last.start <= REGION_MAX
            ):
                rs[-1] = replace(last, end=r.end)
            else:
                rs.append(r)

    def poll(self) -> tuple[int, bool]:
        """Read and apply what was committed since the last call (both halves on this thread)."""
        ch = self.read_changes()
        return self.apply(ch) if ch is not None else (0, False)

    def _take_new(self, old: int, new: list[Entry], scanned: list[Marker] | None) -> None:
        markers: list[Marker] = []
        for ent in new:
            s = _seq(ent)
            self.cache[s] = ent
            if isinstance(ent, BadLine):
                self.bad_seqs.add(s)
                if scanned is None and not ent.foreign:
                    markers.append(Marker(s, DAMAGED, ent.was))
            elif scanned is None:
                add_marker(ent, s, markers)
                if ent.get("kind") == Kind.STEP:
                    self.step_records += 1
        if scanned is not None:
            markers = scanned
        else:
            self._pair_parsed(new)
        self._see(new)
        self._apply_markers(markers, provisional=not self.scanned)
        if len(self.cache) > CACHE_MAX:
            self._trim_cache()

    def _trim_cache(self) -> None:
        keep = sorted(self.cache)[-CACHE_MAX // 2 :]
        self.cache = {k: self.cache[k] for k in keep}

    # ------------------------------------------------------------------ events
    def load_events(self) -> bool:
        """Read ``supervisor.jsonl`` now, on this thread (the first screen); return whether the rows changed."""
        live = self._live.get()
        try:
            events = read_events_changed(live, self.source, self.run_dir)
        finally:
            self._live.put(live)
        if events is None:
            return False
        self._events_raw = events
        self._events_size = live.events_size
        self.place_events()
        return True

    def place_events(self) -> None:
        """Put each event before the journal's start record of the attempt it leads to (``timeline_events.place``)."""
        self.events = place(self._events_raw, self.start_seqs, self.count, self.scanned, self._refine_by_time)
        self.exited_attempts = {a for ev in self._events_raw if ev.get("event") == "exit" and type(a := ev.get("attempt")) is int}
        self.files = FilesIndex(self._events_raw)
        self._between.dirty = True
        self._place_event_rows()

    def _place_event_rows(self) -> None:
        """Number the rows of the events and calls among the records' rows (``timeline_between``)."""
        self._between.place(self.events, self.calls, self.visible_index, self.filter, self._fvis)

    # ------------------------------------------------------------------ filter
    def set_filter(self, flt: RowFilter, seqs: Iterable[int]) -> None:
        """Show only the rows that pass ``flt``: the records at ``seqs`` and the supervisor rows that pass (a
        ``SeqBits`` is taken as it is, not copied: the filter's worker hands over the one it built)."""
        self.filter = flt
        self.filter_seqs = seqs if isinstance(seqs, SeqBits) else SeqBits(seqs)
        self._between.call_pass = {}
        self._rebuild_filtered()

    def add_filtered(self, seqs: list[int]) -> None:
        """More records that pass the filter (a live read: all after those known)."""
        if self.filter is None or not seqs:
            return
        last = self.filter_seqs.last()
        new = [s for s in seqs if s > last]
        self.filter_seqs.add_many(new)
        hides = self.is_hidden if self.tree is None else self.tree.filter_hides(self._hidden, self.show_begins)
        self._fvis.add_many(s for s in new if not hides(s))
        self._place_event_rows()

    def clear_filter(self) -> None:
        self.filter = None
        self.filter_seqs = SeqBits()
        self._fvis = SeqBits()
        self._between.clear_shown()

    def _rebuild_filtered(self) -> None:
        t = self.tree
        if t is not None and len(t.fold_bits):  # in journal order: no row moved, the folds' records left out
            self._fvis = self.filter_seqs.difference(t.filter_hidden(self._hidden, self.show_begins))
        elif self.show_begins or not len(self._hidden):
            self._fvis = self.filter_seqs.copy()
        else:
            self._fvis = self.filter_seqs.difference(self._hidden)
        self._place_event_rows()

    def filtered_records(self) -> SeqBits:
        """The seqs of the records the filter shows (their rows, in order), as a copy of its bitmap: taken in C on
        the UI thread, walked by a worker (a million members take a quarter of a second to walk)."""
        return self._fvis.copy()

    def filtered_events(self) -> list[int]:
        """Indexes into ``events`` of the supervisor rows the filter shows, in order."""
        return list(self._between.shown_events)

    def filtered_calls(self) -> list[int]:
        """Indexes into ``calls`` of the call rows the filter shows, in order."""
        return list(self._between.shown_calls)

    def passes(self, seq: int) -> bool:
        """Whether record ``seq`` has a row (it passes the filter, and is not a folded begin)."""
        if self.filter is None:
            return not self.is_hidden(seq)
        return seq in self._fvis

    def error_event_rows(self) -> list[int]:
        """Rows between records that are errors (the supervisor's crashes, hangs, give-ups; failed model calls), in order."""
        return self._between.error_rows(self.events, self.calls, self.filter is not None)

    # ------------------------------------------------------------------ one row per step
    def _pair_parsed(self, entries: list[Entry]) -> None:
        """Pair the begins among parsed records (before the scan: the tail, then what live reads parse)."""
        p = self._pairing
        before = set(p.paired)
        for ent in entries:
            if not isinstance(ent, BadLine):
                p.add(ent)
                if ent.get("kind") == Kind.NOTE and ent.get("message") == CHANGED_INPUTS and isinstance(ent.get("pos"), int):
                    self.changed_inputs[ent["pos"]] = str(ent.get("step") or "")
        new = [s for s in p.paired if s not in before]
        if new:
            self.add_hidden(new)

    @property
    def hidden(self) -> SeqBits:
        """The seqs of the begins whose step record exists: no row of their own unless ``show_begins``."""
        return self._hidden

    @hidden.setter
    def hidden(self, seqs: Iterable[int]) -> None:
        self._hidden = seqs if isinstance(seqs, SeqBits) else SeqBits(seqs)

    def _set_hidden(self, seqs: Iterable[int]) -> None:
        self.hidden = seqs
        if self.tree is not None:
            self.tree.regone(self._hidden, self.show_begins)
        self._refold()

    def add_hidden(self, seqs: list[int]) -> None:
        """Fold more begins into their steps' rows (concurrent steps: not always after the last one)."""
        if self._hidden.add_many(seqs):
            t = self.tree
            if t is not None and not self.show_begins:
                t.add_hidden(seqs)
            if self.filter is not None and not self.show_begins:
                self._fvis.discard_many(seqs)
            self._place_event_rows()

    def toggle_begins(self) -> None:
        """Show the begin rows folded into their steps' rows, or fold them again."""
        self.show_begins = not self.show_begins
        if self.tree is not None:
            self.tree.regone(self._hidden, self.show_begins)
        self._refold()

    def is_hidden(self, seq: int) -> bool:
        """Whether the record at ``seq`` has no row: a begin folded into its step's row (and begins are folded),
        a folded parent's descendant."""
        t = self.tree
        if t is not None and t.gone is not None:
            return t.no_row(seq, self.show_begins)
        return not self.show_begins and seq in self._hidden

    @property
    def ranges(self) -> bool:
        """Rows show the seqs they stand for (``3-4``: a folded begin and its step): begins folded, no filter (its
        gaps are its own, its bar says so), no nested row out of seq order."""
        return not self.show_begins and self.filter is None and len(self._hidden) > 0 and not (self.tree and self.tree.moved)

    def first_seq_of_row(self, seq: int, limit: int = 4096) -> int:
        """The first seq record ``seq``'s row stands for: the folded begins right before it (``:`` on any goes to
        it), so the numbers down the rows skip none; ``seq`` when none or without :attr:`ranges`."""
        first = seq
        while self.ranges and first > 0 and seq - first < limit and (first - 1) in self._hidden:
            first -= 1
        return first

    def is_folded_begin(self, seq: int) -> bool:
        """A begin folded into its step's row: a search goes to the step's row, never turns begin rows on."""
        return not self.show_begins and seq in self._hidden

    def visible_index(self, seq: int) -> int:
        """The row of record ``seq`` among the records' rows (a folded begin: its step's, the next row; a finished
        parent's step: its begin's)."""
        t = self.tree
        if t is not None and t.gone is not None:
            return t.row_index(seq, self.show_begins)
        return seq if self.show_begins else seq - self._hidden.rank(seq)

    def seq_at(self, index: int) -> int:
        """The seq of the record at visible index ``index`` (the inverse of :meth:`visible_index`)."""
        t = self.tree
        if t is not None and t.gone is not None:
            return t.row_seq(index, self.show_begins)
        return index if self.show_begins else self._hidden.select_free(index)

    def _refold(self) -> None:
        """The rows changed (begins, folds): the filtered rows, the events' and calls' rows."""
        self._rebuild_filtered() if self.filter is not None else self._place_event_rows()

    def begin_status(self, seq: int, attempt: object = None) -> str:
        """A begin's step: ``done`` (its step record exists), ``interrupted`` (a later process attempt or a
        rollback came first, or the supervisor saw its ``attempt`` exit) or ``running``."""
        if seq in self._hidden:
            return "done"
        if attempt in self.exited_attempts:
            return "interrupted"
        later = [s for s in self.start_seqs.values() if s > seq] or [s for s in self.rollback_seqs if s > seq]
        return "interrupted" if later else "running"

    def _refine_by_time(self, before: int, ev: dict[str, Any], steps: int = 64) -> int:
        """Move an event up past the records just before it that are later in time.

        The attempt places an event between two process attempts; within that
        gap (e.g. a rollback record appended after the exit) the timestamps decide.
        Only cached records are looked at: placement never reads the journal.
        """
        ts = str(ev.get("ts", ""))
        if not ts:
            return before
        while before > 0 and steps > 0:
            prev = self.record(before - 1) if self.indexed else self.cache.get(before - 1)
            if type(prev) is not dict or prev.get("kind") == Kind.START or str(prev.get("ts", "")) <= ts:
                break
            before -= 1
            steps -= 1
        return before

    # ------------------------------------------------------------------ rows
    @property
    def rows(self) -> int:
        if self.filter is not None:
            return len(self._fvis) + len(self._between.shown)
        t = self.tree
        if t is not None and t.gone is not None:
            return self.count - len(t.gone) + len(self.events) + len(self.calls)
        return self.count - (0 if self.show_begins else len(self._hidden)) + len(self.events) + len(self.calls)

    def row_item(self, row: int) -> tuple[str, int]:
        """``("rec", seq)``, ``("event", index)`` (into ``events``) or ``("call", index)`` (into ``calls``) for a row."""
        hit = self._between.at_row(row, self.filter is not None)
        if isinstance(hit, tuple):
            return hit
        if self.filter is not None:
            i = row - hit
            fvis = self._fvis
            return "rec", (fvis.select(i) if 0 <= i < len(fvis) else max(fvis.last(), 0))
        return "rec", self.seq_at(row - hit)

    def row_of_seq(self, seq: int) -> int:
        """The row of record ``seq`` (events with ``before <= seq`` come first; a folded begin: its step's row;
        with a filter, a record that does not pass: the next row that does)."""
        if self.filter is not None:
            return self._fvis.rank(seq) + self._between.count_before(seq, True)
        return self.visible_index(seq) + self._between.count_before(seq, False)

    def row_of_event(self, index: int) -> int | None:
        """The row of ``events[index]`` (``None``: the filter hides it)."""
        return self._between.row_of_event(index, self.filter is not None)

    def row_of_call(self, index: int) -> int | None:
        """The row of ``calls[index]`` (``None``: the filter hides it)."""
        return self._between.row_of_call(index, self.filter is not None)

    def entry(self, seq: int) -> Entry | None:
        """The parsed record at ``seq`` if cached (``None``: blank line or not loaded)."""
        return self.cache.get(seq)

    def has(self, seq: int) -> bool:
        return seq in self.cache

    def fetch(self, start: int, stop: int) -> None:
        """Make records ``start``..``stop`` available (after the index; a few kB read)."""
        start = max(0, start)
        stop = min(stop, self.count)
        if not self.indexed or start >= stop:
            return
        if self.filter is not None and stop - start > 2 * self.tail_rows:
            self._fetch_filtered(start, stop)
            return
        if all(s in self.cache for s in range(start, stop)):
            return
        try:
            got = self.reader.get_range(start, stop)
        except (OSError, IndexError):
            return
        except (JournalError, ValueError) as e:  # shrank, or rewritten in place: not the lines the index counted
            self.read_error = str(e)
            for s in range(start, stop):
                self.cache.setdefault(s, None)  # shown blank, not read again at each paint (the notice says why)
            return
        for s in range(start, stop):
            self.cache.setdefault(s, None)  # blank lines have no entry
        for ent in got:
            self.cache[_seq(ent)] = ent
            if type(ent) is BadLine:
                self.bad_seqs.add(ent.seq)
        self._see(got)
        if len(self.cache) > CACHE_MAX:
            self._trim_cache()

    def _fetch_filtered(self, start: int, stop: int, limit: int = 400) -> None:
        """A filter's rows between far apart seqs: read only the records shown, in runs of consecutive seqs."""
        want = [s for s in islice(self._fvis.iter_from(start, stop), limit) if s not in self.cache]
        runs: list[tuple[int, int]] = []
        for s in want:
            if runs and runs[-1][1] == s:
                runs[-1] = (runs[-1][0], s + 1)
            else:
                runs.append((s, s + 1))
        for a, b in runs:
            self.fetch(a, b)

    def record(self, seq: int) -> Entry | None:
        """The record at ``seq``, reading it if needed."""
        if seq not in self.cache:
            self.fetch(seq, seq + 1)
        return self.cache.get(seq)

    # ------------------------------------------------------------------ state
    def state_at(self, seq: int) -> Any:
        """The agent's state right after ``seq``, from the nearest snapshot on its effective path.

        For worker threads: it reads through its own ``StateCursor`` (its own
        reader, patches streamed in batches) and takes the model's snapshots and
        rollback cuts as one immutable ``Shape``, never the lists the UI thread
        changes. Forward from the last answer only the patches in between are
        applied. Before the scan it uses the records read so far, or raises
        ``ValueError`` if they do not reach back far enough.
        """
        if not self.scanned:
            return self._state_from_cache(seq)
        shape = self.shape
        with self._state_lock:
            self._cursor.regions = self.regions  # line starts to read from: a list that only grows, or a new one
            return self._cursor.state_at(seq, shape)

    def forget_state(self) -> None:
        """Forget the last state answer: the next one starts from a snapshot again."""
        with self._state_lock:
            self._cursor.reset()

    def _state_from_cache(self, seq: int) -> Any:
        """Before the scan: the state from the records read so far (the tail), if they reach back far enough."""
        cache = dict(self.cache)  # one copy in C: the UI thread may add records meanwhile
        first = min(cache, default=0)  # the first line read so far
        entries = [e for s, e in sorted(cache.items()) if e is not None]  # past seq too: a step's result follows it
        shape, fold = fold_shape(entries)
        if fold.problem_count and first > 0:
            raise ValueError(STILL_INDEXING)  # a rollback's checkpoint may lie before the records read
        cursor = StateCursor(self.run_dir, records=entries)
        doc = cursor.state_at(seq, shape)
        if cursor.origin + 1 < first:
            raise ValueError(STILL_INDEXING)
        return doc

    # ------------------------------------------------------------------ navigation
    def next_in(self, seqs: list[int], seq: int, forward: bool) -> int | None:
        if forward:
            i = bisect.bisect_right(seqs, seq)
            return seqs[i] if i < len(seqs) else None
        i = bisect.bisect_left(seqs, seq)
        return seqs[i - 1] if i > 0 else None

    def previous_checkpoint(self, seq: int) -> int | None:
        """The latest effective checkpoint strictly before ``seq`` (for the default diff)."""
        for s in reversed(self.checkpoint_seqs):
            if s < seq and not self.is_abandoned(s):
                return s
        return None

    def files_count(self, seq: int, rec: Any) -> int:
        """How many files the record's step changed (with what changed after it between steps): its row's mark."""
        return self.files.count(seq, rec, self.rollback_seqs) if self.files else 0

    def abandoned_by_rollback_to(self, cp_seq: int, sample: int = 8) -> tuple[int, list[int]]:
        """How many records a rollback to the checkpoint at ``cp_seq`` would abandon, and the first few."""
        n = self.count - cp_seq - 1 - self.abandoned_count(cp_seq + 1, self.count)
        first: list[int] = []
        for s in range(cp_seq + 1, self.count):
            if len(first) >= sample:
                break
            if not self.is_abandoned(s):
                first.append(s)
        return n, first
