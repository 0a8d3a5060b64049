"""Rollback to a checkpoint: the one operation the CLI, the TUI and the supervisor share.

A rollback is a new ``rollback`` record (built by ``history.rollback_record``),
never an edit: the effective history continues from the checkpoint and the
steps after it stay in the file as an abandoned branch.

With a live supervisor the request goes through ``control.sock``: it stops the
agent, appends the record and restarts the agent with the resume flag. Without
one, the record is appended directly, holding ``supervisor.lock`` (no supervisor
starts meanwhile) and the journal lock (refused if an agent runs unsupervised).
The checkpoint name ``start`` (when no checkpoint has that name) means the
start of the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.events import EventLog
from ..core.history import Fold, rollback_record
from ..core.journal_reader import JournalReader
from ..core.journal_writer import JournalWriter
from ..core.records import Record
from ..core.redact import Redactor
from ..core.rundir import check_readable_run_dir, read_run_json
from ..errors import ControlUnavailable, JournalLockedError, SupervisorError
from .control import ControlClient
from .lock import SupervisorLock, find_leftovers, remove_recorded_cgroup, stop_processes

START = "start"


def resolve_checkpoint(fold: Fold, ref: str) -> Record | None:
    """The checkpoint record ``ref`` names (name, file or seq); ``None`` for the start of the run."""
    cp = fold.find_checkpoint(str(ref))
    if cp is not None:
        return cp
    if str(ref) == START:
        return None
    names = ", ".join(f"{c.get('name')} (seq {c.get('seq')})" for c in fold.checkpoints) or "none yet"
    raise SupervisorError(
        f"no checkpoint {ref!r} in the effective history (checkpoints: {names}); "
        f"pass one of them, or '{START}' for the start of the run"
    )


def fold_journal(run_dir: Path) -> Fold:
    """The journal folded in one pass with flat memory (the CLI side: no supervisor keeps a fold for it)."""
    fold = Fold(keep=False)
    fold.extend(JournalReader(run_dir).iter_entries(lazy=True))
    return fold


def append_rollback(run_dir: Path, ref: str, reason: str, *, by: str, fold: Fold | None = None) -> Record:
    """Append a rollback record to ``run_dir``'s journal; the agent must not be running.

    ``fold`` is the supervisor's own, up to date (no re-read); without it the
    journal is folded once, under the lock. Takes the journal lock through
    ``JournalWriter``: refused with a clear error if a process (an agent running
    unsupervised) holds it.
    """
    try:
        writer = JournalWriter(run_dir, redact=Redactor())
    except JournalLockedError:
        raise SupervisorError(
            f"an agent is writing the journal of {run_dir} without a supervisor; "
            "stop it first (or supervise it: 'agent-supervisor supervise --run-dir ... -- CMD'), then roll back"
        ) from None
    try:
        target = resolve_checkpoint(fold if fold is not None else fold_journal(run_dir), ref)
        return writer.append(rollback_record(target, reason, by=by))
    finally:
        writer.close()


def rollback(run_dir: Path, checkpoint: str, *, reason: str = "manual rollback", by: str = "user") -> dict[str, Any]:
    """Roll the run back to ``checkpoint``, live through the supervisor or directly on the files.

    Returns ``{"ok": True, "checkpoint": NAME, "seq": SEQ_OF_THE_RECORD, "live": bool}``.
    """
    run_dir = Path(run_dir)
    check_readable_run_dir(run_dir)
    try:
        resp = ControlClient(run_dir, timeout=60.0).request(
            {"cmd": "rollback", "checkpoint": str(checkpoint), "reason": reason, "by": by}
        )
    except ControlUnavailable:
        return _offline(run_dir, str(checkpoint), reason, by)
    if not resp.get("ok"):
        raise SupervisorError(str(resp.get("error") or "the supervisor refused the rollback"))
    resp["live"] = True
    return resp


def _offline(run_dir: Path, ref: str, reason: str, by: str) -> dict[str, Any]:
    read_run_json(run_dir)  # refuses a newer format before anything is written
    lock = SupervisorLock(run_dir)
    previous = lock.acquire(purpose="rollback")  # LockedError names the live supervisor
    try:
        # a supervisor killed with -9 may have left processes of its attempt; our lock content replaces
        # the record of them, so stop them now, as the next 'supervise' would have
        stop_processes(find_leftovers(run_dir, previous), grace=5.0)
        remove_recorded_cgroup(previous)
        rec = append_rollback(run_dir, ref, reason, by=by)
        events = EventLog(run_dir)
        try:
            events.emit(
                "rollback", int(read_run_json(run_dir).get("attempts") or 0),
                checkpoint=rec.get("checkpoint"), seq=rec["seq"], reason=reason, by=by, live=False,
            )
        finally:
            events.close()
    finally:
        lock.release()
    return {"ok": True, "checkpoint": rec.get("checkpoint"), "seq": rec["seq"], "live": False}
