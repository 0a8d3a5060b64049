"""The supervisor end to end with real processes: crash and resume, the file contract, status, bad input."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir
from supervisor.core.history import load

from ..conftest import run_cli, wait_for
from .supervisor_util import MINIMAL_AGENT, PY, Supervised, research


def ledger(run_dir: Path) -> list[dict]:
    return [orjson.loads(ln) for ln in (run_dir / "ledger.jsonl").read_bytes().splitlines() if ln.strip()]


@pytest.mark.timeout(60)
def test_crash_in_step_3_is_resumed_and_completes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, research("--crash-in", "search:q2")) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    # the fake model was called twice in total: plan and summarize, never again on resume
    assert sum(1 for e in ledger(run_dir) if e["kind"] == "model") == 2
    exits = sup.events("exit")
    crashes = [e for e in exits if e["code"] != 0]
    assert len(crashes) == 1 and crashes[0]["step"] == "search:q2"
    assert crashes[0]["code"] == 1 and crashes[0]["signal"] is None
    assert any("crashing hard in search:q2" in line for line in crashes[0]["stderr_tail"])
    spawns = sup.events("spawn")
    assert [s["attempt"] for s in spawns] == [1, 2]
    assert "--resume" not in spawns[0]["argv"] and spawns[1]["argv"][-1] == "--resume"
    meta = rundir.read_run_json(run_dir)
    assert meta["status"] == "succeeded" and meta["attempts"] == 2 and meta["supervisor_pid"] == sup.pid
    assert meta["command"] == research("--crash-in", "search:q2")
    # the second attempt replayed plan and search:q1 and ran the rest
    assert "replayed ['plan', 'search:q1']" in sup.stdout()
    log = (run_dir / "agent.log").read_text()
    assert "[1:stderr] research_agent: crashing hard in search:q2" in log
    assert "attempt 2 started" in log
    assert "exited with code 1 in step search:q2" in sup.stderr()
    # files 0600, no lock or socket left behind
    for name in ("run.json", "supervisor.jsonl", "agent.log", "journal.jsonl"):
        assert (run_dir / name).stat().st_mode & 0o777 == 0o600, name
    assert not (run_dir / rundir.SUPERVISOR_LOCK).exists() and not (run_dir / rundir.CONTROL_SOCK).exists()


@pytest.mark.timeout(60)
def test_hand_written_journal_without_sdk_is_resumed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, [PY, str(MINIMAL_AGENT), "--steps", "5", "--crash-at", "3"], "-q") as sup:
        assert sup.wait(45) == 0, sup.stderr()
    steps = [e["step"] for e in ledger(run_dir)]
    assert steps == [f"step-{i}" for i in range(5)]  # each side effect once
    h = load(run_dir)
    assert [r["step"] for r in h.steps] == [f"step-{i}" for i in range(5)]
    exits = sup.events("exit")
    assert [e["code"] for e in exits] == [1, 0]
    assert exits[0]["progress"] == 3
    assert sup.events("spawn")[1]["argv"][-1] == "--resume"
    assert "3 steps already done" in sup.stdout() and "total 100" in sup.stdout()
    # -q: no progress lines, only the agent's own stderr (teed)
    assert sup.stderr() == "minimal_agent: crashing before step-3\n"


@pytest.mark.timeout(60)
def test_live_status_and_offline_status(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, research("--steps", "200", "--step-delay", "0.05"), "-q") as sup:
        st = wait_for(lambda: (lambda s: s if s.get("rss_bytes") and s.get("records", 0) > 3 else None)(sup.try_status()),
                      timeout=20, what="status with figures")
        assert st["ok"] and st["state"] == "running" and st["attempt"] == 1 and st["restarts"] == 0
        assert st["pid"] == sup.events("spawn")[0]["pid"] and st["supervisor_pid"] == sup.pid
        assert st["threads"] >= 1 and st["rss_bytes"] > 1_000_000 and isinstance(st["cpu_percent"], float)
        assert st["run_dir"] == str(run_dir.resolve())
        assert st["state_since"] >= sup.events("spawn")[0]["ts"][:19]
        r = run_cli("status", str(run_dir), "--json")
        assert r.returncode == 0, r.stderr
        assert orjson.loads(r.stdout)["live"] is True
        r = run_cli("status", str(run_dir))
        assert "state      running (pid" in r.stdout and "agent tree cpu" in r.stdout
        assert sup.request({"cmd": "frobnicate"})["ok"] is False
        assert "unknown command" in sup.request({"cmd": "frobnicate"})["error"]
        assert sup.request({"cmd": "stop"})["ok"] is True
        assert sup.wait(20) == 0
    r = run_cli("status", str(run_dir), "--json")
    st = orjson.loads(r.stdout)
    assert st["live"] is False and st["state"] == "stopped" and st["attempt"] == 1
    assert "no supervisor running" in run_cli("status", str(run_dir)).stdout


# --------------------------------------------------------------------------- bad input


def _sup(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    r = run_cli("supervise", *args, cwd=cwd)
    return r.returncode, r.stderr


def test_missing_command(tmp_path: Path) -> None:
    rc, err = _sup("--run-dir", str(tmp_path / "r"), "--")
    assert rc == 2 and "missing command" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_command_not_found_and_not_executable(tmp_path: Path) -> None:
    rc, err = _sup("--run-dir", str(tmp_path / "r"), "--", "no-such-agent-xyz")
    assert rc == 2 and "command not found" in err and err.count("\n") == 1
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    rc, err = _sup("--run-dir", str(tmp_path / "r"), "--", str(script))
    assert rc == 2 and "not executable" in err and "chmod +x" in err
    rc, err = _sup("--run-dir", str(tmp_path / "r"), "--", str(tmp_path / "missing.sh"))
    assert rc == 2 and "does not exist" in err
    assert not (tmp_path / "r").exists()
    # the default run directory is not created either
    rc, err = _sup("--", "no-such-agent-xyz", cwd=tmp_path)
    assert rc == 2 and not (tmp_path / "runs").exists()


def test_run_dir_not_writable(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes anywhere a mode allows; sysfs refuses mkdir even to root
        rc, err = _sup("--run-dir", "/sys/agent-supervisor-test-run", "--", PY, "-c", "pass")
        assert rc == 2 and "cannot create" in err and "Traceback" not in err
        return
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    rc, err = _sup("--run-dir", str(ro / "r"), "--", PY, "-c", "pass")
    assert rc == 2 and "not writable" in err


def test_run_dir_is_a_file_or_newer_format(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    rc, err = _sup("--run-dir", str(f), "--", PY, "-c", "pass")
    assert rc == 2 and "is a file" in err
    rc, err = _sup("--run-dir", str(f / "sub"), "--", PY, "-c", "pass")
    assert rc == 2 and "is a file, not a directory" in err
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "run.json").write_text('{"format": 99, "status": "succeeded"}')
    rc, err = _sup("--run-dir", str(newer), "--", PY, "-c", "pass")
    assert rc == 2 and "newer" in err and "upgrade" in err
    assert sorted(os.listdir(newer)) == ["run.json"]
    assert orjson.loads((newer / "run.json").read_bytes())["format"] == 99


@pytest.mark.timeout(60)
def test_second_supervisor_is_refused_naming_the_first(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, research("--steps", "100", "--step-delay", "0.05"), "-q") as sup:
        sup.wait_event("spawn")
        rc, err = _sup("--run-dir", str(run_dir), "--", PY, "-c", "pass")
        assert rc == 2 and f"supervised by pid {sup.pid}" in err and "Traceback" not in err
        assert len(sup.events("spawn")) == 1
        assert sup.request({"cmd": "stop"})["ok"]
        sup.wait(20)


@pytest.mark.timeout(60)
def test_unsupervised_agent_holding_the_journal_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    from supervisor.core.journal_writer import JournalWriter

    w = JournalWriter(run_dir)  # stands for an agent running without a supervisor
    try:
        rc, err = _sup("--run-dir", str(run_dir), "--", PY, "-c", "pass")
        assert rc == 2 and "without a supervisor" in err
        assert not (run_dir / "run.json").exists() and not (run_dir / "supervisor.jsonl").exists()
    finally:
        w.close()


def test_help_shows_defaults() -> None:
    r = run_cli("supervise", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "--backoff-initial S" in text and "(default: 0.5)" in text and "(default: --resume)" in text


@pytest.mark.timeout(60)
def test_a_pipe_reader_that_does_not_read_cannot_stall_the_supervisor(tmp_path: Path) -> None:
    """The TUI may start the supervisor with stdout=PIPE and read it late (or never)."""
    import subprocess

    from ..conftest import clean_env
    from .supervisor_util import ROOT

    run_dir = tmp_path / "run"
    code = "import sys\nfor i in range(40000): print(f'line {i:06d} ' + 'x' * 40)\nsys.exit(0)"
    p = subprocess.Popen(
        [PY, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), "-q", "--", PY, "-c", code],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env(), cwd=ROOT,
    )
    try:
        # 2 MB of output into a 64 KiB pipe nobody reads: the run still finishes
        wait_for(lambda: rundir.read_run_json(run_dir).get("status") == "succeeded" if (run_dir / "run.json").exists() else False,
                 timeout=40, what="the run to succeed while its stdout pipe is full")
        assert p.stdout is not None
        out = p.stdout.read()
        assert p.wait(20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if p.stdout:
            p.stdout.close()
    log = (run_dir / "agent.log").read_text()
    assert log.count("[1:stdout] line ") == 40000  # the file has everything
    assert out.startswith(b"line 000000 ") and len(out) > 64 * 1024  # the held output reached the reader


@pytest.mark.timeout(60)
def test_a_run_begun_without_a_supervisor_goes_on_numbering_its_attempts(tmp_path: Path) -> None:
    """The agent ran twice by hand (attempts 1 and 2 in the journal's start records); supervised next,
    its attempt is 3, not 1 again: attempt numbers stay unique in the journal and in the exports."""
    import subprocess

    from ..conftest import clean_env

    run_dir = tmp_path / "run"
    first = subprocess.run(research("--run-dir", str(run_dir), "--crash-in", "search:q2"),
                           env=clean_env(), capture_output=True, text=True, timeout=30, check=False)
    assert first.returncode == 1, first.stderr
    second = subprocess.run(research("--run-dir", str(run_dir)), env=clean_env(), capture_output=True, text=True,
                            timeout=30, check=False)
    assert second.returncode == 0, second.stderr
    with Supervised(run_dir, research("--run-dir", str(run_dir)), "-q") as sup:
        assert sup.wait(45) == 0, sup.stderr()
    assert [s["attempt"] for s in sup.events("spawn")] == [3]
    starts = [r["attempt"] for r in map(orjson.loads, (run_dir / "journal.jsonl").read_bytes().splitlines()) if r["kind"] == "start"]
    assert starts == [1, 2, 3]


GATHER_AGENT = '''
import asyncio, sys
from supervisor import Run

async def search(q):
    if q == "q3":
        raise ConnectionError("upstream reset while fetching q3")
    await asyncio.sleep(30)  # the others are still in flight when q3's error ends the agent

async def main():
    with Run.open(sys.argv[1]) as run:
        await asyncio.gather(*(run.astep("search", search, f"q{i}") for i in range(6)))

asyncio.run(main())
'''


@pytest.mark.timeout(60)
def test_a_crash_of_concurrent_steps_names_the_step_that_failed_not_the_first_in_flight(tmp_path: Path) -> None:
    """Six searches in flight, the fourth raises and ends the agent: the exit line, its event and the give-up
    lines name search #3 and what it raised (they named search #0, the first in flight, issue 26 item 12)."""
    agent = tmp_path / "agent.py"
    agent.write_text(GATHER_AGENT)
    run_dir = tmp_path / "run"
    with Supervised(run_dir, [PY, str(agent), str(run_dir)], "--give-up-after", "2", "--backoff-initial", "0.05") as sup:
        assert sup.wait(45) != 0
    crashes = [e for e in sup.events("exit") if e["code"] != 0]
    assert len(crashes) == 2
    assert all(e["step"] == "search #3 (it raised ConnectionError; 5 more in flight)" for e in crashes), crashes
    err = sup.stderr()
    assert "attempt 1 exited with code 1 in step search #3 (it raised ConnectionError; 5 more in flight)" in err
    assert "attempt 2: code 1 after" in err and "in step search #3 (it raised ConnectionError" in err
