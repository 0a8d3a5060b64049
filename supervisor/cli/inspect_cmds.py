"""Headless inspection: ``log``, ``state`` and ``diff``."""

from __future__ import annotations

import argparse
import errno
import fnmatch
import gc
import re
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from ..core import history as history_mod
from ..core import llm_calls, stream, wire
from ..core import state as state_mod
from ..core.cursor import StateCursor
from ..core.journal_reader import Entry, JournalReader
from ..core.pairing import Pairing
from ..core.records import BadLine, Kind, preview
from ..core.rundir import check_readable_run_dir
from ..errors import SupervisorError
from . import log_text


def register(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("log", help="print the effective history of a run", description=(
        "Print the effective history of a run, one line a record, as it is read (constant memory). "
        "Filters combine: --since, --kind and --step choose records, --tail keeps the last N of them."))
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory or a bare journal .jsonl")
    p.add_argument("--json", action="store_true", help="print normalised records as JSON lines")
    p.add_argument("--all", action="store_true", help="include abandoned branches (marked)")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N records (read from the end of the journal)")
    p.add_argument("--since", metavar="SEQ|TIME", help="from the record at seq SEQ, or the first at or after TIME "
                   "(ISO-8601, e.g. 2026-11-30T12:54 or 2026-11-30T12:54:37Z; UTC unless it names an offset) on")
    p.add_argument("--kind", action="append", metavar="K", help="only records of kind K (repeatable: step, begin, start, "
                   "checkpoint, rollback, note, fork, damaged...)")
    p.add_argument("--step", metavar="GLOB", help="only records whose step name matches GLOB (e.g. 'search:*')")
    p.set_defaults(func=cmd_log)

    p = sub.add_parser("state", help="print the agent's state at a step", description=(
        "Print the agent's state at a record (default: the last). The state at a step is the state after its "
        "result: it includes what the agent did with the step's output before the next step. It starts from the "
        "nearest checkpoint snapshot before the record and applies the patches after it."))
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--at", metavar="SEQ", help="a record's seq or a checkpoint name (default: the end)")
    p.set_defaults(func=cmd_state)

    p = sub.add_parser("diff", help="diff the state at two points", description=(
        "Path-level diff of the state at A and at B (for a step: after its result, as 'state --at' prints it)."))
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("a", metavar="A", help="a seq or a checkpoint name")
    p.add_argument("b", metavar="B", help="a seq or a checkpoint name")
    p.add_argument("--json", action="store_true", help="print the changes as JSON lines")
    p.set_defaults(func=cmd_diff)


def _load(run_dir: Path) -> history_mod.History:
    check_readable_run_dir(run_dir)
    try:
        h = history_mod.load(run_dir)
    except PermissionError as e:
        raise SupervisorError(f"{e.filename}: permission denied; run as the user who owns the run directory") from None
    for bad in h.problems:
        print(f"warning: {bad}", file=sys.stderr)
    return h


def _permission(run_dir: Path) -> SupervisorError:
    return SupervisorError(f"{run_dir}: permission denied; run as the user who owns the run directory")


def _warn(bad: BadLine) -> None:
    print(f"warning: {bad}", file=sys.stderr)


_ISO_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
"""A ``ts`` as this package writes it: compared with ``--since`` as text."""


def _parse_time(text: str) -> datetime:
    """``--since`` TIME: ISO-8601, UTC unless it names an offset."""
    try:
        t = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise SupervisorError(
            f"--since {text!r} is neither a seq nor an ISO-8601 time; pass e.g. --since 120 or --since 2026-11-30T12:54:37Z"
        ) from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


class _Filter:
    """``--since``, ``--kind``, ``--step``: which records ``log`` prints (``--tail`` is applied after them)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.kinds = set(args.kind) if args.kind else None
        self.seen: set[str] = set()
        """The ``--kind`` kinds some record had (an unknown one no record had is said at the end)."""
        self.step = re.compile(fnmatch.translate(args.step)) if args.step else None
        self.since_seq: int | None = None
        self.since_text: str | None = None
        self.since_time: datetime | None = None
        since = args.since
        if since is not None:
            if since.strip().isdigit():
                self.since_seq = int(since)
            else:
                self.since_time = _parse_time(since)
                self.since_text = self.since_time.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.since_time.microsecond // 1000:03d}Z"
        self.reached = since is None
        self.active = since is not None or self.kinds is not None or self.step is not None

    def _after(self, item: stream.Item) -> bool:
        """``--since``: from the first record at or after the point on (a record without a time after it too).
        A seq is the journal's: the proxy's records come from the journal record at that seq on."""
        if self.since_seq is not None:
            return type(item) is not CallItem and item.seq >= self.since_seq
        ts = item.time()
        if ts is None:
            return False
        if _ISO_TS.fullmatch(ts) and self.since_text is not None:
            return ts >= self.since_text
        try:
            t = _parse_time(ts)
        except SupervisorError:
            return False
        return self.since_time is not None and t >= self.since_time

    def __call__(self, item: stream.Item) -> bool:
        """Whether ``log`` prints the record: ``--kind`` and ``--step`` first, then ``--since`` (from the
        first record they choose that is at or after the point on)."""
        if self.kinds is not None:
            if item.kind not in self.kinds:
                return False
            self.seen.add(item.kind)
        if self.step is not None:
            name = item.step_name()
            if name is None or self.step.match(name) is None:
                return False
        if not self.reached:
            if not self._after(item):
                return False
            self.reached = True
        return True


_TAIL_SLACK = 1000
"""Lines read before a ``--tail`` window: the steps there give the records without a ``pos`` theirs."""


def _tail_items(args: argparse.Namespace, keep: _Filter) -> tuple[list[stream.Item], Pairing]:
    """The last ``--tail`` records, read from the end of the journal (a window that grows until it holds
    them). Abandoned branches: a rollback in the window takes the first pass over the whole journal for
    the cuts. The pairing marks (in flight, interrupted, ``#pos``) come from the records read."""
    n = args.tail
    reader = JournalReader(args.run_dir)
    k = n + _TAIL_SLACK
    while True:
        entries = reader.tail(k)
        last = stream.entry_seq(entries[-1]) if entries else -1
        whole = last - k + 1 <= 0
        rolled = any(isinstance(e, dict) and e.get("kind") == wire.ROLLBACK for e in entries)
        pl = stream.plan(args.run_dir) if rolled else stream.Plan()
        if rolled and last != pl.count - 1:
            # the seq fields are not the lines' positions (a hand-edited journal: the reader's tail trusts
            # them), and the cuts are by position: the whole stream, keeping the last N
            return _tail_of_stream(args, keep, pl)
        walk = stream.Walk(args.run_dir, pl, all_=args.all)
        shown, pairing = _kept(args, keep, walk.entries(entries, _warn if whole or n <= 0 else None))
        if len(shown) >= n or whole:
            if not whole:  # the warnings about the lines read, once, in seq order
                _warn_window(entries, pl)
            return shown, pairing
        k *= 4


def _kept(args: argparse.Namespace, keep: _Filter, items: Iterable[stream.Item]) -> tuple[list[stream.Item], Pairing]:
    """The last ``--tail`` of ``items`` the filter keeps, and the pairing of all of them (of the journal's:
    the proxy's calls pair with no begin)."""
    keep.reached = args.since is None
    pairing = Pairing(keep_paired=False)
    shown: deque[stream.Item] = deque(maxlen=args.tail)
    for item in items:
        if type(item) is not CallItem:
            pairing.add_item(item)
        if not keep.active or keep(item):
            shown.append(item)
    return list(shown), pairing


class CallItem(stream.Item):
    """A record of the proxy's ``llm.jsonl`` in ``log``'s walk: parsed (``raw`` is ``None``), its ``seq`` the
    file's own, no ``pos``."""

    __slots__ = ()


def call_items(run_dir: Path, all_: bool) -> list[stream.Item]:
    """The records of the run's ``llm.jsonl`` (:func:`llm_calls.read_calls`, blobs expanded) as walk items (a line
    that is no record is a warning with its file and line); one made on a branch a rollback abandoned (its ``ts``
    in :func:`llm_calls.abandoned_spans`) is marked so, and shown only with ``all_`` (``--all``). ``[]`` for a
    bare journal or a run without the file."""
    if not run_dir.is_dir() or not (run_dir / llm_calls.CALLS).exists():
        return []
    for bad in JournalReader(run_dir / llm_calls.CALLS).load():  # read_calls skips them: said here, with the line
        if isinstance(bad, BadLine):
            _warn(bad)
    calls = llm_calls.read_calls(run_dir)
    spans = llm_calls.abandoned_spans(run_dir) if calls else []
    out: list[stream.Item] = []
    for rec in calls:
        ab = llm_calls.in_spans(rec.get("ts"), spans)
        if all_ or not ab:
            seq = rec.get("seq")
            out.append(CallItem(seq if type(seq) is int else -1, str(rec.get("kind", wire.STEP)), None, None, rec, ab))
    return out


def timeline(items: Iterable[stream.Item], calls: list[stream.Item]) -> Iterator[stream.Item]:
    """The journal's items and the proxy's in one timeline, by :func:`llm_calls.merge_by_ts` (by ``ts``, the
    journal's first at equal times, each file's order kept)."""
    journal = ({"ts": it.time(), "item": it} for it in items)
    for r in llm_calls.merge_by_ts(journal, ({"ts": c.time(), "item": c} for c in calls)):
        yield r["item"]


def _warn_window(entries: list[Entry], pl: stream.Plan) -> None:
    """The warnings about a ``--tail`` window's lines, in seq order."""
    first = stream.entry_seq(entries[0])
    problems = [e for e in entries if isinstance(e, BadLine)]
    problems += [BadLine("journal", 0, s, history_mod.MISSING_TARGET, "") for s in pl.missing if s >= first]
    for bad in sorted(problems, key=lambda b: b.seq):
        _warn(bad)


def _tail_of_stream(args: argparse.Namespace, keep: _Filter, pl: stream.Plan) -> tuple[list[stream.Item], Pairing]:
    """``--tail`` by the two passes over the whole journal (the last N kept as they go by)."""
    return _kept(args, keep, stream.Walk(args.run_dir, pl, all_=args.all).items(_warn))


def _write(out: Any, data: bytes) -> None:
    """Write all of ``data``. A buffered write that fails after part of it went out returns the part's
    length instead of raising (a reader that closed the pipe, ``log | head``): the rest is written
    again, so the error is raised (``BrokenPipeError``: the quiet exit of ``main``)."""
    view = memoryview(data)
    while view:
        n = out.write(view)
        if not n:
            raise OSError(errno.EIO, "the output takes no more bytes")
        view = view[n:]


def _pairing(args: argparse.Namespace, pl: stream.Plan) -> Pairing:
    """The text ``log``'s pairing marks (in flight, interrupted, ``#pos``): from the first pass when every begin
    is followed by its step (no look ahead needed), else from one more walk (a begin's step comes after it)."""
    pairing = Pairing(keep_paired=False)
    if pl.paired:
        if pl.open_at_end is not None:
            pairing.open[pl.open_at_end[1]] = {"seq": pl.open_at_end[0]}
    else:
        for item in stream.Walk(args.run_dir, pl, all_=args.all).items():
            pairing.add_item(item)
    return pairing


def _batched(items: Iterable[stream.Item], n: int) -> Iterator[list[stream.Item]]:
    """``items`` in lists of ``n`` (the last one shorter)."""
    it = iter(items)
    while batch := list(islice(it, n)):
        yield batch


def _print_log(args: argparse.Namespace, keep: _Filter, out: Any) -> None:
    """``log``'s records, rendered a batch at a time (text or JSON: one loop in :mod:`.log_text`)."""
    batches: Iterable[Iterable[stream.Row]]
    calls = call_items(args.run_dir, args.all)
    if args.tail is not None and calls:  # the last N of the one timeline: the whole stream, the last N kept
        walk = stream.Walk(args.run_dir, stream.plan(args.run_dir), all_=args.all)
        items, pairing = _kept(args, keep, timeline(walk.items(_warn), calls))
        batches = _batched(items, stream.BATCH)
    elif args.tail is not None:
        items, pairing = _tail_items(args, keep)
        batches = _batched(items, stream.BATCH)
    else:
        pl = stream.plan(args.run_dir, pairs=not args.json, check=False)  # the walk reports bad lines
        pairing = Pairing(keep_paired=False) if args.json else _pairing(args, pl)
        walk = stream.Walk(args.run_dir, pl, all_=args.all, kinds=keep.kinds)
        if calls:
            merged = timeline(walk.items(_warn, parse_steps=not args.json), calls)
            batches = _batched(filter(keep, merged) if keep.active else merged, stream.BATCH)
        elif keep.active:
            batches = _batched(filter(keep, walk.items(_warn, parse_steps=not args.json)), stream.BATCH)
        else:
            batches = walk.batches(_warn, parse_steps=not args.json, plain_begins=not args.json and not pairing.overlapped)
    render = log_text.json_lines if args.json else log_text.TextLog(pairing, args.all).lines
    for batch in batches:
        lines = render(batch)
        if lines:
            lines.append(b"")
            _write(out, b"\n".join(lines))


def cmd_log(args: argparse.Namespace) -> int:
    """Stream the effective history: a first pass finds the rollbacks' cuts from the raw bytes, the second
    prints each record as it is read (see :mod:`supervisor.core.stream`); text needs one more pass before
    printing for the pairing marks (a begin's step comes after it), unless the first pass found every begin
    followed by its step."""
    check_readable_run_dir(args.run_dir)
    if args.tail is not None and args.tail < 0:
        raise SupervisorError(f"--tail {args.tail}: pass a number of records, 0 or more")
    keep = _Filter(args)
    out = sys.stdout.buffer
    # the walk makes a million short-lived tuples and dicts and no cycles: the cyclic GC would only rescan
    # each batch again and again (a third of the text log's time)
    enabled = gc.isenabled()
    gc.disable()
    try:
        _print_log(args, keep, out)
    except PermissionError:
        raise _permission(args.run_dir) from None
    finally:
        if enabled:
            gc.enable()
    out.flush()
    known = [k.value for k in Kind]
    unknown = sorted(k for k in keep.kinds or () if k not in known and k != "damaged")
    if unknown and not keep.seen:  # a typo (--kind steps): not silence with exit 0
        print(f"agent-supervisor: no record has the kind {', '.join(map(repr, unknown))}: the kinds are "
              f"{', '.join(known)}, damaged (and any a writer of its own uses)", file=sys.stderr)
        return 1
    return 0


def resolve_point(h: history_mod.History, ref: str) -> int:
    """A seq from a seq number, ``end``, or a checkpoint name/file."""
    if ref == "end":
        return int(h.effective[-1]["seq"]) if h.effective else -1
    if ref.lstrip("-").isdigit():
        seq = int(ref)
        seqs = {e["seq"] for e in h.entries if not isinstance(e, history_mod.BadLine)}
        if seq not in seqs:
            last = max(seqs) if seqs else -1
            raise SupervisorError(f"no record with seq {seq} (the journal has seqs 0 to {last}); see 'agent-supervisor log'")
        return seq
    cp = h.find_checkpoint(ref)
    if cp is None:
        names = ", ".join(str(c.get("name")) for c in h.checkpoints) or "none"
        raise SupervisorError(f"no checkpoint named {ref!r} (checkpoints: {names}); pass a seq or a checkpoint name")
    return int(cp["seq"])


def _plan(run_dir: Path) -> stream.Plan:
    """The first pass of the streaming reader (cuts, snapshots, effective checkpoints); its problems
    are printed as ``log`` prints them."""
    check_readable_run_dir(run_dir)
    try:
        pl = stream.plan(run_dir)
    except PermissionError:
        raise _permission(run_dir) from None
    for bad in pl.problems:
        _warn(bad)
    return pl


def resolve_in_plan(pl: stream.Plan, ref: str) -> int:
    """:func:`resolve_point` from the first pass (no record kept in memory)."""
    if ref == "end":
        return pl.last
    if ref.lstrip("-").isdigit():
        seq = int(ref)
        if not 0 <= seq < pl.count or seq in pl.no_record:
            last = max((s for s in range(pl.count - 1, -1, -1) if s not in pl.no_record), default=-1)
            raise SupervisorError(f"no record with seq {seq} (the journal has seqs 0 to {last}); see 'agent-supervisor log'")
        return seq
    cp = history_mod._find_checkpoint(pl.checkpoints, ref)
    if cp is None:
        names = ", ".join(str(c.get("name")) for c in pl.checkpoints) or "none"
        raise SupervisorError(f"no checkpoint named {ref!r} (checkpoints: {names}); pass a seq or a checkpoint name")
    return int(cp["seq"])


def _state(run_dir: Path, pl: stream.Plan, seq: int) -> Any:
    """The state at ``seq`` as the TUI shows it (for a step: after its result), from the nearest snapshot on
    the effective path before it and the patches after it, read from the files; a snapshot that could not
    be used (the patches rebuilt the state without it) is a one-line warning."""
    if seq < 0:
        return {}
    cursor = StateCursor(run_dir)
    cursor.regions = pl.regions
    try:
        st = cursor.state_at(seq, pl.shape, after_result=True)
    except ValueError as e:  # a patch that does not apply: a damaged record or snapshot
        raise SupervisorError(f"cannot rebuild the state at seq {seq}: {e}; see 'agent-supervisor log --json {run_dir}'") from None
    except PermissionError:
        raise _permission(run_dir) from None
    for p in cursor.problems:
        print(f"warning: {p}; the state was rebuilt from the journal's patches", file=sys.stderr)
    return st


def cmd_state(args: argparse.Namespace) -> int:
    pl = _plan(args.run_dir)
    st = _state(args.run_dir, pl, resolve_in_plan(pl, args.at or "end"))
    sys.stdout.buffer.write(orjson.dumps(st, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    pl = _plan(args.run_dir)
    a = state_mod.json_copy(_state(args.run_dir, pl, resolve_in_plan(pl, args.a)))
    b = _state(args.run_dir, pl, resolve_in_plan(pl, args.b))
    changes = state_mod.diff(a, b)
    out = sys.stdout
    for c in changes:
        if args.json:
            out.write(orjson.dumps({"op": c.op, "path": c.pointer, "old": c.old, "new": c.new}).decode() + "\n")
        elif c.op == "added":
            out.write(f"+ {c.pointer or '/'}: {preview(c.new, 100)}\n")
        elif c.op == "removed":
            out.write(f"- {c.pointer or '/'}: {preview(c.old, 100)}\n")
        else:
            out.write(f"~ {c.pointer or '/'}: {preview(c.old, 48)} -> {preview(c.new, 48)}\n")
    if not changes and not args.json:
        out.write("no changes\n")
    return 0
