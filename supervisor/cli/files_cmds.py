"""Headless view of a run's workspace: ``files`` lists its snapshots and the files each step changed;
``--at`` shows one record's, ``--diff`` the workspace at two points, ``--restore`` writes a snapshot elsewhere.

The run directory's part is described in ``docs/workspace.md``; the reading is :mod:`supervisor.views.files`
and :mod:`supervisor.core.workspace` (imported here, when the command runs: not on the other commands' path).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from ..core import stream
from ..core.rundir import check_readable_run_dir
from ..errors import SupervisorError
from ..views.files import NO_WORKSPACE, FileChange, FilesIndex, RecordFiles, change_lines, has_workspace, merge
from ..views.fmt import fmt_bytes
from .inspect_cmds import resolve_in_plan

EXIT_NO_WORKSPACE = 1
"""The run has no workspace: nothing wrong with the command line, nothing to show."""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``files``."""
    p = sub.add_parser("files", help="the workspace's snapshots and the files each step changed", description=(
        "The run's workspace (docs/workspace.md): its committed snapshots and the changes the supervisor recorded, "
        "one line each; --at, --diff or --restore for one point. SEQ is a record's seq or a checkpoint name "
        "('start': the workspace before the first record, 'end': the last record)."))
    p.add_argument("run_dir", type=Path, metavar="RUN", help="a run directory")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--at", metavar="SEQ", help="what the record at SEQ changed (its step's files, with diffs); "
                      "for a checkpoint or a rollback, the files of its snapshot")
    what.add_argument("--diff", metavar="A..B", help="the workspace at A against B, a unified diff of each text file "
                      "('A..': against the workspace as it is now)")
    what.add_argument("--restore", metavar="SEQ", help="write the workspace as of SEQ into --to DIR (for a rollback's "
                      "seq: the files of the branch it abandoned)")
    p.add_argument("--to", type=Path, metavar="DIR", help="where --restore writes: a new or empty directory")
    p.add_argument("--force", action="store_true", help="let --restore write into the live workspace (DIR its root: "
                   "made equal to the snapshot, ignored paths untouched)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_files)


def cmd_files(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    if (args.to is not None or args.force) and args.restore is None:
        raise SupervisorError("--to and --force go with --restore SEQ: e.g. "
                              f"'agent-supervisor files {run_dir} --restore 12 --to at-12'")
    if args.restore is not None and args.to is None:
        raise SupervisorError(f"--restore {args.restore} needs --to DIR: a new or empty directory to write the files into")
    check_readable_run_dir(run_dir)
    if not run_dir.is_dir() or not has_workspace(run_dir):
        print(f"agent-supervisor: {run_dir} {NO_WORKSPACE}", file=sys.stderr)
        return EXIT_NO_WORKSPACE
    if args.at is not None:
        return _at(args)
    if args.diff is not None:
        return _diff(args)
    if args.restore is not None:
        return _restore(args)
    return _list(args)


def _out(doc: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str) + b"\n")


def _plan(run_dir: Path) -> stream.Plan:
    """The journal's first pass (seqs, checkpoint names, rollbacks); its problems printed as warnings."""
    pl = stream.plan(run_dir)
    for bad in pl.problems:
        print(f"warning: {bad}", file=sys.stderr)
    return pl


def _point(pl: stream.Plan, ref: str) -> int:
    """A point given on the line: ``start`` (-1: before the first record), a seq, ``end`` or a checkpoint name."""
    ref = ref.strip()
    if ref == "start":
        return -1
    if not ref:
        raise SupervisorError("an empty point: pass a seq, a checkpoint name, 'start' or 'end'")
    return resolve_in_plan(pl, ref)


def _files_index(run_dir: Path) -> FilesIndex:
    from ..core.events import read_events

    return FilesIndex(read_events(run_dir))


def _ops(changes: tuple[FileChange, ...] | list[FileChange]) -> str:
    return ", ".join(f"{c.mark} {c.path}" + (f" ({c.flag.replace('_', ' ')})" if c.flag else "") for c in changes)


# ---------------------------------------------------------------------------------------------- the list
def _list(args: argparse.Namespace) -> int:
    from ..core import workspace

    run_dir: Path = args.run_dir
    settings = workspace.settings_of(run_dir)
    refs = workspace.committed(run_dir)
    index = _files_index(run_dir)
    if args.json:
        _out({"run": str(run_dir), "workspace": settings.to_json() if settings else None,
              "snapshots": [r.to_json() for r in refs], "changes": [_event_json(fe) for fe in index.events]})
        return 0
    w = sys.stdout.write
    if settings is not None:
        ignore = f" (also ignored: {', '.join(settings.ignore)})" if settings.ignore else ""
        w(f"workspace {settings.root}{ignore}\n")
    w(f"\nsnapshots ({len(refs)} committed)\n")
    if refs:
        w(f"  {'seq':>6}  {'for':<10}  {'name':<20}  {'files':>6}  {'bytes':>8}  {'stored':>6}  by\n")
    for r in refs:
        seq = "-" if r.seq is None else str(r.seq)
        w(f"  {seq:>6}  {r.for_:<10}  {r.name or '':<20}  {r.files:>6}  {fmt_bytes(r.bytes):>8}  {r.stored:>6}  {r.by}\n")
    w(f"\nchanges recorded ({len(index.events)})\n")
    for fe in index.events:
        att = f"attempt {fe.attempt}" if fe.attempt is not None else "attempt ?"
        w(f"  #{fe.seq:<5} {att:<10} {fe.describe()}: {_ops(fe.changes)}\n")
    if not index.events:
        w("  none (the supervisor records them while it watches the workspace)\n")
    return 0


def _event_json(fe: Any) -> dict[str, Any]:
    return {"seq": fe.seq, "attempt": fe.attempt, "during": fe.during, "ts": fe.ts,
            "steps": [{"step": n, "pos": p} for n, p in fe.steps],
            "changes": [{"path": c.path, "op": c.op, "before": c.before, "after": c.after, "flag": c.flag, "link": c.link}
                        for c in fe.changes]}


# ---------------------------------------------------------------------------------------------- --at
def _at(args: argparse.Namespace) -> int:
    from ..core import workspace
    from ..core.journal_reader import JournalReader

    run_dir: Path = args.run_dir
    pl = _plan(run_dir)
    seq = _point(pl, args.at)
    if seq < 0:
        return _snapshot_out(args, workspace.snapshot_at_checkpoint(run_dir, None), "the start", -1)
    reader = JournalReader(run_dir)
    reader.index()
    rec = reader.get(seq)
    rollbacks = sorted({*pl.cuts, *pl.missing})
    found = _files_index(run_dir).of_record(seq, rec, rollbacks)
    kind = rec.get("kind", "step") if isinstance(rec, dict) else "damaged"
    name = (rec.get("step") or rec.get("name") or "") if isinstance(rec, dict) else ""
    label = f"#{seq} {kind} {name}".rstrip()
    snap: Any = None
    what = ""
    if kind == "checkpoint":
        snap, what = workspace.snapshot_at_checkpoint(run_dir, seq), "the checkpoint's snapshot"
    elif kind == "rollback":
        abandoned = [r for r in workspace.committed(run_dir) if r.for_ == "abandoned" and r.seq == seq]
        snap, what = (abandoned[-1] if abandoned else None), "the abandoned branch's snapshot, taken before the restore"
    store = workspace.Store(run_dir)
    if args.json:
        doc: dict[str, Any] = {"seq": seq, "kind": kind, "name": name or None,
                               "step": [_event_json(fe) for fe in found.step],
                               "between": [_event_json(fe) for fe in found.between]}
        if kind in ("checkpoint", "rollback"):
            doc["snapshot"] = _snapshot_json(store, snap)
        _out(doc)
        return 0
    _print_found(store, label, found)
    if kind in ("checkpoint", "rollback"):
        sys.stdout.write("\n")
        _print_snapshot(store, snap, what, seq)
    return 0


def _print_found(store: Any, label: str, found: RecordFiles) -> None:
    w = sys.stdout.write
    step = merge(c for fe in found.step for c in fe.changes)
    between = merge(c for fe in found.between for c in fe.changes)
    if not step and not between:
        w(f"{label}: no file changed\n")
    if step:
        w(f"{label}: {len(step)} file{'s' if len(step) != 1 else ''} changed by its step\n")
        for fe in found.concurrent():
            paths = ", ".join(c.path for c in fe.changes)
            steps = " and ".join(f"{n} #{p}" for n, p in fe.steps)
            w(f"  ({paths}: changed while {steps} were in flight together; attributed to each)\n")
        _print_changes(store, step)
    if between:
        w(f"after {label}, between steps: {len(between)} file{'s' if len(between) != 1 else ''} changed\n")
        _print_changes(store, between)


def _print_changes(store: Any, changes: list[FileChange]) -> None:
    for c in changes:
        sys.stdout.write(f"{c.mark} {c.path}  {c.op}\n")
        for line in change_lines(store, c):
            sys.stdout.write(f"    {line}\n")


def _snapshot_json(store: Any, ref: Any) -> dict[str, Any] | None:
    if ref is None:
        return None
    files = store.manifest(ref.snapshot).files
    return {**ref.to_json(), "paths": {p: e.to_json() for p, e in sorted(files.items())}}


def _print_snapshot(store: Any, ref: Any, what: str, seq: int) -> None:
    w = sys.stdout.write
    if ref is None:
        w(f"no snapshot of the workspace at #{seq}: it was not taken (no workspace then) or never committed\n")
        return
    w(f"{what}: {ref.files} file{'s' if ref.files != 1 else ''}, {fmt_bytes(ref.bytes)} "
      f"({ref.stored} new object{'s' if ref.stored != 1 else ''} stored, by {ref.by})\n")
    for path, e in sorted(store.manifest(ref.snapshot).files.items()):
        desc = f"-> {e.target}" if e.t == "l" else "empty directory" if e.t == "d" else \
            fmt_bytes(e.size) + (" executable" if e.mode & 0o111 else "")
        w(f"  {path}  {desc}\n")


def _snapshot_out(args: argparse.Namespace, ref: Any, what: str, seq: int) -> int:
    from ..core import workspace

    store = workspace.Store(args.run_dir)
    if args.json:
        _out({"seq": None, "kind": "start", "snapshot": _snapshot_json(store, ref)})
    else:
        _print_snapshot(store, ref, f"the workspace at {what}", seq)
    return 0


# ---------------------------------------------------------------------------------------------- --diff
def _diff(args: argparse.Namespace) -> int:
    from ..views.files import workspace_diff

    run_dir: Path = args.run_dir
    spec: str = args.diff
    if spec.count("..") != 1:
        raise SupervisorError(f"--diff {spec!r}: pass two points as A..B (e.g. --diff 12..40, --diff plan-done..end), "
                              "or A.. to compare A with the workspace as it is now")
    left, right = spec.split("..")
    pl = _plan(run_dir)
    a = _point(pl, left)
    b = _point(pl, right) if right.strip() else None
    d = workspace_diff(run_dir, a, b)
    label_b = "now" if b is None else ("start" if b < 0 else f"#{b}")
    label_a = "start" if a < 0 else f"#{a}"
    if args.json:
        _out({"a": a, "b": b, "summary": d.summary, "changes": [
            {"path": c.path, "op": c.op, "before": c.before.sha256 if c.before else None,
             "after": c.after.sha256 if c.after else None, "diff": lines}
            for c, lines in zip(d.changes, d.lines, strict=True)]})
        return 0
    w = sys.stdout.write
    w(f"workspace {label_a} -> {label_b}: {d.summary}\n")
    for c, lines in zip(d.changes, d.lines, strict=True):
        w(f"{ {'created': '+', 'changed': '~', 'deleted': '-'}.get(c.op, '?')} {c.path}  {c.op}\n")
        for line in lines:
            w(f"    {line}\n")
    return 0


# ---------------------------------------------------------------------------------------------- --restore
def _restore(args: argparse.Namespace) -> int:
    from ..core import workspace
    from ..core.journal_reader import JournalReader
    from ..views.files import workspace_at

    run_dir: Path = args.run_dir
    to: Path = args.to
    pl = _plan(run_dir)
    seq = _point(pl, args.restore)
    snapshot: str | None = None
    what = "the start" if seq < 0 else f"#{seq}"
    if seq >= 0:
        reader = JournalReader(run_dir)
        reader.index()
        rec = reader.get(seq)
        if isinstance(rec, dict) and rec.get("kind") == "rollback":
            refs = [r for r in workspace.committed(run_dir) if r.for_ == "abandoned" and r.seq == seq]
            if not refs:
                raise SupervisorError(f"the rollback at #{seq} saved no snapshot of the branch it abandoned "
                                      "(the run had no workspace then); pass another SEQ")
            snapshot, what = refs[-1].snapshot, f"the branch the rollback at #{seq} abandoned"
    manifest = workspace.Store(run_dir).manifest(snapshot) if snapshot else workspace_at(run_dir, seq)
    settings = workspace.settings_of(run_dir)
    target = to.resolve()
    root = settings.root if settings is not None else None
    inside = root is not None and (target == root or root in target.parents)
    if inside and not args.force:
        raise SupervisorError(f"{to} is {'the' if target == root else 'inside the'} live workspace ({root}): "
                              "pass --force to write over it, or choose a directory outside it")
    if root is not None and target == root:
        assert settings is not None
        done = _restore_root(run_dir, manifest, snapshot, settings)
        _said(args, {"restored": str(root), "from": what, "changes": done},
              f"the workspace {root} is now as of {what}: {workspace.summary(done)}")
        return 0
    if to.exists() and (not to.is_dir() or any(to.iterdir())):
        raise SupervisorError(f"{to} exists and is not an empty directory; pass a new or empty one (nothing was written)")
    workspace.materialize(run_dir, manifest, to)
    n = len(manifest.files)
    _said(args, {"restored": str(to), "from": what, "files": n},
          f"wrote the workspace as of {what} into {to}: {n} path{'s' if n != 1 else ''}")
    return 0


def _restore_root(run_dir: Path, manifest: Any, snapshot: str | None, settings: Any) -> list[Any]:
    """``workspace.restore`` over the live root. The workspace in effect at a step is a checkpoint's snapshot
    with the recorded changes applied, not always a stored snapshot: its manifest is written to the store
    first (named by its hash, no index line: it commits no snapshot), so the restore reads it as any other."""
    from ..core import workspace

    if snapshot is None:
        snapshot = workspace.Store(run_dir).write_manifest(manifest)
    changes: list[Any] = workspace.restore(run_dir, snapshot, settings.root, settings)
    return changes


def _said(args: argparse.Namespace, doc: dict[str, Any], text: str) -> None:
    if args.json:
        if isinstance(doc.get("changes"), list):
            doc["changes"] = [{"path": c.path, "op": c.op} for c in doc["changes"]]
        _out(doc)
    else:
        print(text)
