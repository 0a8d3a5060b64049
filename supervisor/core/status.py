"""A run's status from its files alone: the part of ``RunStatus`` every front end shares.

With a live supervisor its control socket is the truth (``supervise.control.run_status``
asks it first). Without one the files tell what happened: ``run.json``'s status,
the last supervisor event, the last journal record's kind, whether the recorded
supervisor pid lives and whether an agent holds the journal lock.

The state words offline (live ones are the supervisor's ``ProcessState`` values):

- ``succeeded`` / ``failed`` / ``stopped``: the end ``run.json`` recorded
  (``stopped`` is a stop on request; the run resumes with ``supervise --run-dir``).
- ``crashed``: ``run.json`` says running, but the supervisor that wrote it is
  gone and no agent writes the journal: it died without recording an end (killed
  with -9, out of memory, the machine went down), whatever the agent did before.
  A run that says ``succeeded`` but whose journal ends with a ``begin`` (its agent
  exited inside a step, under an older supervisor or without one) is ``crashed`` too.
  As systemd shows a unit whose process died unexpectedly as failed
  (``Result: signal``) and supervisord as ``EXITED`` "unexpectedly", not as
  ``STOPPED`` (which both keep for a stop that was asked for). We do not say
  ``failed``: here that word means over for good, and a crashed run resumes.
- ``running``: the recorded supervisor still lives (pid and lock) but did not
  answer, or an agent holds the journal lock (it runs without a supervisor).
- ``rolled back``: the journal ends with a rollback record no attempt has taken
  up yet (an offline rollback), whatever ``run.json`` says (``succeeded`` too) and
  with no ``run.json`` at all: the note says "rolled back to checkpoint X, run
  'agent-supervisor supervise --run-dir RUN' to continue".
- the other statuses ``run.json`` may hold as they are (``forked``); ``unknown``
  for a bare journal without ``run.json``; ``damaged run.json`` when it cannot be read;
  ``unreadable`` when a journal or event file is refused (a symbolic link, another user's file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..errors import SupervisorError
from . import rundir
from .events import read_events
from .journal_reader import JournalReader
from .journal_writer import journal_locked
from .records import Kind
from .segments import FOLD_CHUNK, JournalFile, count_lines

CRASHED = "crashed"
ROLLED_BACK = "rolled back"
DAMAGED = "damaged run.json"
UNREADABLE = "unreadable"
"""A run file was refused (a symbolic link, another user's file): the note names it."""
_FINAL = ("succeeded", "failed", "stopped")
_TAIL_BLOCK = 16 * 1024


@dataclass
class RunStatus:
    """A run's status, live (the supervisor's ``status`` answer) or from the files.

    ``fields`` is what ``status --json`` prints (``state`` and ``live`` included);
    ``note`` says why, for the states the files had to be interpreted for.
    """

    state: str = "unknown"
    live: bool = False
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def note(self) -> str | None:
        note = self.fields.get("note")
        return str(note) if note else None


@dataclass(frozen=True)
class RunFiles:
    """The facts about a run that its files hold (no supervisor asked)."""

    meta: dict[str, Any]
    last_event: dict[str, Any] | None
    last_kind: str | None
    supervisor_alive: bool
    journal_locked: bool
    damaged: str | None = None
    """Why ``run.json`` could not be read."""
    last_exit: dict[str, Any] | None = None
    """The ``exit`` event of the last attempt, if no attempt was spawned after it."""
    last_record: dict[str, Any] | None = None
    """The journal's last committed record (a rollback names its checkpoint)."""
    run_dir: Path | None = None
    refused: str | None = None
    """Why a journal or event file was refused (a symbolic link, another user's file)."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def last_json_lines(path: Path, n: int) -> list[dict[str, Any]]:
    """The last ``n`` complete JSON object lines of an append-only file, reading only its end.

    The journal's backward read (:meth:`JournalFile.last_lines`): a torn last line is not
    committed; lines that are not JSON objects are skipped, so it reads on until ``n`` are found.
    """
    jf = JournalFile.open(path)
    if jf is None:
        return []
    with jf:
        want = n
        while True:
            lines, whole = jf.last_lines(want, block=_TAIL_BLOCK)
            out: list[dict[str, Any]] = []
            for raw in lines:
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
            if len(out) >= n or whole:
                return out[-n:] if n else []
            want *= 4
def read_files(run_dir: Path) -> RunFiles:
    """Collect the file facts; cheap (the ends of the files, one lock probe), so the TUI can poll it."""
    is_dir = run_dir.is_dir()
    damaged = refused = None
    try:
        meta = rundir.read_run_json(run_dir) if is_dir else {"format": 0}
    except SupervisorError as e:  # a newer format too: the CLI refused it before asking
        meta, damaged = {"format": 0}, str(e)
    try:
        events = last_json_lines(run_dir / rundir.SUPERVISOR_EVENTS, 4) if is_dir else []
    except SupervisorError as e:  # refused: a symlink, another user's file
        events, refused = [], str(e)
    last_event = events[-1] if events else None
    last_exit = _last_exit(events)
    try:
        tail = JournalReader(run_dir).tail(1)
    except SupervisorError as e:  # refused: a symlinked journal, another user's segment
        tail, refused = [], str(e)
    last = tail[-1] if tail else None
    last_kind = last.get("kind") if isinstance(last, dict) else None
    alive, locked, lock_refused = _locks(run_dir, meta, is_dir)
    refused = refused or lock_refused
    return RunFiles(meta, last_event, last_kind, alive, locked, damaged, last_exit,
                    last if isinstance(last, dict) else None, run_dir, refused)


def _last_exit(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The exit that ended the last attempt (a backoff or rollback may follow it); ``None`` after a spawn."""
    for ev in events[::-1]:
        what = ev.get("event")
        if what == "spawn":
            return None
        if what == "exit":
            return ev
    return None


def _locks(run_dir: Path, meta: dict[str, Any], is_dir: bool) -> tuple[bool, bool, str | None]:
    """Whether the recorded supervisor lives, whether an agent holds the journal lock, and why a lock was refused."""
    pid = meta.get("supervisor_pid")
    # the pid alone could be reused by another process: the supervisor also holds its lock while it lives
    try:
        alive = isinstance(pid, int) and pid_alive(pid) and is_dir and rundir.flock_held(run_dir / rundir.SUPERVISOR_LOCK)
        locked = journal_locked(run_dir) if is_dir else False
    except SupervisorError as e:  # a lock file refused (a symlink, another user's)
        return False, False, str(e)
    return alive, locked, None


def rolled_back_note(files: RunFiles) -> str:
    """Where the rollback returns to and the command that continues the run."""
    rb = files.last_record or {}
    to = f"checkpoint {rb['checkpoint']!r}" if rb.get("checkpoint") else "the start of the run"
    where = str(files.run_dir) if files.run_dir is not None else "RUN_DIR"
    cmd = f"agent-supervisor supervise --run-dir {where}"
    if not isinstance(files.meta.get("command"), list):
        cmd += " -- COMMAND"  # no recorded command to start (a journal written without run.json)
    return f"rolled back to {to}, run '{cmd}' to continue (it resumes from there)"


def offline_state(files: RunFiles) -> tuple[str, str | None]:
    """The state word (see the module docstring) and a note saying why, from the file facts alone."""
    if files.damaged:
        return DAMAGED, files.damaged
    if files.refused:
        return UNREADABLE, files.refused
    status = str(files.meta.get("status") or "")
    pid = files.meta.get("supervisor_pid")
    if status == "running" and files.supervisor_alive:
        return "running", f"supervisor pid {pid} lives but did not answer on its control socket"
    if files.journal_locked:
        return "running", "an agent writes the journal without a supervisor"
    if files.last_kind == Kind.ROLLBACK:
        # whatever run.json says (succeeded, failed, stopped, or no run.json at all): the run goes on
        return ROLLED_BACK, rolled_back_note(files)
    if status in _FINAL:
        return _final_state(files, status)
    if status == "running":
        return CRASHED, _crash_note(files.last_exit or {}, pid)
    return status or "unknown", None


def _final_state(files: RunFiles, status: str) -> tuple[str, str | None]:
    """The end ``run.json`` recorded; a success whose journal ends inside a step (a ``begin``) is a crash."""
    if status == "succeeded" and files.last_kind == Kind.BEGIN:
        return CRASHED, _unfinished_note(files.last_record or {})
    why = files.meta.get("reason")
    return status, str(why) if why and status == "failed" else None


def _unfinished_note(begin: dict[str, Any]) -> str:
    """A run recorded as succeeded whose journal ends with a ``begin``: its last step never finished."""
    name = begin.get("step")
    return (f"{rundir.RUN_JSON} says succeeded, but the journal ends inside step {name!r} (a begin without its step): "
            "the agent exited before the step finished; resume with 'agent-supervisor supervise --run-dir'")


def _crash_note(ev: dict[str, Any], pid: Any) -> str:
    """Why a run says ``running`` with nobody running it: how its last attempt ended, and who died."""
    how = ""
    if ev and (ev.get("code") not in (0, None) or ev.get("signal")):
        how = f"the agent's attempt {ev.get('attempt')} exited with " + (
            f"signal {ev['signal']}" if ev.get("signal") else f"code {ev.get('code')}") + ", then "
    who = f"supervisor pid {pid}" if isinstance(pid, int) else "the agent (no supervisor)"
    return (f"{how}{who} died without recording an end (killed?); "
            "resume with 'agent-supervisor supervise --run-dir'")


def offline_status(run_dir: Path, *, details: bool = False) -> RunStatus:
    """The status from the files; ``details`` adds what ``status`` prints (restarts, records, last exit)."""
    files = read_files(run_dir)
    state, note = offline_state(files)
    meta = files.meta
    attempts = meta.get("attempts")
    fields: dict[str, Any] = {
        "ok": True,
        "state": state,
        "pid": None,
        "attempt": int(attempts) if isinstance(attempts, int) else None,
        "uptime_s": None,
        "cpu_percent": 0.0,
        "rss_bytes": 0,
        "threads": 0,
        "open_files": 0,
        "run_dir": str(run_dir.resolve()),
        "supervisor_pid": None,
        "live": False,
        "id": meta.get("id"),
        "created": meta.get("created"),
        "ended": None if state == ROLLED_BACK else meta.get("ended"),  # a rolled back run goes on
        "command": meta.get("command"),
        "note": note,
    }
    if details:
        events = read_events(run_dir) if run_dir.is_dir() else []
        fields["attempt"] = fields["attempt"] or 0
        fields["restarts"] = sum(1 for e in events if e.get("event") == "restart")
        fields["records"] = count_lines(run_dir, chunk=FOLD_CHUNK)
        fields["last_exit"] = next((e for e in reversed(events) if e.get("event") == "exit"), None)
    return RunStatus(state, False, fields)
