"""Headless inspection: ``log``, ``state`` and ``diff``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from ..core import history as history_mod
from ..core import state as state_mod
from ..core.records import DAMAGED, Kind, Record, preview, step_name
from ..core.rundir import check_readable_run_dir
from ..errors import SupervisorError


def register(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("log", help="print the effective history of a run", description="Print the effective history of a run, one line a record.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory or a bare journal .jsonl")
    p.add_argument("--json", action="store_true", help="print normalised records as JSON lines")
    p.add_argument("--all", action="store_true", help="include abandoned branches (marked)")
    p.set_defaults(func=cmd_log)

    p = sub.add_parser("state", help="print the agent's state at a step", description=(
        "Print the agent's state at a record (default: the last). The state at a step is the state after its "
        "result: it includes what the agent did with the step's output before the next step."))
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


def format_record(rec: Record, pairing: history_mod.Pairing | None = None) -> str:
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
        if kind == Kind.STEP:
            if rec.get("error") is not None:
                err = rec["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                body += f"  ERROR {preview(msg, 70)}"
            else:
                body += f"  -> {preview(rec.get('output'), 70)}"
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


def cmd_log(args: argparse.Namespace) -> int:
    h = _load(args.run_dir)
    abandoned = h.abandoned_seqs if args.all else set()
    # a damaged line is shown in its place (as the fold keeps it); a foreign one only as a warning
    records = (
        [e.record() if isinstance(e, history_mod.BadLine) else e for e in h.entries if not isinstance(e, history_mod.BadLine) or not e.foreign]
        if args.all
        else h.effective
    )
    # overlapping steps (concurrent): every begin and step shows its pos, and unfinished begins are marked
    pairing = history_mod.Pairing()
    for rec in records:
        pairing.add(rec)
    out = sys.stdout.buffer
    for rec in records:
        if args.json:
            line = dict(rec)
            if rec["seq"] in abandoned:
                line["abandoned"] = True
            out.write(orjson.dumps(line, option=orjson.OPT_NON_STR_KEYS) + b"\n")
        else:
            mark = "~ " if rec["seq"] in abandoned else "  " if args.all else ""
            out.write((mark + format_record(rec, pairing) + "\n").encode())
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


def _state(run_dir: Path, h: history_mod.History, seq: int) -> Any:
    """The state at ``seq`` as the TUI shows it (for a step: after its result); a snapshot that could
    not be used (the patches rebuilt the state without it) is a one-line warning."""
    problems: list[str] = []
    try:
        st = history_mod.state_at(run_dir, h, seq, after_result=True, problems=problems) if seq >= 0 else {}
    except ValueError as e:  # a patch that does not apply: a damaged record or snapshot
        raise SupervisorError(f"cannot rebuild the state at seq {seq}: {e}; see 'agent-supervisor log --json {run_dir}'") from None
    for p in problems:
        print(f"warning: {p}; the state was rebuilt from the journal's patches", file=sys.stderr)
    return st


def cmd_state(args: argparse.Namespace) -> int:
    h = _load(args.run_dir)
    st = _state(args.run_dir, h, resolve_point(h, args.at or "end"))
    sys.stdout.buffer.write(orjson.dumps(st, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    h = _load(args.run_dir)
    a = _state(args.run_dir, h, resolve_point(h, args.a))
    b = _state(args.run_dir, h, resolve_point(h, args.b))
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
