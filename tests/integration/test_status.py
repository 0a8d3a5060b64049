"""One ``RunStatus``: the CLI's ``status``, the TUI's status worker and its runs list say the same, live and offline.

Every case is a real supervisor process (and a real ``kill -9`` where the case says so).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir
from supervisor.core.status import CRASHED, ROLLED_BACK, RunFiles, offline_state
from supervisor.supervise.control import run_status
from supervisor.tui.control import live_status
from supervisor.views.runs import run_info

from ..conftest import run_agent, run_cli, wait_for
from .supervisor_util import PY, Supervised, alive, research

FAST = ("--backoff-initial", "0.05", "--backoff-max", "0.2", "--stop-grace", "3", "-q")
SLOW = [PY, "-c", "import time; print('ready', flush=True); time.sleep(600)"]


def says(run_dir: Path) -> dict[str, object]:
    """The state as the CLI, the dashboard's status worker and the runs list give it; they must agree."""
    r = run_cli("status", str(run_dir), "--json")
    assert r.returncode == 0, r.stderr
    cli = orjson.loads(r.stdout)
    tui = run_status(run_dir)  # what the dashboard's status bar shows
    row = run_info(run_dir, status_of=live_status)  # the runs list, as the TUI and the CLI build it
    assert (cli["state"], cli["live"]) == (tui.state, tui.live) == (row.status, row.live)
    return dict(cli)


@pytest.mark.timeout(60)
def test_running_then_stopped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with Supervised(run, SLOW, *FAST) as sup:
        wait_for(lambda: "ready" in sup.stdout(), timeout=20, what="the agent to start")
        st = says(run)
        assert st["state"] == "running" and st["live"] is True and st["pid"] == sup.events("spawn")[0]["pid"]
        assert sup.request({"cmd": "stop"})["ok"]
        assert sup.wait(20) == 0
    st = says(run)
    assert st["state"] == "stopped" and st["live"] is False and st["note"] is None
    assert "state      stopped (no supervisor running)" in run_cli("status", str(run)).stdout


@pytest.mark.timeout(60)
def test_succeeded_then_rolled_back(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with Supervised(run, research(), *FAST) as sup:
        assert sup.wait(30) == 0, sup.stderr()
    assert says(run)["state"] == "succeeded"
    r = run_cli("rollback", str(run), "--to", "plan-done")
    assert r.returncode == 0, r.stderr
    st = says(run)
    assert st["state"] == ROLLED_BACK and st["ended"] is None
    assert st["note"] == (
        f"rolled back to checkpoint 'plan-done', run 'agent-supervisor supervise --run-dir {run}' "
        "to continue (it resumes from there)"
    )
    with Supervised(run, None, *FAST) as again:  # the next start takes the rollback up
        assert again.wait(30) == 0, again.stderr()
    assert says(run)["state"] == "succeeded"


@pytest.mark.timeout(60)
def test_rolled_back_is_one_status_with_or_without_run_json(tmp_path: Path) -> None:
    """An agent run without a supervisor ends 'succeeded' in run.json; after an offline rollback the CLI, the
    dashboard's status and the runs list all say 'rolled back' and how to continue, and so does a bare journal."""
    from ..conftest import run_agent

    run = tmp_path / "run"
    assert run_agent(run).returncode == 0
    assert rundir.read_run_json(run)["status"] == "succeeded"
    assert says(run)["state"] == "succeeded"
    r = run_cli("rollback", str(run), "--to", "plan-done")
    assert r.returncode == 0, r.stderr
    st = says(run)
    assert st["state"] == ROLLED_BACK
    assert str(st["note"]).startswith("rolled back to checkpoint 'plan-done', run 'agent-supervisor supervise --run-dir ")
    human = run_cli("status", str(run)).stdout
    assert "state      rolled back (no supervisor running)" in human and "ended" not in human
    assert "to continue" in human
    (run / "run.json").unlink()  # a journal written without run.json: the same word, and the command to give
    st = says(run)
    assert st["state"] == ROLLED_BACK and str(st["note"]).endswith(f"--run-dir {run} -- COMMAND' to continue (it resumes from there)")


@pytest.mark.timeout(60)
def test_failed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with Supervised(run, [PY, "-c", "import sys; sys.exit(78)"], *FAST) as sup:
        assert sup.wait(30) == 1
    st = says(run)
    assert st["state"] == "failed" and st["attempt"] == 1


@pytest.mark.timeout(60)
def test_supervisor_killed_with_9_is_crashed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sup = Supervised(run, SLOW, *FAST)
    try:
        wait_for(lambda: "ready" in sup.stdout(), timeout=20, what="the agent to start")
        agent = sup.events("spawn")[0]["pid"]
        sup.kill()
        wait_for(lambda: not alive(agent), timeout=10, what="the agent to die with its supervisor")
        assert (run / rundir.CONTROL_SOCK).exists()  # left behind: nobody answers on it
        st = says(run)
        assert st["state"] == CRASHED and st["live"] is False
        assert f"supervisor pid {sup.pid} died without recording an end" in str(st["note"])
        text = run_cli("status", str(run)).stdout
        assert "state      crashed (no supervisor running)" in text and "resume with" in text
    finally:
        sup.kill()


@pytest.mark.timeout(60)
def test_agent_crashed_then_supervisor_gone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    crash = [PY, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    sup = Supervised(run, crash, "--backoff-initial", "60", "--backoff-max", "60", "-q")
    try:
        sup.wait_event("backoff")
        assert says(run)["state"] == "backoff"  # live: the supervisor waits to restart
        sup.kill()
        st = says(run)
        assert st["state"] == CRASHED
        assert "attempt 1 exited with code 3, then supervisor pid" in str(st["note"])
        assert st["last_exit"]["code"] == 3  # type: ignore[index]
    finally:
        sup.kill()


def test_offline_words_from_the_file_facts() -> None:
    """The rules behind the words, on facts alone (the cases above with real processes pin them end to end)."""

    def word(meta: dict[str, object], *, ev: dict[str, object] | None = None, kind: str | None = None,
             alive: bool = False, locked: bool = False, damaged: str | None = None) -> str:
        return offline_state(RunFiles(meta, ev, kind, alive, locked, damaged))[0]

    running = {"status": "running", "supervisor_pid": 12345}
    assert word(running) == CRASHED
    assert word(running, ev={"event": "backoff"}) == CRASHED
    assert word(running, alive=True) == "running"  # lives but does not answer: not called dead
    assert word({"status": "running"}, locked=True) == "running"  # an agent without a supervisor
    assert word({"status": "succeeded"}) == "succeeded"
    assert word({"status": "stopped"}, kind="rollback") == ROLLED_BACK
    assert word({"status": "forked"}) == "forked"
    assert word({"format": 0}) == "unknown"
    assert word({}, damaged="run.json is not valid JSON") == "damaged run.json"


def test_last_json_lines_skips_bad_and_torn_lines_and_reads_back_far_enough(tmp_path: Path) -> None:
    from supervisor.core.status import last_json_lines

    p = tmp_path / "supervisor.jsonl"
    lines = [b'{"event":"spawn","n":%d}' % i for i in range(3)] + [b"not json"] * 5000 + [b'{"event":"exit"}', b"[1]"]
    p.write_bytes(b"\n".join(lines) + b'\n{"event":"torn"')  # 5000 bad lines: far more than one 16 kB block
    assert last_json_lines(p, 2) == [{"event": "spawn", "n": 2}, {"event": "exit"}]
    assert last_json_lines(p, 10) == [{"event": "spawn", "n": i} for i in range(3)] + [{"event": "exit"}]
    assert last_json_lines(tmp_path / "missing.jsonl", 3) == []


def test_a_refused_journal_is_unreadable_in_the_status_and_the_runs_list(tmp_path: Path) -> None:
    """A symlinked journal (or another user's) is refused by every reader: the runs list and the offline
    status say so with the reason instead of raising."""
    from supervisor.core.status import UNREADABLE, offline_status
    from supervisor.tui.control import list_runs

    root = tmp_path / "runs"
    assert run_agent(root / "ok").returncode == 0
    assert run_agent(root / "linked").returncode == 0
    j = root / "linked" / "journal.jsonl"
    target = tmp_path / "elsewhere.jsonl"
    j.rename(target)
    j.symlink_to(target)
    before = target.read_bytes()
    st = offline_status(root / "linked")
    assert st.state == UNREADABLE and "symbolic link" in (st.note or ""), st
    rows = {r.path.name: r for r in list_runs(root)}
    assert rows["linked"].status == UNREADABLE and rows["linked"].steps == "-"
    assert rows["ok"].status == "succeeded"
    assert target.read_bytes() == before  # nothing read through the link was changed
