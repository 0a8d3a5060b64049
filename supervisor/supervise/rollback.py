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
from typing import TYPE_CHECKING, Any

from ..core.events import EventLog
from ..core.history import Fold, rollback_record
from ..core.journal_reader import JournalReader
from ..core.journal_writer import JournalWriter
from ..core.records import Record
from ..core.redact import Redactor
from ..core.rundir import check_readable_run_dir, read_run_json
from ..errors import ControlUnavailable, JournalLockedError, SupervisorError, WorkspaceError
from .control import ControlClient, Reply
from .lock import SupervisorLock, find_leftovers, kill_recorded_tree, remove_recorded_cgroup, stop_processes
from .persister import is_resource_error

if TYPE_CHECKING:
    from .supervisor import Supervisor

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


def append_rollback(run_dir: Path, ref: str, reason: str, *, by: str, fold: Fold | None = None,
                    snapshot_by: str = "supervisor") -> Record:
    """Append a rollback record to ``run_dir``'s journal; the agent must not be running.

    ``fold`` is the supervisor's own, up to date (no re-read); without it the
    journal is folded once, under the lock. Takes the journal lock through
    ``JournalWriter``: refused with a clear error if a process (an agent running
    unsupervised) holds it.

    With a workspace, what it holds now is saved first as the ``abandoned`` snapshot of the record's seq
    (``snapshot_by`` takes it: ``supervisor`` or ``cli``); a snapshot that cannot be taken (a cap, an
    unreadable file) refuses the rollback before anything is written. The restore is the caller's:
    ``workspace.finish_rollback`` (the supervisor's before its next spawn).
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
        if "workspace" in read_run_json(run_dir):
            from ..core import workspace  # only for a run with a workspace

            # the writer holds the journal lock: nobody else appends, so its next seq is the record's
            workspace.prepare_rollback(run_dir, writer.next_seq, by=snapshot_by)
        return writer.append(rollback_record(target, reason, by=by))
    finally:
        writer.close()


def live_rollback(sup: Supervisor, checkpoint: str, reason: str, by: str, reply: Reply | None = None) -> None:
    """The supervisor's rollback, its agent gone: the record appended, recorded and said, ``reply`` answered.

    Without ``reply`` (the crash-loop rollback) an error is raised; with it, it is the answer. The workspace
    (if any) is restored before the next spawn (``WorkspaceHooks.before_spawn``)."""
    try:
        sup.journal.forget_stat()
        sup.poll_journal()  # the fold is up to date (the agent is gone: nothing more comes)
        rec = append_rollback(sup.run_dir, checkpoint, reason, by=by, fold=sup.journal.fold)
    except SupervisorError as e:
        if reply is None:
            raise
        reply({"ok": False, "error": str(e)})
        return
    except OSError as e:
        if reply is None or not is_resource_error(e):
            raise
        sup.resource_error("appending the rollback", e)
        reply({"ok": False, "error": f"could not append the rollback record: {e.strerror}; free space and retry"})
        return
    name = rec.get("checkpoint")
    sup.emit("rollback", checkpoint=name, seq=rec["seq"], reason=reason, by=by)
    sup.say(f"rolled back to {name or 'the start of the run'} ({reason})")
    if reply is not None:
        reply({"ok": True, "checkpoint": name, "seq": rec["seq"], "live": True})


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
        kill_recorded_tree(previous)
        stop_processes(find_leftovers(run_dir, previous), grace=5.0)
        remove_recorded_cgroup(previous)
        rec = append_rollback(run_dir, ref, reason, by=by, snapshot_by="cli")
        events = EventLog(run_dir)
        try:
            events.emit(
                "rollback", int(read_run_json(run_dir).get("attempts") or 0),
                checkpoint=rec.get("checkpoint"), seq=rec["seq"], reason=reason, by=by, live=False,
            )
        finally:
            events.close()
        restored = _restore(run_dir, rec)  # holding the lock: no supervisor spawns an agent meanwhile
    finally:
        lock.release()
    res: dict[str, Any] = {"ok": True, "checkpoint": rec.get("checkpoint"), "seq": rec["seq"], "live": False}
    if restored:
        res["workspace"] = restored
    return res


def _restore(run_dir: Path, rec: Record) -> str | None:
    """The offline rollback's restore of the workspace, right after its record; its one-line message.

    A restore that fails leaves the record committed and the restore pending: the next start (``supervise``
    before it spawns the agent, or ``Run.open``) finishes it, so the error says so."""
    if "workspace" not in read_run_json(run_dir):
        return None
    from ..core import workspace

    try:
        return workspace.finish_rollback(run_dir)
    except WorkspaceError as e:
        raise WorkspaceError(
            f"the rollback is recorded (seq {rec['seq']}), but the workspace was not restored: {e}; "
            "the next start of the agent ('agent-supervisor supervise', or Run.open) restores it"
        ) from None
