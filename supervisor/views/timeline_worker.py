"""The reading worker's half of the timeline's live side: what was committed since the last read, off the UI thread.

Only I/O, only the :class:`LiveSide` the worker took: the journal's new lines (indexed and scanned, or before the
index its tail), ``supervisor.jsonl`` when its size changed and the new lines of ``llm.jsonl``, handed to the UI
thread as :class:`Changes` (``TimelineModel.apply`` takes them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import rundir
from ..core.events import read_events
from ..core.journal_reader import Entry
from ..core.records import BadLine
from ..core.segments import segment_paths
from ..errors import JournalError
from .scan import Marker, Region, ScanResult, SeqBits, iter_new_regions, scan_bytes
from .timeline_calls import CallsRead
from .timeline_read import SHORT_READS, Changes, LiveSide
from .timeline_tree import StepTree, TreeScan


def read_changes(live: LiveSide, source: Path, run_dir: Path, tail_rows: int, *, tree: bool = False) -> Changes:
    """What was committed to the run at ``run_dir`` (journal ``source``) since ``live``'s last read (parsed: at most
    the last ``tail_rows`` new records). ``tree``: the model wants the steps' nesting; after the index, the first
    such read reads it from the journal's start (``TreeScan.build``), each read after it from the new bytes."""
    if not run_dir.exists():
        return Changes(live, live.count, deleted=True)
    ch = Changes(live, live.count)
    tail = None
    if live.indexed:
        first = tree and live.tree is None
        if first:
            live.tree = TreeScan.build(source, live.scanned)
        _read_indexed(live, ch, source, tail_rows)
        if live.tree is not None:
            facts = live.tree.take()
            if first:  # the whole tree, its parents made here (the UI thread maps its rows)
                ch.tree = staged = StepTree()
                staged.take(facts, SeqBits(), True)
            else:
                ch.tree = facts or None
    else:
        tail = _read_tail(live, ch, tail_rows)
    ch.count = live.count
    ch.events = read_events_changed(live, source, run_dir)
    ch.events_size = live.events_size
    if not ch.again:
        ch.calls_reset = live.calls.offset == 0
        ch.calls = read_calls(live, tail)
    return ch


def _read_indexed(live: LiveSide, ch: Changes, source: Path, tail_rows: int) -> None:
    """After the index: index and scan the new lines, parse the last screen of them."""
    try:
        n = live.reader.index()
    except OSError:
        n = -1
    # fewer lines than before: a file was renamed between the listing and the reading, so this
    # view lacks it (its seqs would be wrong); the next read lists the files again
    ch.indexed = n >= live.count
    ch.again = not ch.indexed
    live.short = 0 if ch.indexed else live.short + 1
    if live.short >= SHORT_READS and n >= 0:
        # not a rotation (it settles in a read or two): lines were removed, which a journal never does;
        # said, and read again at the usual pace (not at once, forever)
        ch.again = False
        ch.shrank = (f"the journal ({source}) has {n} lines, fewer than the {live.count} shown: committed "
                     "lines are never removed (was it cut or rewritten?)")
    if n > live.count:
        ch.markers, ch.steps, ch.regions = _scan_new(live, source)
        ch.hidden = list(live.pairs.hidden)
        live.pairs.hidden.clear()
        ch.changed = dict(live.pairs.changed)
        try:  # parse only the last screen: a burst of 10,000 records is scanned, not parsed
            ch.new = live.reader.get_range(max(live.count, n - tail_rows), n)
        except OSError:
            ch.new = []
        live.count = n


def _read_tail(live: LiveSide, ch: Changes, tail_rows: int) -> list[Entry]:
    """Before the index: the journal's last ``tail_rows`` records, those past the count new (returned: their times
    place the calls)."""
    try:
        tail = live.reader.tail(tail_rows)
    except OSError:
        tail = []
    if tail and seq_of(tail[-1]) + 1 > live.count:
        ch.new = [e for e in tail if seq_of(e) >= live.count]
        live.count = seq_of(tail[-1]) + 1
    return tail


def _scan_new(live: LiveSide, source: Path) -> tuple[list[Marker], int, list[Region]]:
    """Scan the bytes committed since the last scan (by inode: a rotation renames, keeps the inode)."""
    res = ScanResult()
    res.pairs = live.pairs
    regions: list[Region] = []
    for p in segment_paths(source):
        try:
            ino = p.stat().st_ino
        except OSError:
            continue
        end, line = live.scan_pos.get(ino, (0, 1))
        for region, data in iter_new_regions(p, end, live.scanned, line):
            if live.tree is not None:
                live.tree.feed(data, region)
            n = scan_bytes(data, live.scanned, res)
            live.scanned += n
            regions.append(region)
            live.scan_pos[ino] = (region.end, region.first_line + n)
    return res.markers, res.steps, regions


def run_files(source: Path, run_dir: Path) -> Path | None:
    """Where ``supervisor.jsonl`` and ``llm.jsonl`` would be (``None``: a bare journal file is no run directory)."""
    if source.is_file() and source.name != rundir.JOURNAL:
        return None
    return run_dir


def read_events_changed(live: LiveSide, source: Path, run_dir: Path) -> list[dict[str, Any]] | None:
    """All of ``supervisor.jsonl`` if its size changed since the last read, else ``None``."""
    if run_files(source, run_dir) is None:
        return None
    path = run_dir / rundir.SUPERVISOR_EVENTS
    try:
        size = path.stat().st_size
    except OSError:
        size = -1
    if size == live.events_size:
        return None
    live.events_size = size
    return read_events(run_dir) if size > 0 else []  # with the rotated files before it


def read_calls(live: LiveSide, tail: list[Entry] | None) -> CallsRead | None:
    """The proxy's calls committed since the live side's last read, placed among its ``count`` records by
    time: with the index (``tail`` is ``None``), any record's time is read (a line); before it, only the
    ``tail``'s are known. Without ``llm.jsonl`` this is one failed ``open``."""
    if tail is None:
        reader = live.reader
        times: dict[int, str | None] = {}

        def ts_at(seq: int) -> str | None:
            if seq not in times:
                try:
                    got = reader.get_range(seq, seq + 1)
                except (OSError, IndexError, JournalError, ValueError):
                    got = []
                times[seq] = _ts(got[0]) if got else None
            return times[seq]

        return live.calls.read(live.count, lambda: (ts_at, 0))

    def known() -> tuple[Callable[[int], str | None], int]:
        ts = {seq_of(e): _ts(e) for e in tail}
        return ts.get, min(ts, default=live.count)

    return live.calls.read(live.count, known)


def seq_of(ent: Entry) -> int:
    """A parsed record's seq (a damaged line's: its line number)."""
    return ent.seq if isinstance(ent, BadLine) else int(ent["seq"])


def _ts(ent: Entry) -> str | None:
    ts = ent.get("ts") if isinstance(ent, dict) else None
    return ts if isinstance(ts, str) else None
