"""Taking over a run directory: what a supervisor checks and records once it holds the lock, before any attempt.

An agent that writes the journal without a supervisor is refused; what a supervisor killed with -9 left running is
stopped; ``run.json`` says the run is supervised again, and the attempts go on being numbered from what was recorded.
Functions of the run directory only: none of the supervisor's loop state exists yet.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import rundir
from ..core.events import read_events
from ..core.journal_writer import journal_locked
from ..core.redact import Redactor, argv_is_redacted, redact_argv
from ..errors import JournalLockedError, SupervisorError
from .lock import find_leftovers, kill_recorded_tree, remove_recorded_cgroup, stop_processes

__all__ = ["check_journal_free", "record_start", "stop_leftovers"]


def stop_leftovers(run_dir: Path, previous: dict[str, Any] | None, grace: float,
                   say: Callable[[str], None]) -> list[int]:
    """Stop the processes and the cgroup the previous (dead) supervisor left; return the pids stopped."""
    stopped = kill_recorded_tree(previous)
    if stopped:
        say(f"killed {len(stopped)} leftover process(es) of the previous supervisor's tree "
            f"(outside the agent's session, recorded in {rundir.SUPERVISOR_LOCK}): {stopped}")
    procs = find_leftovers(run_dir, previous)
    if procs:
        say(f"stopping {len(procs)} leftover process(es) of the previous supervisor: {[p.pid for p in procs]}")
        stopped += stop_processes(procs, grace, log=say)
    remove_recorded_cgroup(previous)
    return stopped


def check_journal_free(run_dir: Path, display_dir: Path) -> None:
    """Refuse if an agent runs on this run directory without us (it holds the journal lock)."""
    if journal_locked(run_dir):
        raise JournalLockedError(
            f"an agent is already writing the journal of {display_dir} without a supervisor; "
            "stop it first, then supervise the run (it resumes)"
        )


def record_start(run_dir: Path, display_dir: Path, argv: list[str], redactor: Redactor, cwd: str) -> tuple[int, str]:
    """``run.json`` says the run is supervised again; return the last attempt number recorded and the run's id."""
    meta = rundir.read_run_json(run_dir)
    if argv_is_redacted(argv) and meta.get("command") == argv:
        raise SupervisorError(
            f"the command recorded in {rundir.RUN_JSON} had secrets redacted, so it cannot be run again; "
            f"give it after '--': agent-supervisor supervise --run-dir {display_dir} -- CMD"
        )
    exists = (run_dir / rundir.RUN_JSON).exists()
    # run.json is written after a spawn; the spawn event is written first (a supervisor killed
    # in between must not make the next one reuse an attempt number)
    recorded = [e.get("attempt") for e in read_events(run_dir)]
    attempt_no = max([int(meta.get("attempts") or 0) if exists else 0] + [a for a in recorded if isinstance(a, int)])
    changes: dict[str, Any] = {
        "command": redact_argv(argv, redactor),
        "cwd": cwd,
        "status": "running",
        "supervisor_pid": os.getpid(),
        "attempts": attempt_no,
        "ended": None,
    }
    if not exists:
        changes.update(id=run_dir.name, created=rundir.utc_now())
    return attempt_no, str(rundir.update_run_json(run_dir, **changes).get("id") or run_dir.name)
