"""Notifications: the text and JSON of each event, the settings kept in ``run.json``, the runner's queue and its
final wait, and ``paused``/``asked`` emitted through the ``Reporter`` reaching a real command."""

from __future__ import annotations

import contextlib
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import rundir
from supervisor.core.events import EventLog, read_events
from supervisor.errors import RunDirError, SupervisorError
from supervisor.supervise import notify, notify_runner
from supervisor.supervise.reporting import Reporter

from ..conftest import wait_for

RUN = Path("runs/x")


def text(event: str, **fields: Any) -> str | None:
    return notify.notify_text({"event": event, "attempt": 2, **fields}, str(RUN))


def test_each_notified_event_has_its_line() -> None:
    assert text("paused", step="tool:bash", pos=4, reason="breakpoint", pattern="tool:*") == (
        "agent-supervisor: run runs/x paused before step 'tool:bash' (breakpoint 'tool:*')")
    assert text("paused", step="fetch", reason="interrupted") == (
        "agent-supervisor: run runs/x paused before step 'fetch' (its last attempt was cut off by a crash)")
    assert text("asked", prompt="Deploy?", choices=["yes", "no"]) == (
        "agent-supervisor: run runs/x asks 'Deploy?' (choices: yes, no)")
    assert text("rollback", by="supervisor", checkpoint="cp", reason="crash-loop: 3 attempts in a row without progress") == (
        "agent-supervisor: run runs/x is in a crash loop: rolled back to checkpoint 'cp' "
        "(crash-loop: 3 attempts in a row without progress)")
    assert text("hang", idle_s=300.2, step="llm:plan") == (
        "agent-supervisor: run runs/x: attempt 2 hung (no journal record and no output for 300.2 s in step "
        "'llm:plan'); stopping it")
    assert text("memory-limit", rss_bytes=3 * 2**30, max_rss=2 * 2**30) == (
        "agent-supervisor: run runs/x: attempt 2 uses 3.0 GiB of memory, over --max-rss 2.0 GiB; stopping it")
    assert text("give-up", reason="5 attempts without progress") == (
        "agent-supervisor: run runs/x failed: 5 attempts without progress")
    assert text("succeeded") == "agent-supervisor: run runs/x succeeded after 2 attempt(s)"
    assert text("stop", signal="SIGTERM") == (
        "agent-supervisor: run runs/x stopped by SIGTERM; resume with 'agent-supervisor supervise --run-dir runs/x'")


def test_only_the_listed_events_are_notified() -> None:
    assert text("rollback", by="user", checkpoint="cp") is None  # a person's rollback: they know
    for name in ("spawn", "exit", "restart", "backoff", "resume", "files", "notify-error", "resource-error"):
        assert notify.message({"event": name}, Path("/r"), "x", "r") is None
    ev = {"ts": "t", "event": "give-up", "attempt": 5, "reason": "why"}
    assert notify.message(ev, Path("/abs/runs/x"), "x", "runs/x") == {
        **ev, "run_dir": "/abs/runs/x", "run_id": "x", "text": "agent-supervisor: run runs/x failed: why"}


def test_settings_replace_keep_and_drop_what_run_json_keeps(tmp_path: Path) -> None:
    assert notify.settings_for(tmp_path, False, None, None) == notify.Settings()
    s = notify.settings_for(tmp_path, False, ["a", "b"], 3.0)
    assert s == notify.Settings(("a", "b"), 3.0)
    rundir.update_run_json(tmp_path, notify=s.to_json())
    assert notify.recorded(tmp_path) == s
    assert notify.settings_for(tmp_path, True, None, None) == s  # a resume without flags keeps them
    assert notify.settings_for(tmp_path, True, ["c"], None) == notify.Settings(("c",), 3.0)
    assert notify.settings_for(tmp_path, True, None, 7.0) == notify.Settings(("a", "b"), 7.0)
    assert notify.settings_for(tmp_path, True, None, None, off=True) == notify.Settings()
    assert notify.Settings().to_json() is None
    with pytest.raises(SupervisorError, match="--notify needs a command"):
        notify.settings_for(tmp_path, True, ["  "], None)
    rundir.update_run_json(tmp_path, notify={"commands": "notify-send hi"})
    with pytest.raises(RunDirError, match=r'"notify" is .* not an object such as'):
        notify.recorded(tmp_path)


@contextlib.contextmanager
def runner(*, timeout: float, final_wait: float, queue: int) -> Iterator[subprocess.Popen[bytes]]:
    """The runner as the supervisor starts it; killed if the test fails before it ends."""
    proc = subprocess.Popen([sys.executable, "-I", "-S", notify_runner.__file__, "--timeout", str(timeout),
                             "--final-wait", str(final_wait), "--queue", str(queue)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    with proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def rest(proc: subprocess.Popen[bytes]) -> list[bytes]:
    """The runner's answers until it exits (its stdin closed by the test)."""
    assert proc.stdout is not None
    out = proc.stdout.read().splitlines()
    proc.wait(timeout=8)
    return out


def item(n: int, cmd: str) -> bytes:
    return orjson.dumps({"n": n, "i": 0, "cmd": cmd, "event": "hang", "input": "{}\n", "env": {}}) + b"\n"


@pytest.mark.timeout(10)
def test_runner_keeps_order_and_drops_the_oldest_waiting_past_its_queue(tmp_path: Path) -> None:
    started = tmp_path / "started"
    with runner(timeout=5, final_wait=5, queue=1) as proc:
        answers = _queue_past_its_size(proc, started, tmp_path / "ran")
    assert [(a["n"], "ok" if a.get("ok") else a.get("dropped")) for a in answers] == [(2, True), (1, "ok"), (3, "ok")]
    assert "waiting already" in answers[0]["error"]
    assert (tmp_path / "ran").read_text() == "3\n"


def _queue_past_its_size(proc: subprocess.Popen[bytes], started: Path, ran: Path) -> list[dict[str, Any]]:
    assert proc.stdin is not None and proc.stdout is not None
    # 1 runs until 'started' is removed; 2 waits; 3 arrives: the queue holds one, so 2 (the oldest waiting) goes
    proc.stdin.write(item(1, f"touch {started}; while [ -e {started} ]; do sleep 0.01; done"))
    proc.stdin.flush()
    wait_for(started.exists, timeout=5, what="the first notification to run")
    proc.stdin.write(item(2, "true") + item(3, f"echo 3 >> {ran}"))
    proc.stdin.flush()
    first = proc.stdout.readline()  # the drop of 2, said as 3 arrives
    started.unlink()
    proc.stdin.close()
    return [orjson.loads(ln) for ln in [first, *rest(proc)]]


@pytest.mark.timeout(10)
def test_runner_kills_what_still_runs_when_the_final_wait_is_over(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with runner(timeout=60, final_wait=0.3, queue=10) as proc:
        assert proc.stdin is not None
        proc.stdin.write(item(1, f"echo $$ > {pid_file}; exec sleep 1000") + item(2, "true"))
        proc.stdin.flush()
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=5, what="the command to start")
        t0 = time.monotonic()
        proc.stdin.close()
        answers = [orjson.loads(ln) for ln in rest(proc)]
        assert time.monotonic() - t0 < 3
    assert [a["n"] for a in answers] == [1, 2]
    assert answers[0]["timed_out"] is True and "final wait was over" in answers[0]["error"]
    assert answers[1]["dropped"] is True
    pid = int(pid_file.read_text())
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


@pytest.mark.timeout(10)
def test_paused_and_asked_emitted_through_the_reporter_reach_the_command(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    rundir.ensure_dir(run_dir)
    got = tmp_path / "notes.jsonl"
    said: list[str] = []
    rep = Reporter(run_dir, quiet=True)
    rep.events = EventLog(run_dir)
    rep.say = said.append  # type: ignore[method-assign]
    sel = selectors.DefaultSelector()
    helpers: set[int] = set()

    def emit(event: str, **fields: Any) -> None:
        rep.emit(event, 3, {"ts": rundir.utc_now(), **fields})

    n = notify.Notifier(notify.Settings((f"cat >> {got}", "exit 3")), run_dir=run_dir, display_dir=Path("runs/x"),
                        run_id="x", sel=sel, helpers=helpers, emit=emit, say=rep.say)
    assert n.start() and len(helpers) == 1  # the runner is no leftover of the agent for the tree's sweeps
    rep.notifier = n
    emit("paused", step="tool:bash", pos=4, reason="breakpoint", pattern="tool:*", inputs={"cmd": "ls"}, pause_seq=9)
    emit("spawn", pid=1)  # not notified
    emit("asked", step="ask", pos=5, reason="ask", prompt="Deploy?", choices=["yes", "no"], pause_seq=10)

    def loop_turn() -> bool:  # the supervisor's loop, reduced to the notifier's descriptors
        for key, _ in sel.select(0.05):
            key.data()
        return got.exists() and got.read_bytes().count(b"\n") == 2 and n.failed >= 2

    wait_for(loop_turn, timeout=8, what="both notifications and the failures' answers")
    rep.finish_writes()
    rep.close_events()
    sel.close()
    assert not helpers
    paused, asked = (orjson.loads(ln) for ln in got.read_bytes().splitlines())
    assert paused["event"] == "paused" and paused["inputs"] == {"cmd": "ls"} and paused["pos"] == 4
    assert paused["text"] == "agent-supervisor: run runs/x paused before step 'tool:bash' (breakpoint 'tool:*')"
    assert paused["run_dir"] == str(run_dir) and paused["run_id"] == "x" and paused["attempt"] == 3
    assert asked["event"] == "asked" and asked["choices"] == ["yes", "no"]
    assert asked["text"] == "agent-supervisor: run runs/x asks 'Deploy?' (choices: yes, no)"
    errors = [e for e in read_events(run_dir) if e["event"] == "notify-error"]
    assert len(errors) == 1 and errors[0]["for_event"] == "paused" and errors[0]["code"] == 3
    assert said == ["notification command 'exit 3' failed for the 'paused' event: exit code 3; "
                    "later failures of it are counted, not said"]
    assert n.sent == 4 and n.delivered == 2 and n.failed == 2
