"""Crash loops, grandchildren, hangs, memory, signals and a supervisor killed with -9: real processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir
from supervisor.core.history import load

from ..conftest import run_cli, wait_for
from .supervisor_util import (
    PY,
    Supervised,
    alive,
    guardian_of,
    helper_agent,
    kill_pids,
    research,
)

FAST = ("--backoff-initial", "0.05", "--backoff-max", "0.2", "--stop-grace", "3")


def grandchild_pids(run_dir: Path) -> list[int]:
    text = wait_for(lambda: (run_dir / "grandchildren.txt").exists() and (run_dir / "grandchildren.txt").read_text(),
                    timeout=20, what="grandchildren.txt")
    return [int(x) for x in str(text).split()]


@pytest.mark.timeout(60)
def test_crash_loop_rolls_back_once_then_gives_up(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    with Supervised(run_dir, helper_agent("crashloop"), *FAST, "--rollback-after", "2", "--give-up-after", "4") as sup:
        rc = sup.wait(50)
    assert rc == 1, sup.stderr()
    assert time.monotonic() - t0 < 40
    assert rundir.read_run_json(run_dir)["status"] == "failed"
    exits = sup.events("exit")
    assert len(exits) == 5 and all(e["code"] == 1 for e in exits)
    assert [e["progress"] for e in exits] == [3, 0, 0, 1, 0]  # a, cp, b; attempt 4 re-ran b after the rollback: not new ground
    rb = sup.events("rollback")
    assert len(rb) == 1 and rb[0]["checkpoint"] == "cp" and rb[0]["reason"].startswith("crash-loop")
    h = load(run_dir)
    rec = [r for r in h.effective if r["kind"] == "rollback"]
    assert len(rec) == 1 and rec[0]["by"] == "supervisor" and rec[0]["checkpoint"] == "cp"
    assert [len(b.records) for b in h.branches] and h.branches[0].records[0]["step"] == "b"
    backoffs = sup.events("backoff")
    assert len(backoffs) == 3 and all(0 < b["delay_s"] <= 0.2 for b in backoffs)
    give_up = sup.events("give-up")
    assert len(give_up) == 1 and give_up[0]["status"] == "failed" and len(give_up[0]["attempts"]) == 4
    err = sup.stderr()
    assert "gave up after 4 attempts in a row without progress" in err and "attempt 5: code 1" in err
    assert "rolled back to cp" in err
    # everything kept: the journal, the events, the log
    assert (run_dir / "agent.log").read_text().count("crashloop: attempt") == 5


@pytest.mark.timeout(60)
def test_exit_75_without_a_rollback_record_backs_off_and_gives_up(tmp_path: Path) -> None:
    """``sh -c 'exit 75'`` once ran 58,791 times in 10 minutes: without a rollback record, 75 is a crash."""
    run_dir = tmp_path / "run"
    with Supervised(run_dir, ["sh", "-c", "exit 75"], *FAST, "--rollback-after", "0", "--give-up-after", "4") as sup:
        rc = sup.wait(50)
    assert rc == 1, sup.stderr()
    exits = sup.events("exit")
    assert len(exits) == 4 and all(e["code"] == 75 for e in exits)
    backoffs = sup.events("backoff")
    assert len(backoffs) == 3 and all(0 < b["delay_s"] <= 0.2 for b in backoffs)
    assert [e["reason"] for e in sup.events("restart")] == ["crash"] * 3
    assert len(sup.events("give-up")) == 1 and rundir.read_run_json(run_dir)["status"] == "failed"


@pytest.mark.timeout(60)
def test_grandchildren_are_gone_after_a_crash(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, helper_agent("grandchildren", "5", "crash"), *FAST) as sup:
        try:
            pids = grandchild_pids(run_dir)
            assert sup.wait(30) == 0, sup.stderr()
            assert [p for p in pids if alive(p)] == []
            crash = sup.events("exit")[0]
            assert crash["code"] == 1 and sorted(crash["leftovers_killed"]) == sorted(pids)
        finally:
            kill_pids(pids)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_grandchildren_are_gone_after_a_stop(tmp_path: Path, sig: signal.Signals) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, helper_agent("grandchildren", "5", "sleep"), *FAST) as sup:
        pids = grandchild_pids(run_dir)
        try:
            agent = sup.events("spawn")[0]["pid"]
            assert all(alive(p) for p in pids)
            sup.proc.send_signal(sig)
            assert sup.wait(30) == 128 + sig
            assert [p for p in pids + [agent] if alive(p)] == []
            assert rundir.read_run_json(run_dir)["status"] == "stopped"
            assert sup.events("stop")[0]["signal"] == sig.name
            ex = sup.events("exit")[0]
            assert ex["reason"] == "stop" and ex["signal"] == sig.name  # the signal was forwarded as is
        finally:
            kill_pids(pids)


@pytest.mark.timeout(60)
def test_hang_is_detected_and_restarted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, research("--hang-in", "search:q2"), *FAST, "--hang-timeout", "1") as sup:
        assert sup.wait(40) == 0, sup.stderr()
    hangs = sup.events("hang")
    assert len(hangs) == 1 and hangs[0]["step"] == "search:q2" and hangs[0]["idle_s"] >= 1
    exits = sup.events("exit")
    assert exits[0]["reason"] == "hang" and exits[0]["signal"] == "SIGTERM" and exits[0]["step"] == "search:q2"
    assert "hung: no journal record and no output" in sup.stderr()
    models = [orjson.loads(ln) for ln in (run_dir / "ledger.jsonl").read_bytes().splitlines()]
    assert sum(1 for m in models if m["kind"] == "model") == 2


@pytest.mark.timeout(60)
def test_memory_limit_restarts_the_agent(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, helper_agent("hog", "200"), *FAST, "--max-rss", "120M") as sup:
        assert sup.wait(40) == 0, sup.stderr()
    ev = sup.events("memory-limit")
    assert len(ev) == 1 and ev[0]["rss_bytes"] > 120 * 1024 * 1024 and ev[0]["max_rss"] == 120 * 1024 * 1024
    assert sup.events("exit")[0]["reason"] == "memory-limit"
    assert [s["attempt"] for s in sup.events("spawn")] == [1, 2]


@pytest.mark.timeout(90)
def test_supervisor_killed_with_9_then_supervise_again_runs_no_duplicate(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = Supervised(run_dir, helper_agent("grandchildren", "3", "sleep"), *FAST)
    pids: list[int] = []
    try:
        pids = grandchild_pids(run_dir)
        agent = first.events("spawn")[0]["pid"]
        # the guardian would stop the whole tree at once (test_supervisor_tree.py): without it,
        # the next supervisor is the one to find what is left
        os.kill(guardian_of(first.pid), signal.SIGKILL)
        first.kill()
        # parent-death signal: the agent does not run on unsupervised
        wait_for(lambda: not alive(agent), timeout=10, what="the agent to die with its supervisor")
        assert all(alive(p) for p in pids)  # grandchildren survive a -9 of the whole chain ...
        assert (run_dir / rundir.SUPERVISOR_LOCK).exists() and (run_dir / rundir.CONTROL_SOCK).exists()
        r = run_cli("status", str(run_dir), "--json")
        assert orjson.loads(r.stdout)["state"] == "crashed"  # died without recording an end: not a stop on request
        # ... and the next supervisor stops them before it starts its own attempt (command reused from run.json)
        with Supervised(run_dir, None, *FAST) as second:
            assert second.wait(30) == 0, second.stderr()
        start = second.events("supervisor-start")[-1]
        assert sorted(start["leftovers_stopped"]) == sorted(pids)
        assert [p for p in pids if alive(p)] == []
        spawns = second.events("spawn")
        assert [s["attempt"] for s in spawns] == [1, 2] and spawns[1]["argv"][-1] == "--resume"
        assert rundir.read_run_json(run_dir)["status"] == "succeeded"
    finally:
        first.kill()
        kill_pids(pids)


@pytest.mark.timeout(90)
def test_sigterm_leaves_a_run_that_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = research("--steps", "30", "--step-delay", "0.05")
    with Supervised(run_dir, cmd, "-q") as sup:
        wait_for(lambda: sup.try_status().get("records", 0) >= 12, timeout=30, what="some steps")
        agent = sup.status()["pid"]
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.wait(20) == 143
    assert not alive(agent)
    assert rundir.read_run_json(run_dir)["status"] == "stopped"
    done_before = len(load(run_dir).steps)
    assert 3 <= done_before < 35
    with Supervised(run_dir, None, "-q") as again:
        assert again.wait(60) == 0, again.stderr()
    h = load(run_dir)
    assert len(h.steps) == 35 and rundir.read_run_json(run_dir)["status"] == "succeeded"
    ledger = [orjson.loads(ln) for ln in (run_dir / "ledger.jsonl").read_bytes().splitlines()]
    counts: dict[str, int] = {}
    for e in ledger:
        counts[e["step"]] = counts.get(e["step"], 0) + 1
    extra = sum(counts.values()) - len(counts)
    assert extra <= 1 and set(counts) == {r["step"] for r in h.steps if r["step"] != "write_report"}
    assert "replayed" in again.stdout() and (run_dir / "report.md").exists()


@pytest.mark.timeout(90)
def test_control_rollback_pause_resume_restart(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, research("--steps", "300", "--step-delay", "0.03"), *FAST, "-q") as sup:
        wait_for(lambda: sup.try_status().get("records", 0) >= 10, timeout=30, what="some steps")
        bad = sup.request({"cmd": "rollback", "checkpoint": "nope"})
        assert bad["ok"] is False and "plan-done" in bad["error"]
        r = run_cli("rollback", str(run_dir), "--to", "plan-done", "--reason", "try another way", "--json")
        assert r.returncode == 0, r.stderr
        res = orjson.loads(r.stdout)
        assert res["ok"] and res["live"] is True and res["checkpoint"] == "plan-done"
        rec = next(e for e in load(run_dir).entries if e["seq"] == res["seq"])
        assert rec["kind"] == "rollback" and rec["reason"] == "try another way" and rec["by"] == "user"
        sup.wait_event("spawn", 2)
        assert sup.events("exit")[0]["reason"] == "rollback"
        assert sup.events("spawn")[1]["argv"][-1] == "--resume"
        # pause: a crash is not restarted until resume
        assert sup.request({"cmd": "pause"})["paused"] is True
        st = wait_for(lambda: (lambda s: s if s.get("pid") else None)(sup.try_status()), timeout=10, what="pid")
        os.kill(st["pid"], signal.SIGKILL)
        wait_for(lambda: sup.status()["state"] == "paused", timeout=10, what="paused state")
        assert len(sup.events("spawn")) == 2
        assert sup.request({"cmd": "resume"})["ok"]
        sup.wait_event("spawn", 3)
        assert sup.request({"cmd": "restart"})["ok"]
        sup.wait_event("spawn", 4)
        assert sup.events("restart")[-1]["reason"] == "request"
        assert sup.request({"cmd": "stop"})["ok"]
        assert sup.wait(20) == 0
    assert [e["event"] for e in sup.events() if e["event"] in ("pause", "resume")] == ["pause", "resume"]


@pytest.mark.timeout(60)
def test_offline_rollback_then_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, research(), "-q") as sup:
        assert sup.wait(30) == 0
    r = run_cli("rollback", str(run_dir), "--to", "nope")
    assert r.returncode == 2 and "plan-done" in r.stderr and "research-done" in r.stderr
    r = run_cli("rollback", str(run_dir), "--to", "plan-done")
    assert r.returncode == 0, r.stderr
    assert "rolled back to plan-done" in r.stdout
    ev = [e for e in sup.events("rollback")]
    assert ev[-1]["live"] is False and ev[-1]["checkpoint"] == "plan-done"
    assert not (run_dir / rundir.SUPERVISOR_LOCK).exists()
    with Supervised(run_dir, None, "-q") as again:
        assert again.wait(30) == 0
    searches = [orjson.loads(ln) for ln in (run_dir / "ledger.jsonl").read_bytes().splitlines()]
    assert sum(1 for s in searches if s["step"] == "search:q1") == 2  # re-ran after the rollback
    assert "replayed ['plan']" in again.stdout()


@pytest.mark.timeout(60)
def test_sdk_failure_policy_exit_75_restarts_at_once(tmp_path: Path) -> None:
    """Three failures of search:q2: two crashes, then the SDK rolls back and exits 75; the fallback succeeds."""
    run_dir = tmp_path / "run"
    with Supervised(run_dir, research("--fail", "search:q2:3"), *FAST) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    assert [e["code"] for e in sup.events("exit")] == [1, 1, 75, 0]
    assert len(sup.events("backoff")) == 1  # only attempt 2 made no progress; 75 counts as progress
    assert [r["reason"] for r in sup.events("restart")] == ["crash", "crash", "rollback requested"]
    h = load(run_dir)
    assert [r["by"] for r in h.rollbacks] == ["sdk"]
    assert "rollbacks: 1" in sup.stdout()
    assert rundir.read_run_json(run_dir)["status"] == "succeeded"


ARGV_AGENT = (
    "import os, sys; print('ARGV', sys.argv[1:], 'RESUME', os.environ['AGENT_SUPERVISOR_RESUME'], flush=True); "
    "sys.exit(0 if os.environ['AGENT_SUPERVISOR_ATTEMPT'] == '2' else 1)"
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("opts", "second"), [
    ((), "ARGV ['x', '--resume'] RESUME 1"),
    (("--resume-flag=--continue",), "ARGV ['x', '--continue'] RESUME 1"),
    (("--no-resume-flag",), "ARGV ['x'] RESUME 1"),
])
def test_resume_flag_options(tmp_path: Path, opts: tuple[str, ...], second: str) -> None:
    from .supervisor_util import PY

    with Supervised(tmp_path / "run", [PY, "-c", ARGV_AGENT, "x"], *FAST, "-q", *opts) as sup:
        assert sup.wait(30) == 0, sup.stderr()
    assert sup.stdout().splitlines() == ["ARGV ['x'] RESUME 0", second]


@pytest.mark.timeout(60)
def test_stop_escalates_to_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    from .supervisor_util import PY

    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
    with Supervised(tmp_path / "run", [PY, "-c", stubborn], "--stop-grace", "0.5") as sup:
        wait_for(lambda: "ready" in sup.stdout(), timeout=20, what="the agent to start")
        t0 = time.monotonic()
        assert sup.request({"cmd": "stop"})["ok"]
        assert sup.wait(20) == 0
        assert 0.4 < time.monotonic() - t0 < 10
    ex = sup.events("exit")[0]
    assert ex["signal"] == "SIGKILL" and ex["reason"] == "stop"
    assert "did not stop within 0.5 s: SIGKILL" in sup.stderr()
    # a second request after the end: nobody listens any more
    r = run_cli("status", str(tmp_path / "run"), "--json")
    assert orjson.loads(r.stdout)["state"] == "stopped"


@pytest.mark.timeout(60)
def test_offline_rollback_after_a_kill_9_stops_the_leftovers_first(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = Supervised(run_dir, helper_agent("grandchildren", "2", "sleep"), *FAST)
    pids: list[int] = []
    try:
        pids = grandchild_pids(run_dir)
        os.kill(guardian_of(first.pid), signal.SIGKILL)  # else it stops them first
        first.kill()
        r = run_cli("rollback", str(run_dir), "--to", "start", "--json")
        assert r.returncode == 0, r.stderr
        assert orjson.loads(r.stdout)["live"] is False
        assert [p for p in pids if alive(p)] == []
        assert load(run_dir).rollbacks[-1]["checkpoint"] is None
    finally:
        first.kill()
        kill_pids(pids)


@pytest.mark.timeout(60)
def test_a_start_up_failure_seen_twice_alike_is_not_retried_to_the_limit(tmp_path: Path) -> None:
    """An agent that cannot import its module fails the same way each time: given up after the second attempt,
    and the error is in the supervisor's lines, run.json's reason and ``status`` (issue 26, item 5)."""
    run_dir = tmp_path / "run"
    with Supervised(run_dir, [PY, "-c", "import no_such_module_for_this_test"], *FAST, "--give-up-after", "10") as sup:
        assert sup.wait(30) == 1, sup.stderr()
    assert len(sup.events("exit")) == 2
    assert "failed the same way before their first step: ModuleNotFoundError" in sup.stderr()
    reason = rundir.read_run_json(run_dir)["reason"]
    assert reason == "the agent fails at start-up: ModuleNotFoundError: No module named 'no_such_module_for_this_test'"
    assert "ModuleNotFoundError" in run_cli("status", str(run_dir)).stdout
    # an error that may pass (a refused connection) is retried as the policy says, and the give-up says it
    run2 = tmp_path / "run2"
    with Supervised(run2, [PY, "-c", "raise ConnectionRefusedError('the database is not up yet')"], *FAST,
                    "--rollback-after", "0", "--give-up-after", "3") as sup:
        assert sup.wait(30) == 1, sup.stderr()
    assert len(sup.events("exit")) == 3
    assert "code 1 after" in sup.stderr() and ": ConnectionRefusedError: the database is not up yet" in sup.stderr()
    assert rundir.read_run_json(run2)["reason"].endswith("the last said: ConnectionRefusedError: the database is not up yet")
