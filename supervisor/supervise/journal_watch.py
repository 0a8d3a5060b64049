"""The supervisor's view of the journal: what each attempt committed, read as it is written.

The journal is polled (every ``JOURNAL_POLL_S`` and at an exit), and read only when
its inode or size changed. Progress is counted only from records the attempt's own
process tree wrote: the SDK's ``start`` record names its pid, and after a ``start``
of another process (an agent run by hand that took the journal lock) nothing is
credited until one of ours comes.

A poll without ``records`` (no one but the watch wants them: no workspace, no live exporter) parses no line
of the writer's plain ``begin`` and successful ``step`` lines (``wire``): a begin followed by its own step
leaves nothing in flight and counts one step; a begin still open when the poll ends is read for its name and
position, a step no begin pairs for its position. Every other line (start, checkpoint, rollback, note, a
failed step or a retried try, a line in another form) is parsed as before. At 1,000 steps a second that is
what keeps the supervisor's share of a core small (``tests/bench/bench_supervisor_cpu.py``).
"""

from __future__ import annotations

import operator
import os
import time
from bisect import bisect_left
from collections.abc import Callable
from itertools import accumulate, compress
from pathlib import Path
from typing import Any

import orjson
import psutil

from ..core import pauses, rundir, wire
from ..core.history import STEPS, Fold, Marker
from ..core.journal_reader import Entry, JournalReader
from ..core.records import Kind, Record, step_name
from ..core.segments import Chunk
from .policy import Attempt, is_progress

__all__ = ["JOURNAL_POLL_S", "JournalWatch"]

JOURNAL_POLL_S = 0.1


class JournalWatch:
    """The journal's new records, folded incrementally (flat memory), and credited to the attempt that wrote them."""

    def __init__(self, run_dir: Path, *, is_ours: Callable[[Any, Any, Any], bool], say: Callable[[str], None]) -> None:
        self.path = run_dir / rundir.JOURNAL
        self.reader = JournalReader(run_dir)
        self.fold = Fold(keep=False)
        """The effective history: the step count and the checkpoint a rollback names, without re-reading the journal."""
        self.records = 0
        """The seq after the last record read."""
        self._is_ours = is_ours
        self._say = say
        self._stat: tuple[int, int] = (-1, -1)
        # whose records the journal is getting now: True the current attempt's tree, False another
        # process (an agent run by hand holding the journal lock), None not known (credited: an agent
        # that writes the journal without the SDK has no start record)
        self._writer_ours: bool | None = None
        self._writer_pid: int | None = None
        self.pauses: dict[Any, Record] = {}
        """The open pauses (``core.pauses``) by seq: a paused step is no hang."""
        self.paused_new: list[Record] = []
        """Pauses read since the supervisor last took them (for its ``paused`` and ``asked`` events)."""

    def load(self) -> list[Entry]:
        """One read of the whole journal at the start (the resume view: steps stay unparsed); then :meth:`poll`."""
        view = self.reader.resume_view()  # with its overlap verdicts: the fold need not search the file again
        self.fold.extend(view.entries, view.overlaps)
        self.pauses = {p.get("seq"): p for p in pauses.open_pauses(view.entries)}
        self.records = self.reader.end_seq
        return view.entries

    def forget_stat(self) -> None:
        """Read at the next poll even if the file looks unchanged (an exit, a rollback: the last records count)."""
        self._stat = (-1, -1)

    def new_attempt(self) -> None:
        """An attempt was spawned: the last writer was ours (now gone), or nobody: whose records come is not known yet."""
        if self._writer_ours or self._writer_pid is None or not psutil.pid_exists(self._writer_pid):
            self._writer_ours = None

    def poll(self, cur: Attempt | None, attempt_no: int, *, records: bool = True) -> list[Entry]:
        """Read the records committed since the last poll (only if the file changed); credit them to ``cur``.

        ``records``: parse and return every record (the workspace's step clock and the live exporter read
        them); without, the writer's plain begins and steps are taken by their bytes and only the other
        records are returned (see the module's docstring)."""
        try:
            st = os.stat(self.path)
            key = (st.st_ino, st.st_size)
        except FileNotFoundError:
            key = (-1, 0)
        if key == self._stat:
            return []
        self._stat = key
        new: list[Entry] = []
        ours = False
        if records:
            new = self.reader.read_new()
            self.fold.extend(new)
            for ent in new:
                ours = self._take(ent, cur, attempt_no) or ours
        else:
            for c in self.reader.follow():
                ours = self._follow(c, cur, attempt_no, new) or ours
            self.records = max(self.records, self.reader.end_seq)
        if cur is not None and ours:
            cur.last_activity = time.monotonic()  # another writer's records are not a sign of life of ours
        return new

    def _take(self, ent: Entry, cur: Attempt | None, attempt_no: int) -> bool:
        """One parsed entry: whose records come from here on (a ``start``); whether it was credited to ``cur``."""
        if not isinstance(ent, dict):  # a bad line (read_new never returns lazy records)
            self.records = max(self.records, ent.seq + 1)
            return False
        self.records = max(self.records, int(ent.get("seq", 0)) + 1)
        kind = ent.get("kind", Kind.STEP)
        if kind == Kind.START:
            self._started(ent, attempt_no)
        elif kind == Kind.PAUSE:
            if ent.get("seq") not in self.pauses:
                self.paused_new.append(ent)
            self.pauses[ent.get("seq")] = ent
        elif kind == Kind.CHOICE:
            self.pauses.pop(ent.get("pause"), None)
        if cur is None or self._writer_ours is False:
            return False
        _credit(cur, ent, kind)
        return True

    def _follow(self, c: Chunk, cur: Attempt | None, attempt_no: int, out: list[Entry]) -> bool:
        """One region of a poll without ``records``, in file order: the lines :func:`_looked_at` names one by
        one, the paired begins and steps between them counted (parsed records go to ``out``); whether any
        line was credited to ``cur``."""
        run = wire.sequential_run(c.data, c.count())
        done = self._sequential(c, cur, run) if run is not None else None
        if done is not None:  # the SDK's sequential steps (the common case): no line split or looked at
            return done
        lines = c.lines()
        steps, begins, look = _looked_at(c.data, lines)
        before = list(accumulate(steps, initial=0))  # successful steps before each line
        ours, ok, a = False, 0, 0  # ok: steps not yet given to the fold
        for k in look:
            ok += before[k] - before[a]
            ours = self._pairs(cur, lines, a, k, before[k] - before[a]) or ours
            a = k + 1
            plain = _plain_at(lines[k], steps[k], begins[k])
            if plain is not None:
                ok += steps[k]
                ours = self._plain(cur, *plain) or ours
                continue
            ent = self.reader.parse_at(c, lines, k)
            if ent is not None:
                self.fold.extend((Marker(c.region.first_seq + k - 1, STEPS, ok_before=ok), ent))
                ok = 0
                out.append(ent)
                ours = self._take(ent, cur, attempt_no) or ours
        n = len(lines)
        ok += before[n] - before[a]
        ours = self._pairs(cur, lines, a, n, before[n] - before[a]) or ours
        if ok:
            self.fold.extend((Marker(c.region.first_seq + n - 1, STEPS, ok_before=ok),))
        return ours

    def _sequential(self, c: Chunk, cur: Attempt | None, run: wire.SequentialRun) -> bool | None:
        """A region of sequential steps (:func:`wire.sequential_run`) counted; whether it was credited to
        ``cur``; ``None``: it is left to the line by line walk (another step in flight, a name not read)."""
        credit = cur is not None and self._writer_ours is not False
        open_: tuple[int, str | None] | None = None
        if run.last_begin >= 0:
            open_ = _plain_at(c.data[run.last_begin : -1], False, True)
            if open_ is None:
                return None
        if credit:
            assert cur is not None
            if any(pos != run.first_pos for pos in cur.flying):  # its step may be among these: look at each
                return None
            cur.progress += run.steps
            if run.steps:
                cur.failed = None
            cur.flying.pop(run.first_pos, None)
            if open_ is not None:
                cur.flying[open_[0]] = str(open_[1])
        if run.steps:
            self.fold.extend((Marker(c.region.first_seq + c.count() - 1, STEPS, ok_before=run.steps),))
        return credit

    def _pairs(self, cur: Attempt | None, lines: list[bytes], a: int, b: int, n_ok: int) -> bool:
        """Lines ``a``..``b-1``: begins each followed by its own step (``n_ok`` steps), credited to ``cur``."""
        if cur is None or self._writer_ours is False or not n_ok:
            return False
        cur.progress += n_ok
        cur.failed = None
        if cur.flying:  # a retried try or overlapping steps left a begin open at one of these positions
            for raw in lines[a:b]:
                m = wire.STEP_POS.match(raw)
                if m is not None:
                    cur.flying.pop(int(m[1]), None)
        return True

    def _plain(self, cur: Attempt | None, pos: int, begin: str | None) -> bool:
        """A plain step at ``pos`` no begin before it pairs, or the begin of step ``begin`` left open."""
        if cur is None or self._writer_ours is False:
            return False
        if begin is None:
            cur.progress += 1
            cur.failed = None
            cur.flying.pop(pos, None)
        else:
            cur.flying[pos] = begin
        return True

    def _started(self, ent: Record, attempt_no: int) -> None:
        """A ``start`` record: whose process writes the journal from here on."""
        pid = ent.get("pid")
        self._writer_pid = pid if isinstance(pid, int) else None
        self._writer_ours = self._is_ours(pid, ent.get("supervisor"), ent.get("attempt"))
        if not self._writer_ours:
            self._say(f"the journal is written by pid {pid}, not by attempt {attempt_no}: "
                      "its records are not this attempt's progress")


def _looked_at(data: bytes, lines: list[bytes]) -> tuple[list[bool], list[bool], list[int]]:
    """A region's plain writer steps and begins (:func:`wire.plain_lines`) and the lines to look at one by one:
    all but each begin whose next line is its own plain step, and that step."""
    n = len(lines)
    if wire.is_suspect(data):  # a damaged line may still look whole: every line parsed (rare)
        return [False] * n, [False] * n, list(range(n))
    steps, begins = wire.plain_lines(data, lines)
    paired = list(map(operator.and_, begins, steps[1:] + [False]))
    offsets = wire.unclosed_begins(data) if any(paired) else []
    if offsets:  # a begin followed by another step's line: in flight, or steps overlap
        starts = list(accumulate(map((1).__add__, map(len, lines)), initial=0))
        for off in offsets:
            paired[bisect_left(starts, off)] = False
    closed = [False, *paired[:-1]]  # a step whose begin is the line before
    return steps, begins, list(compress(range(n), map(operator.not_, map(operator.or_, paired, closed))))


def _plain_at(raw: bytes, step: bool, begin: bool) -> tuple[int, str | None] | None:
    """A plain step line's position (and ``None``), or a plain begin line's position and step name, taken from
    their bytes; ``None``: the line is parsed instead (one not quite in the writer's form)."""
    if step:
        m = wire.STEP_POS.match(raw)
        return None if m is None else (int(m[1]), None)
    m = wire.BEGIN_NAME_POS.match(raw) if begin else None
    if m is None:
        return None
    try:
        name = orjson.loads(m[1])  # the name as a JSON string: a few bytes
    except orjson.JSONDecodeError:
        return None
    return (int(m[2]), name) if isinstance(name, str) else None


def _credit(cur: Attempt, ent: Record, kind: Any) -> None:
    """One record of the attempt's own tree: the steps in flight, its progress and its rollbacks."""
    pos = ent.get("pos")
    if kind == Kind.BEGIN:
        # paired by position, not adjacency: concurrent steps interleave their begins and ends
        cur.flying[pos if isinstance(pos, int) else -1] = step_name(ent)
    elif kind == Kind.STEP and isinstance(pos, int):
        if not ent.get("transient"):  # a failed try to be retried: still in flight
            cur.flying.pop(pos, None)
            err = ent.get("error")
            if err is not None:
                kind_ = err.get("type") if isinstance(err, dict) else None
                cur.failed = (pos, str(step_name(ent)), kind_ if isinstance(kind_, str) and kind_ else "an error")
    elif kind in (Kind.STEP, Kind.START, Kind.ROLLBACK):
        cur.flying.clear()  # a writer without positions: one step at a time, as before
    if is_progress(ent):
        cur.progress += 1
        cur.failed = None
    elif kind == Kind.ROLLBACK:
        cur.rollbacks += 1
