"""``supervise --notify``: real supervisors, real agents, real notification commands writing what they got."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import rundir

from ..conftest import wait_for
from .supervisor_util import Supervised, alive, helper_agent

FAST = ("--backoff-initial", "0.05", "--backoff-max", "0.2", "--stop-grace", "3")
ADDED = ("run_dir", "run_id", "text")
"""What a notification adds to the event as ``supervisor.jsonl`` holds it."""


def append_to(path: Path) -> str:
    """A notify command that appends its stdin (one JSON line) to ``path``."""
    return f"cat >> {shlex.quote(str(path))}"


def notes(path: Path, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The notifications ``path`` holds, once there are ``count`` of them."""
    def read() -> list[dict[str, Any]] | None:
        lines = path.read_bytes().splitlines() if path.exists() else []
        return [orjson.loads(ln) for ln in lines] if len(lines) >= count else None

    return wait_for(read, timeout=timeout, what=f"{count} notification(s) in {path}")  # type: ignore[return-value]


def same_as_written(note: dict[str, Any], sup: Supervised) -> None:
    """The notification is the event as written, plus ``run_dir``, ``run_id`` and ``text``."""
    written = [e for e in sup.events(note["event"]) if e["ts"] == note["ts"]]
    assert written == [{k: v for k, v in note.items() if k not in ADDED}]
    assert note["run_dir"] == str(sup.run_dir.resolve()) and note["run_id"] == sup.run_dir.name
    assert note["text"].startswith(f"agent-supervisor: run {sup.run_dir}")


@pytest.mark.timeout(30)
def test_crash_loop_and_give_up_notified_in_order_and_a_failing_command_said_once(tmp_path: Path) -> None:
    run_dir, got = tmp_path / "run", tmp_path / "notes.jsonl"
    with Supervised(run_dir, helper_agent("crashloop"), *FAST, "--rollback-after", "2", "--give-up-after", "4",
                    "--notify", append_to(got), "--notify", "exit 3") as sup:
        assert sup.wait(25) == 1, sup.stderr()
    got_notes = notes(got, 2)
    assert [n["event"] for n in got_notes] == ["rollback", "give-up"]
    for n in got_notes:
        same_as_written(n, sup)
    assert got_notes[0]["by"] == "supervisor" and got_notes[0]["checkpoint"] == "cp"
    assert "is in a crash loop: rolled back to checkpoint 'cp'" in got_notes[0]["text"]
    assert got_notes[1]["text"] == f"agent-supervisor: run {run_dir} failed: {got_notes[1]['reason']}"
    # 'exit 3' failed for both events: said once, recorded once
    errors = sup.events("notify-error")
    assert len(errors) == 1, errors
    assert errors[0]["command"] == "exit 3" and errors[0]["code"] == 3 and errors[0]["for_event"] == "rollback"
    said = [ln for ln in sup.stderr().splitlines() if "notification command" in ln]
    assert said == ["agent-supervisor: notification command 'exit 3' failed for the 'rollback' event: exit code 3; "
                    "later failures of it are counted, not said"]
    assert "Traceback" not in sup.stderr()


@pytest.mark.timeout(30)
def test_a_hang_killed_then_the_finish_are_notified(tmp_path: Path) -> None:
    run_dir, got = tmp_path / "run", tmp_path / "notes.jsonl"
    hangs_once = ["sh", "-c", 'if [ "$AGENT_SUPERVISOR_ATTEMPT" = 1 ]; then exec sleep 30; fi']
    with Supervised(run_dir, hangs_once, *FAST, "--no-resume-flag", "--hang-timeout", "0.5",
                    "--notify", append_to(got)) as sup:
        assert sup.wait(25) == 0, sup.stderr()
    got_notes = notes(got, 2)
    assert [n["event"] for n in got_notes] == ["hang", "succeeded"]
    for n in got_notes:
        same_as_written(n, sup)
    assert got_notes[0]["attempt"] == 1 and got_notes[0]["text"].startswith(
        f"agent-supervisor: run {run_dir}: attempt 1 hung (no journal record and no output for ")
    assert got_notes[1]["text"] == f"agent-supervisor: run {run_dir} succeeded after 2 attempt(s)"


@pytest.mark.timeout(30)
def test_a_finished_run_is_notified_and_a_resume_without_flags_keeps_notifying(tmp_path: Path) -> None:
    run_dir, got, texts = tmp_path / "run", tmp_path / "notes.jsonl", tmp_path / "texts.txt"
    by_env = f'printf "%s|%s\\n" "$AGENT_SUPERVISOR_NOTIFY_EVENT" "$AGENT_SUPERVISOR_NOTIFY_TEXT" >> {shlex.quote(str(texts))}'
    with Supervised(run_dir, ["true"], "--notify", append_to(got), "--notify", by_env, "--notify-timeout", "4") as sup:
        assert sup.wait(20) == 0, sup.stderr()
    (first,) = notes(got, 1)
    same_as_written(first, sup)
    assert first["event"] == "succeeded" and first["status"] == "succeeded"
    assert wait_for(lambda: texts.exists() and texts.read_text(), what="the text from the environment") == (
        f"succeeded|agent-supervisor: run {run_dir} succeeded after 1 attempt(s)\n")
    assert rundir.read_run_json(run_dir)["notify"] == {"commands": [append_to(got), by_env], "timeout_s": 4.0}
    # no command, no flags: the recorded command runs again and the recorded notifications go out
    with Supervised(run_dir, None) as again:
        assert again.wait(20) == 0, again.stderr()
    assert [n["event"] for n in notes(got, 2)] == ["succeeded", "succeeded"]
    assert rundir.read_run_json(run_dir)["notify"]["timeout_s"] == 4.0


@pytest.mark.timeout(30)
def test_a_hung_notify_command_does_not_stall_supervision(tmp_path: Path) -> None:
    """``sleep 1000`` as the command: the agent is restarted and the run ends on time; the command is killed
    after its timeout (not by the sweep of the agent's tree) and ``notify-error`` says so, once."""
    run_dir, pids = tmp_path / "run", tmp_path / "pids.txt"
    hangs_once = ["sh", "-c", 'if [ "$AGENT_SUPERVISOR_ATTEMPT" = 1 ]; then exec sleep 30; fi']
    hung = f"echo $$ >> {shlex.quote(str(pids))}; exec sleep 1000"
    t0 = time.monotonic()
    with Supervised(run_dir, hangs_once, *FAST, "--no-resume-flag", "--hang-timeout", "0.5",
                    "--notify", hung, "--notify-timeout", "1") as sup:
        assert sup.wait(25) == 0, sup.stderr()
    took = time.monotonic() - t0
    # hang at 0.5 s, restart, success; then at most min(timeout, 5 s) of final wait (+ the runner's exit)
    assert took < 6.0, f"supervise took {took:.1f} s"
    assert len(sup.events("spawn")) == 2 and len(sup.events("succeeded")) == 1
    errors = sup.events("notify-error")
    assert len(errors) == 1, errors
    assert errors[0]["for_event"] == "hang" and errors[0]["timed_out"] is True
    assert errors[0]["error"] == "timed out after 1 s: killed"
    said = [ln for ln in sup.stderr().splitlines() if "notification command" in ln]
    assert len(said) == 1 and "timed out after 1 s" in said[0], sup.stderr()
    started = [int(p) for p in pids.read_text().split()]
    assert started  # the hang's command ran (the finish's may have been dropped at the end)
    wait_for(lambda: not any(alive(p) for p in started), timeout=5, what="the hung notify commands to be gone")
    assert "Traceback" not in sup.stderr()
