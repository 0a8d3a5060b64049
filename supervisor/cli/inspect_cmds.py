"""Headless inspection: ``log``, ``state`` and ``diff``."""

from __future__ import annotations

import argparse
import errno
import fnmatch
import re
import sys
from collections import deque
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from ..core import history as history_mod
from ..core import state as state_mod
from ..core import stream
from ..core.cursor import StateCursor
from ..core.journal_reader import JournalReader
from ..core.records import DAMAGED, BadLine, Kind, Record, preview, step_name
from ..core.rundir import check_readable_run_dir
from ..core.usage import call_of, step_tokens
from ..export.pricing import step_cost
from ..errors import SupervisorError


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


CHANGED_INPUTS = "changed inputs"
"""The ``message`` of the SDK's note for a step served on resume whose inputs differ from the call's."""


def call_summary(rec: Record) -> str:
    """What ``log`` adds to a model or tool call's step line: ``  [120 in (100 cached), 30 out, $0.000210]``
    (tokens summed over its ``usage``; the cost when the price table knows the model) or ``  [tool search]``.
    Nothing for a step without usage or ``call``, or with a malformed one (never a wrong figure)."""
    call = call_of(rec)
    if call is not None and call.get("kind") == "tool":
        name = call.get("tool")
        return f"  [tool {name}]" if isinstance(name, str) and name else ""
    tokens = step_tokens(rec)
    if tokens is None:
        return ""
    cached = f" ({tokens.cached} cached)" if tokens.cached else ""
    cost = step_cost(rec)
    price = f", ${cost:.6f}" if cost is not None else ""
    return f"  [{tokens.input} in{cached}, {tokens.output} out{price}]"


def format_record(rec: Record, pairing: history_mod.Pairing | stream.StreamPairing | None = None) -> str:
    """One line for a record, as ``log`` prints it.

    With ``pairing`` (the begins of the records shown paired with their steps by
    ``pos``): a begin whose step never came says so (in flight, or interrupted by
    the end of its process attempt), and if steps overlapped (concurrent steps) a
    begin or step shows its ``pos`` after the name (``search:a #4``), so a reader
    pairs a step with its begin however many records come between.
    """
    kind = rec.get("kind", Kind.STEP)
    head = f"{rec.get('seq', ''):>6} {str(rec.get('ts', ''))[:23]:23} {kind:10}"
    if kind in (Kind.STEP, Kind.BEGIN):
        body = step_name(rec)
        if pairing is not None and pairing.overlapped and rec.get("pos") is not None:
            body += f" #{rec.get('pos')}"
        if kind == Kind.BEGIN and pairing is not None:
            seq = rec.get("seq")
            if seq in pairing.interrupted:
                body += "  (interrupted: no step record in its attempt)"
            elif any(b.get("seq") == seq for b in pairing.open.values()):
                body += "  (in flight: no step record yet)"
        if kind == Kind.STEP:  # a model or tool call's step also shows its tokens and cost, or its tool
            if rec.get("error") is not None:
                err = rec["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                body += f"  ERROR {preview(msg, 70)}"
            else:
                body += f"  -> {preview(rec.get('output'), 70)}"
            if "usage" in rec or "call" in rec:
                body += call_summary(rec)
    elif kind == Kind.CHECKPOINT:
        body = f"{rec.get('name')} ({rec.get('file')})"
    elif kind == Kind.ROLLBACK:
        body = f"to {rec.get('checkpoint') or 'start'}: {rec.get('reason', '')}"
    elif kind == Kind.START:
        body = f"attempt {rec.get('attempt')} pid {rec.get('pid')}" + (" (resume)" if rec.get("resume") else "")
    elif kind == Kind.NOTE and rec.get("message") == CHANGED_INPUTS:
        body = f"CHANGED INPUTS: step {step_name(rec)!r} #{rec.get('pos')} was served with the output recorded for other inputs"
    elif kind == DAMAGED:
        held = f"step position {rec.get('pos')}" if rec.get("holds_step") else f"was {rec.get('was')!r}"
        text = repr(str(rec.get("text") or ""))[1:-1]  # escaped: NUL and control bytes never reach the terminal
        body = f"{rec.get('file')}:{rec.get('line')}: {rec.get('reason')} ({held}): {preview(text, 40)}"
    else:
        body = preview({k: v for k, v in rec.items() if k not in ("kind", "seq", "ts", "id", "pos")}, 90)
    return f"{head} {body}"


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
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


class _Filter:
    """``--since``, ``--kind``, ``--step``: which records ``log`` prints (``--tail`` is applied after them)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.kinds = set(args.kind) if args.kind else None
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
        """``--since``: from the first record at or after the point on (a record without a time after it too)."""
        if self.since_seq is not None:
            return item.seq >= self.since_seq
        ts = item.time()
        if ts is None:
            return False
        if _ISO_TS.fullmatch(ts):
            return ts >= self.since_text  # type: ignore[operator]
        try:
            t = _parse_time(ts)
        except SupervisorError:
            return False
        return t >= self.since_time  # type: ignore[operator]

    def __call__(self, item: stream.Item) -> bool:
        """Whether ``log`` prints the record: ``--kind`` and ``--step`` first, then ``--since`` (from the
        first record they choose that is at or after the point on)."""
        if self.kinds is not None and item.kind not in self.kinds:
            return False
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


def _tail_items(args: argparse.Namespace, keep: _Filter) -> tuple[list[stream.Item], stream.StreamPairing]:
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
        rolled = any(isinstance(e, dict) and e.get("kind") == Kind.ROLLBACK for e in entries)
        pl = stream.plan(args.run_dir) if rolled else stream.Plan()
        if rolled and last != pl.count - 1:
            # the seq fields are not the lines' positions (a hand-edited journal: the reader's tail trusts
            # them), and the cuts are by position: the whole stream, keeping the last N
            return _tail_of_stream(args, keep, pl)
        walk = stream.Walk(args.run_dir, pl, all_=args.all)
        keep.reached = args.since is None
        pairing = stream.StreamPairing()
        shown: deque[stream.Item] = deque(maxlen=n)
        for item in walk.entries(entries, _warn if whole or n <= 0 else None):
            pairing.add(item)
            if not keep.active or keep(item):
                shown.append(item)
        if len(shown) >= n or whole:
            if not whole:  # the warnings about the lines read, once, in seq order
                first = stream.entry_seq(entries[0])
                problems = [e for e in entries if isinstance(e, BadLine)]
                problems += [BadLine("journal", 0, s, history_mod.MISSING_TARGET, "") for s in pl.missing if s >= first]
                for bad in sorted(problems, key=lambda b: b.seq):
                    _warn(bad)
            return list(shown), pairing
        k *= 4


def _tail_of_stream(args: argparse.Namespace, keep: _Filter, pl: stream.Plan) -> tuple[list[stream.Item], stream.StreamPairing]:
    """``--tail`` by the two passes over the whole journal (the last N kept as they go by)."""
    pairing = stream.StreamPairing()
    shown: deque[stream.Item] = deque(maxlen=args.tail)
    keep.reached = args.since is None
    for item in stream.Walk(args.run_dir, pl, all_=args.all).items(_warn):
        pairing.add(item)
        if not keep.active or keep(item):
            shown.append(item)
    return list(shown), pairing


_BATCH = 4096


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


class _Text:
    """:func:`format_record` for a canonical ``begin`` or ``step`` line (see :mod:`supervisor.core.stream`),
    from what the walk read in its bytes: a begin is not parsed at all, a step only for its output."""

    def __init__(self, pairing: stream.StreamPairing, all_: bool) -> None:
        self.pairing = pairing
        self.all = all_
        self.overlapped = pairing.overlapped
        self.interrupted = pairing.interrupted
        self.open = {int(b["seq"]) for b in pairing.open.values()}

    def line(self, item: stream.Item) -> bytes:
        """The line of a canonical :class:`stream.Item`."""
        seq, kind, pos, raw, _, ab, name, ts = item
        return self.canon(seq, kind == Kind.STEP, pos, raw, ab, name, ts)  # type: ignore[arg-type]

    def canon(self, seq: int, step: bool, pos: int, raw: bytes, ab: bool, name: bytes, ts: bytes) -> bytes:
        """The line, as bytes: a canonical line's name and ``ts`` are its bytes (no escapes in them: else
        decoded), so a begin's line is made without a decode or an encode."""
        if b"\\" in name or not ts.isascii():
            text = self._text(stream.Item(seq, Kind.STEP.value if step else _BEGIN_S, pos, raw, None, ab, name, ts)).encode()
        else:
            text = self._bytes(seq, step, pos, raw, name, ts)
        if self.all:
            return (b"~ " if ab else b"  ") + text
        return text

    def _bytes(self, seq: int, step: bool, pos: int, raw: bytes, name: bytes, ts: bytes) -> bytes:
        head = b"%6d %-23s %s %s" % (seq, ts[:23], b"step      " if step else b"begin     ", name)
        if self.overlapped:
            head += b" #%d" % pos
        if not step:
            if seq in self.interrupted:
                return head + b"  (interrupted: no step record in its attempt)"
            if seq in self.open:
                return head + b"  (in flight: no step record yet)"
            return head
        return head + self.tail(raw)

    def tail(self, raw: bytes) -> bytes:
        """What a canonical step line's text adds after its name: ``  -> `` the output's preview, and the call
        summary (:func:`format_record`'s)."""
        rec = orjson.loads(raw)
        out = rec.get("output")
        if type(out) is str and len(out) <= 70 and "\n" not in out:
            tail = "  -> " + out
        else:
            tail = f"  -> {preview(out, 70)}"
        if "usage" in rec or "call" in rec:
            tail += call_summary(rec)
        return tail.encode()

    def other(self, item: stream.Item) -> bytes:
        """The line of a record that is not canonical (parsed)."""
        text = format_record(item.rec, self.pairing).encode()  # type: ignore[arg-type]
        if self.all:
            return (b"~ " if item.abandoned else b"  ") + text
        return text

    def _text(self, item: stream.Item) -> str:
        seq, kind, pos, raw = item[0], item[1], item[2], item[3]
        ts = item[7].decode()  # type: ignore[union-attr]
        name = item[6]
        body = orjson.loads(b'"' + name + b'"') if b"\\" in name else name.decode()  # type: ignore[operator,union-attr]
        if self.overlapped:
            body += f" #{pos}"
        if kind == Kind.BEGIN:
            if seq in self.interrupted:
                body += "  (interrupted: no step record in its attempt)"
            elif seq in self.open:
                body += "  (in flight: no step record yet)"
            return f"{seq:>6} {ts[:23]:23} {kind:10} {body}"
        rec = orjson.loads(raw)  # type: ignore[arg-type]
        body += f"  -> {preview(rec.get('output'), 70)}"
        if "usage" in rec or "call" in rec:
            body += call_summary(rec)
        return f"{seq:>6} {ts[:23]:23} {kind:10} {body}"


_BEGIN_S = Kind.BEGIN.value
_AFTER_VALUE = (b",", b"}")


def cmd_log(args: argparse.Namespace) -> int:
    """Stream the effective history: a first pass finds the rollbacks' cuts from the raw bytes, the second
    prints each record as it is read (see :mod:`supervisor.core.stream`); text needs one more pass before
    printing for the pairing marks (a begin's step comes after it)."""
    check_readable_run_dir(args.run_dir)
    if args.tail is not None and args.tail < 0:
        raise SupervisorError(f"--tail {args.tail}: pass a number of records, 0 or more")
    keep = _Filter(args)
    out = sys.stdout.buffer
    all_ = args.all
    try:
        if args.tail is not None:
            items, pairing = _tail_items(args, keep)
            source: Iterable[stream.Item] = items
        else:
            pl = stream.plan(args.run_dir, pairs=not args.json)
            pairing = stream.StreamPairing()
            if pl.paired:  # every begin is followed by its step: no look ahead needed
                if pl.open_at_end is not None:
                    pairing.open[pl.open_at_end[1]] = {"seq": pl.open_at_end[0]}
            elif not args.json:
                for item in stream.Walk(args.run_dir, pl, all_=all_).items():
                    pairing.add(item)
            source = stream.Walk(args.run_dir, pl, all_=all_, kinds=keep.kinds).items(_warn)
            if keep.active:
                source = filter(keep, source)
        buf: list[bytes] = []
        if args.json and args.tail is None and not keep.active:  # the plain stream: a chunk's lines at a time
            for lines in stream.Walk(args.run_dir, pl, all_=all_).json_lines(_warn):
                if lines:
                    lines.append(b"")
                    _write(out, b"\n".join(lines))
        elif args.json:
            for item in source:
                raw = item.raw
                if raw is not None:
                    buf.append(raw[:-1] + b',"abandoned":true}' if item.abandoned else raw)
                else:
                    line = dict(item.rec)  # type: ignore[arg-type]
                    if item.abandoned:
                        line["abandoned"] = True
                    buf.append(orjson.dumps(line, option=orjson.OPT_NON_STR_KEYS))
                if len(buf) >= _BATCH:
                    buf.append(b"")
                    _write(out, b"\n".join(buf))
                    buf.clear()
        else:
            text = _Text(pairing, all_)
            if args.tail is None and not keep.active:  # the plain stream: a chunk's lines at a time
                walk = stream.Walk(args.run_dir, pl, all_=all_)
                summary = None if text.overlapped else call_summary  # with #pos: every canonical line through canon
                for lines in walk.rendered(text.canon, text.other, _warn, summary=summary, marked=text.interrupted | text.open):
                    if lines:
                        lines.append(b"")
                        _write(out, b"\n".join(lines))
            else:
                for item in source:
                    buf.append(text.line(item) if item[3] is not None else text.other(item))
                    if len(buf) >= _BATCH:
                        buf.append(b"")
                        _write(out, b"\n".join(buf))
                        buf.clear()
        if buf:
            buf.append(b"")
            _write(out, b"\n".join(buf))
    except PermissionError:
        raise _permission(args.run_dir) from None
    out.flush()
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
