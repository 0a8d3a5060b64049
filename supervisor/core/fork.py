"""Fork a run: a new run directory that continues from any record of another run.

``fork(run_dir, at_seq)`` builds a new run directory whose journal is the
effective history as it stood right after the record ``at_seq`` (the same
definition ``state_at`` uses, so a seq inside an abandoned branch forks that
branch), then:

* every copied record is re-numbered (``seq`` from 0, a new ``id``) and keeps its
  original position as ``origin_seq`` and ``origin_id``; ``parent``/``context``
  links and a rollback's ``checkpoint_seq`` are translated to the new numbers
  (the original value kept as ``origin_checkpoint_seq``), so rollbacks fold the same way and
  ``Run.rollbacks`` still counts them;
* the checkpoint files those records name are copied (their ``seq`` translated);
* a ``fork`` record names the origin (run directory, run id, seq, record id);
* a checkpoint named ``fork`` holds the full state as of ``at_seq``, so
  ``state_at`` on the fork starts from it and a rollback can return to the fork point;
* the model calls the proxy recorded in that history (``llm.jsonl``: each record whose ``ts`` is not after
  the fork point's and not on a branch a rollback of that history abandoned) are copied into the fork's
  ``llm.jsonl``, re-numbered from 0 (``origin_seq`` kept), their bodies' blobs defined again where the copy first
  uses them, and the ``llm call served`` notes of the copied calls with them: the proxy of a run on the fork
  serves those calls;
* ``run.json`` is new: a fresh id, ``status: "forked"``, ``forked_from``, and the
  origin's ``cwd`` and ``command`` (with an argument naming the origin's run
  directory pointed at the fork), so ``supervise --run-dir FORK`` can start the same agent on it;
* when the origin declares a workspace, the fork gets its own (:mod:`.fork_workspace`): the files in effect
  at ``at_seq`` materialised in a new directory, declared in ``run.json``, and the recorded ``cwd`` and the
  arguments that named the original's workspace pointed at it.

The original is only read. The fork is assembled in a hidden temporary
directory beside the target and renamed into place, so a crash leaves either no
fork or a complete one (plus, at worst, a ``.fork-*.tmp`` directory to delete).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson

from ..errors import ForkError, RunDirError, SupervisorError
from . import checkpoints, llm_calls, rundir
from . import history as history_mod
from .command import moved_command, moved_cwd, recorded_cwd
from .fork_workspace import ForkWorkspace, default_workspace, plan
from .records import Kind, Record

__all__ = ["FORK_CHECKPOINT", "ForkError", "default_target", "default_workspace", "fork"]

FORK_CHECKPOINT = "fork"
_DUMPS = orjson.OPT_NON_STR_KEYS


def default_target(run_dir: Path, at_seq: int) -> Path:
    """``<run>-fork-<seq>`` beside the original; ``-2``, ``-3``... if taken. Never an existing directory."""
    base = run_dir.parent / f"{run_dir.stem if run_dir.is_file() else run_dir.name}-fork-{at_seq}"
    cand, n = base, 1
    while cand.exists():
        n += 1
        cand = base.with_name(f"{base.name}-{n}")
    return cand


def _check_target(origin: Path, to: Path) -> None:
    o, t = origin.resolve(), to.resolve()
    if t == o or o in t.parents:
        raise ForkError(f"{to} is inside the run being forked; choose a directory outside {origin} (the original stays untouched)")
    if to.exists():
        if not to.is_dir():
            raise ForkError(f"{to} exists and is a file; choose a new directory for the fork")
        if any(to.iterdir()):
            raise ForkError(f"{to} exists and is not empty; choose a new directory for the fork (nothing was overwritten)")


def fork(
    run_dir: Path, at_seq: int, to: Path | None = None, *, history: history_mod.History | None = None,
    workspace: Path | None = None,
) -> Path:
    """Create the fork of ``run_dir`` at record ``at_seq``; return its directory.

    ``history`` may be passed if the caller already loaded ``run_dir``'s journal. ``workspace``: where the
    fork's files go when the origin has a workspace (default: :func:`default_workspace`); the fork's
    ``run.json`` names it (``supervisor.core.workspace.settings_of``).
    """
    h = history if history is not None else history_mod.load(run_dir)
    at_rec = _record_at(run_dir, h, at_seq)
    target = to if to is not None else default_target(run_dir, at_seq)
    _check_target(run_dir, target)
    ws = plan(run_dir, at_seq, target, workspace)
    prefix = [e for e in h.entries if (e["seq"] if isinstance(e, dict) else e.seq) <= at_seq]
    path = history_mod.fold(prefix).effective
    state = history_mod.state_at(run_dir, h, at_seq)
    origin_meta = rundir.read_run_json(run_dir) if run_dir.is_dir() else {"format": 0}
    origin_id = str(origin_meta.get("id") or (run_dir.stem if run_dir.is_file() else run_dir.name))

    parent = target.resolve().parent
    rundir.ensure_dir(parent)
    tmp = parent / f".fork-{os.urandom(4).hex()}.tmp"
    try:
        tmp.mkdir(mode=rundir.DIR_MODE)
    except OSError as e:
        raise RunDirError(f"cannot create the fork in {parent}: {e.strerror}; choose another --to") from None
    try:
        _build(tmp, target, run_dir, path, state, origin_id, at_seq, at_rec, origin_meta, len(h.problems), ws)
        if ws is not None:
            # the files first: a crash between the renames leaves a workspace without a fork, never the reverse
            ws.materialise(run_dir)
            ws.move_into_place()
        _move_into_place(tmp, target)
    except OSError as e:
        _discard(tmp, ws)
        raise RunDirError(f"cannot create the fork at {target}: {e.strerror or e}; nothing was written there") from None
    except BaseException:
        _discard(tmp, ws)
        raise
    return target


def _discard(tmp: Path, ws: ForkWorkspace | None) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    if ws is not None:
        ws.discard()


def _record_at(run_dir: Path, h: history_mod.History, at_seq: int) -> Record:
    """The record the fork is made at; a ``ForkError`` naming the seqs there are if there is none."""
    # history.load() parses every line (no LazyRecord): records are plain dicts
    by_seq: dict[int, Record] = {e["seq"]: e for e in h.entries if isinstance(e, dict)}
    if at_seq not in by_seq:
        last = max(by_seq) if by_seq else -1
        raise ForkError(f"no record with seq {at_seq} in {run_dir} (seqs 0 to {last}); see 'agent-supervisor log {run_dir}'")
    return by_seq[at_seq]


def _build(
    tmp: Path,
    target: Path,
    origin: Path,
    path: list[Record],
    state: Any,
    origin_id: str,
    at_seq: int,
    at_rec: Record,
    origin_meta: dict[str, Any],
    bad_lines: int,
    ws: ForkWorkspace | None,
) -> None:
    id_prefix = "f" + os.urandom(4).hex()
    lines = _renumbered(path, id_prefix, origin, tmp)
    n = len(lines)
    steps = sum(1 for r in path if r.get("kind", Kind.STEP) == Kind.STEP and r.get("error") is None)
    now = rundir.utc_now()
    fork_rec: Record = {
        "kind": Kind.FORK,
        "seq": n,
        "id": f"{id_prefix}{n:x}",
        "ts": now,
        "origin": {"run_dir": str(origin.resolve()), "run_id": origin_id, "seq": at_seq, "id": at_rec.get("id")},
        "records": n,
        "pos": steps,
    }
    if bad_lines:
        fork_rec["skipped_bad_lines"] = bad_lines  # they stay in the original, shown by 'log'
    lines.append(orjson.dumps(fork_rec, option=_DUMPS) + b"\n")
    cp_file = checkpoints.write_checkpoint(tmp, FORK_CHECKPOINT, seq=n + 1, pos=steps, ts=now, state=state)
    cp_rec: Record = {"kind": Kind.CHECKPOINT, "seq": n + 1, "id": f"{id_prefix}{n + 1:x}", "ts": now,
                      "name": FORK_CHECKPOINT, "pos": steps, "file": cp_file}
    lines.append(orjson.dumps(cp_rec, option=_DUMPS) + b"\n")
    _write_new(tmp / rundir.JOURNAL, b"".join(lines))
    calls = _calls_until(origin, path, at_rec)
    if calls:
        _write_new(tmp / llm_calls.CALLS, calls)
    meta: dict[str, Any] = {
        "id": rundir.new_run_id(),
        "uid": rundir.new_uid(),
        "created": now,
        "status": "forked",
        "forked_from": fork_rec["origin"],
        "format": rundir.FORMAT,
    }
    _with_origin_command(meta, origin, target, origin_meta, ws)
    if ws is not None:
        meta["workspace"] = ws.run_json()
        ws.fill_store(origin, tmp, path, n + 1, FORK_CHECKPOINT)
    rundir.write_run_json(tmp, meta)


def _renumbered(path: list[Record], id_prefix: str, origin: Path, tmp: Path) -> list[bytes]:
    """The effective path's records as the fork's lines: new seqs and ids, links and checkpoints following them.

    The original's seq and id stay in ``origin_seq`` and ``origin_id``; checkpoint files are copied into ``tmp``.
    """
    new_seq: dict[int, int] = {}
    new_id: dict[str, str] = {}
    for i, r in enumerate(path):
        new_seq[r["seq"]] = i
        if isinstance(r.get("id"), str):
            new_id[r["id"]] = f"{id_prefix}{i:x}"
    lines: list[bytes] = []
    for i, r in enumerate(path):
        rec = dict(r)
        rec["origin_seq"] = r["seq"]
        if "id" in r:
            rec["origin_id"] = r["id"]
        rec.pop("recorded_seq", None)  # origin_seq says it: the reader added it for a mismatched seq field
        rec["seq"] = i
        rec["id"] = f"{id_prefix}{i:x}"
        for link in ("parent", "context"):
            if isinstance(rec.get(link), str) and rec[link] in new_id:
                rec[link] = new_id[rec[link]]
        if rec.get("kind") == Kind.ROLLBACK and isinstance(rec.get("checkpoint_seq"), int):
            rec["origin_checkpoint_seq"] = rec["checkpoint_seq"]
            rec["checkpoint_seq"] = new_seq.get(rec["checkpoint_seq"], rec["checkpoint_seq"])
        if rec.get("kind") == Kind.CHECKPOINT and isinstance(rec.get("file"), str) and origin.is_dir():
            _copy_checkpoint(origin, tmp, rec["file"], i)
        lines.append(orjson.dumps(rec, option=_DUMPS) + b"\n")
    return lines


def _calls_until(origin: Path, path: list[Record], at_rec: Record) -> bytes:
    """The lines of the fork's ``llm.jsonl``: the origin's call records of the copied history (``ts`` not after
    the fork point's, else than the last copied record's; not in a span a rollback up to there abandoned),
    re-numbered, blobs and prefixes written anew in the copy's order (:class:`llm_calls.Compactor`), and the notes
    naming them."""
    if not origin.is_dir() or not (origin / llm_calls.CALLS).exists():
        return b""
    until = _fork_time(path, at_rec)
    if until is None:
        return b""
    spans = [(t0, t1) for t0, t1 in llm_calls.abandoned_spans(origin) if t1 <= until]
    new_seq: dict[int, int] = {}
    compactor = llm_calls.Compactor()
    lines: list[bytes] = []
    for r in llm_calls.read_calls(origin):
        ts = r.get("ts")
        if not isinstance(ts, str) or ts > until or llm_calls.in_spans(ts, spans):
            continue
        rec = _renumbered_call(r, len(lines), new_seq)
        if rec is None:
            continue  # a note about a call the fork has not
        _compact_body(rec, compactor)
        lines.append(orjson.dumps(rec, option=_DUMPS) + b"\n")
    return b"".join(lines)


def _fork_time(path: list[Record], at_rec: Record) -> str | None:
    """The time the copied calls may not be after: the fork point's ``ts``, else the last copied record's (or None)."""
    until = at_rec.get("ts")
    if isinstance(until, str):
        return until
    return max((r["ts"] for r in path if isinstance(r.get("ts"), str)), default=None)


def _renumbered_call(r: Record, seq: int, new_seq: dict[int, int]) -> dict[str, Any] | None:
    """A call record as the fork's ``seq`` (its origin's in ``new_seq``), or a note pointed at the copied call it
    names; ``None`` for a note about a call the fork has not."""
    rec = {k: v for k, v in r.items() if k != "source"}
    if rec.get("kind", Kind.STEP) != Kind.STEP:
        served = rec.get("served")
        if type(served) is not int or served not in new_seq:
            return None
        rec["served"] = new_seq[served]
    elif type(r.get("seq")) is int:
        new_seq[r["seq"]] = seq
    rec["origin_seq"] = rec.get("seq")
    rec["seq"] = seq
    return rec


def _compact_body(rec: dict[str, Any], compactor: llm_calls.Compactor) -> None:
    """The copied call's body with its blobs and prefixes defined anew where the copy first uses them."""
    inputs = rec.get("inputs")
    if isinstance(inputs, dict) and "body" in inputs:
        blobs: dict[str, Any] = {}
        heads: dict[str, str] = {}
        rec["inputs"] = {**inputs, "body": compactor.compact(inputs["body"], blobs, heads)}
        if blobs:
            rec["blobs"] = blobs
        compactor.written(rec["seq"], heads, blobs)


def _with_origin_command(
    meta: dict[str, Any], origin: Path, target: Path, origin_meta: dict[str, Any], ws: ForkWorkspace | None
) -> None:
    """The origin's working directory (resolved) and command (retargeted at the fork) in the fork's ``run.json``.

    With a workspace, a working directory in the original's is the same place in the fork's, and the
    arguments that name the original's workspace name the fork's (those that name the run directory first:
    it may lie in the workspace).
    """
    cwd = recorded_cwd(origin, origin_meta)
    moves = [(origin.resolve(), target.resolve())]
    new_cwd = None
    if ws is not None:
        moves.append((ws.origin.root, ws.root))
        new_cwd = moved_cwd(cwd, ws.origin.root, ws.root)
    if "cwd" in origin_meta or new_cwd is not None:
        meta["cwd"] = str(new_cwd or cwd)  # a relative cwd is relative to the origin, not to the fork: written resolved
    cmd = origin_meta.get("command")
    if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        meta["command"], _ = moved_command(cmd, moves, cwd, new_cwd)


def _copy_checkpoint(origin: Path, tmp: Path, fname: str, seq: int) -> bool:
    """Copy one checkpoint file, its ``seq`` translated; ``False`` if the original is missing or unreadable."""
    try:
        doc = checkpoints.load_checkpoint(origin, fname)
    except SupervisorError:
        return False  # state_at falls back to the patches, as it does in the original
    doc["origin_seq"] = doc.get("seq")
    doc["seq"] = seq
    d = rundir.ensure_dir(tmp / rundir.CHECKPOINTS)
    rundir.atomic_write(d / Path(fname).name, orjson.dumps(doc, option=_DUMPS))
    return True


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, rundir.FILE_MODE)
    try:
        rundir.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished fork to ``target``; an empty existing directory is replaced, anything else refused."""
    try:
        os.rename(tmp, target)  # atomic; replaces only an empty directory
    except OSError as e:
        raise RunDirError(f"cannot create the fork at {target}: {e.strerror}; choose another --to") from None
    rundir.fsync_dir(target.resolve().parent)
