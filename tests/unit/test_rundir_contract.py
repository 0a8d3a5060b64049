"""The run directory is a public contract for writers in other languages: its names are pinned here.

A rename inside the package (the 0.2 regrouping nearly turned ``supervisor.lock`` into
``supervisor.supervise.lock``) must not change a file name, an environment variable,
an exit code or a record kind that other programs rely on.
"""

from __future__ import annotations

import re

from supervisor.core import rundir
from supervisor.core.records import KINDS, Kind

from ..conftest import ROOT


def test_file_names_environment_and_exit_codes_are_the_documented_ones() -> None:
    assert (rundir.RUN_JSON, rundir.JOURNAL, rundir.JOURNAL_LOCK, rundir.CHECKPOINTS) == (
        "run.json", "journal.jsonl", "journal.lock", "checkpoints"
    )
    assert (rundir.SUPERVISOR_EVENTS, rundir.AGENT_LOG, rundir.SUPERVISOR_LOCK, rundir.CONTROL_SOCK) == (
        "supervisor.jsonl", "agent.log", "supervisor.lock", "control.sock"
    )
    assert (rundir.ENV_RUN_DIR, rundir.ENV_RUN_ID, rundir.ENV_ATTEMPT, rundir.ENV_RESUME, rundir.ENV_SUPERVISED) == (
        "AGENT_SUPERVISOR_RUN_DIR", "AGENT_SUPERVISOR_RUN_ID", "AGENT_SUPERVISOR_ATTEMPT",
        "AGENT_SUPERVISOR_RESUME", "AGENT_SUPERVISOR_PID",
    )
    assert (rundir.EXIT_ROLLBACK, rundir.EXIT_FAILED, rundir.FORMAT) == (75, 78, 1)


def test_record_kinds_are_the_documented_strings() -> None:
    assert [k.value for k in Kind] == ["start", "begin", "step", "checkpoint", "rollback", "fork", "note", "pause", "choice"]
    assert Kind.ROLLBACK == "rollback" and "rollback" in KINDS
    readme = (ROOT / "docs" / "run-directory.md").read_text()
    for k in Kind:
        assert re.search(rf"`{k.value}`", readme), f"docs/run-directory.md does not document the record kind {k.value!r}"


def test_readme_names_every_run_directory_file() -> None:
    readme = (ROOT / "docs" / "run-directory.md").read_text()
    for name in ("run.json", "journal.jsonl", "supervisor.jsonl", "agent.log", "supervisor.lock", "control.sock",
                 "journal.lock", "checkpoints/"):
        assert name in readme, name
