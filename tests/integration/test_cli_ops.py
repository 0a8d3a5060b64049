"""``runs``, ``stop``, ``restart``, ``logs`` and ``completion`` as real processes against real supervisors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from ..conftest import ROOT, clean_env, run_agent, run_cli, wait_for
from .supervisor_util import PY, Supervised, alive, research


def printer(n: int, delay: float = 0.0) -> list[str]:
    """An agent that prints ``n`` numbered lines of about 100 bytes, ``delay`` seconds apart."""
    code = (
        "import sys, time\n"
        f"for i in range({n}):\n"
        "    print(f'line {i} ' + 'x' * 90, flush=True)\n"
        f"    time.sleep({delay})\n"
    )
    return [PY, "-c", code]


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or clean_env(), cwd=cwd or ROOT)


def _numbers(text: str) -> list[int]:
    """The numbers of the printer's lines in ``agent.log`` text (stdout lines only)."""
    return [int(ln.split(":stdout] line ")[1].split()[0]) for ln in text.splitlines() if ":stdout] line " in ln]


def _one_line_error(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


@pytest.mark.timeout(90)
def test_runs_lists_each_run_with_status_steps_and_attempts(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    assert run_agent(root / "done").returncode == 0
    r = run_agent(root / "crashed", "--crash-in", "search:q2")
    assert r.returncode != 0
    (root / "not-a-run").mkdir()
    res = run_cli("runs", str(root))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:4] == ["RUN", "STATUS", "STEPS", "ATTEMPTS"]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:]}
    assert set(rows) == {"done", "crashed"}  # a plain directory is not a run
    assert rows["done"][1] == "succeeded" and rows["done"][2] == "5"
    assert rows["crashed"][2] == "2"  # plan and search:q1 committed before the crash in q2
    # --json: one object per run, numbers as numbers; the runs root from the environment
    env = {**clean_env(), "AGENT_SUPERVISOR_RUNS": str(root)}
    res = _cli("runs", "--json", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    objs = {o["id"] if o["id"] in ("done", "crashed") else Path(o["path"]).name: o
            for o in map(orjson.loads, res.stdout.splitlines())}
    assert {Path(o["path"]).name for o in objs.values()} == {"done", "crashed"}
    done = next(o for o in objs.values() if Path(o["path"]).name == "done")
    assert done["steps"] == 5 and done["status"] == "succeeded" and done["live"] is False


def test_runs_refuses_a_missing_root_and_a_run(tmp_path: Path) -> None:
    err = _one_line_error(run_cli("runs", str(tmp_path / "nope")))
    assert "no such directory" in err
    err = _one_line_error(_cli("runs", cwd=tmp_path))  # the default ./runs does not exist here
    assert "AGENT_SUPERVISOR_RUNS" in err
    assert run_agent(tmp_path / "r").returncode == 0
    err = _one_line_error(run_cli("runs", str(tmp_path / "r")))
    assert "is a run" in err and "status" in err


@pytest.mark.timeout(120)
def test_restart_then_stop_wait_until_done(tmp_path: Path) -> None:
    run = tmp_path / "live"
    with Supervised(run, research("--steps", "2000", "--step-delay", "0.1")) as sup:
        first = wait_for(lambda: (lambda s: s if s.get("pid") else None)(sup.try_status()), what="agent running")
        res = run_cli("restart", str(run))
        assert res.returncode == 0, res.stderr
        assert "restarted: attempt 2" in res.stdout
        st = sup.status()
        assert st["attempt"] == 2 and st["pid"] != first["pid"] and not alive(first["pid"])  # type: ignore[index]
        res = run_cli("stop", str(run))
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip().endswith("stopped")
        # `stop` returned once the supervisor was done: run.json final, the agent gone, the process exiting
        assert orjson.loads((run / "run.json").read_bytes())["status"] == "stopped"
        assert not alive(st["pid"])
        assert sup.wait(15) == 0
    # stopping a stopped run: the wanted state holds, exit 0; restarting one: no supervisor, one line, exit 2
    res = run_cli("stop", str(run))
    assert res.returncode == 0 and "nothing to stop" in res.stderr
    err = _one_line_error(run_cli("restart", str(run)))
    assert "no supervisor is running" in err and "supervise --run-dir" in err
    _one_line_error(run_cli("stop", str(tmp_path / "not-a-run")))


@pytest.mark.timeout(120)
def test_logs_prints_every_segment_in_order_and_follows_to_the_end(tmp_path: Path) -> None:
    run = tmp_path / "chatty"
    # each line ~100 bytes; agent.log rotates at 4 KiB, so 300 lines span several sealed segments
    with Supervised(run, printer(300), "--log-max-bytes", "4096", "-q") as sup:
        assert sup.wait(60) == 0, sup.stderr()
    sealed = sorted(run.glob("agent.0*.log"))
    assert len(sealed) >= 3
    res = run_cli("logs", str(run))
    assert res.returncode == 0, res.stderr
    assert _numbers(res.stdout) == list(range(300))  # every line once, in order, across the rotations
    res = run_cli("logs", str(run), "-n", "3")
    assert len(res.stdout.splitlines()) == 3 and _numbers(res.stdout)[-2:] == [298, 299]


@pytest.mark.timeout(120)
def test_logs_follow_sees_new_output_and_ends_with_the_supervisor(tmp_path: Path) -> None:
    run = tmp_path / "follow"
    with Supervised(run, printer(400, 0.01), "--log-max-bytes", "4096", "-q") as sup:
        wait_for(lambda: (run / "agent.log").exists(), what="agent.log")
        out = open(tmp_path / "follow.out", "wb")
        err = open(tmp_path / "follow.err", "wb")
        f = subprocess.Popen([sys.executable, "-m", "supervisor", "logs", "-f", str(run)], stdout=out,
                             stderr=err, env=clean_env(), cwd=ROOT)
        try:
            assert sup.wait(60) == 0, sup.stderr()
            # it ends by itself once the supervisor is gone
            assert f.wait(30) == 0, (tmp_path / "follow.err").read_text()
        finally:
            if f.poll() is None:
                f.kill()
                f.wait(10)
            out.close()
            err.close()
    text = (tmp_path / "follow.out").read_text()
    assert _numbers(text) == list(range(400))  # nothing lost or repeated while following across rotations


def test_logs_of_a_run_that_never_ran_under_supervise(tmp_path: Path) -> None:
    assert run_agent(tmp_path / "r").returncode == 0
    err = _one_line_error(run_cli("logs", str(tmp_path / "r")))
    assert "no agent.log" in err
    _one_line_error(run_cli("logs", str(tmp_path / "r"), "-n", "-1"))


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_are_accepted_by_their_shell(shell: str, tmp_path: Path) -> None:
    res = run_cli("completion", shell)
    assert res.returncode == 0, res.stderr
    assert "rollback" in res.stdout and "replay" in res.stdout  # the subcommands are in it
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} is not installed here; the script was generated")
    script = tmp_path / f"completion.{shell}"
    script.write_text(res.stdout)
    check = [exe, "--no-execute", str(script)] if shell == "fish" else [exe, "-n", str(script)]
    r = subprocess.run(check, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    if shell == "bash":  # and it completes: the subcommands after the program name
        probe = (f"source {script}; COMP_WORDS=(agent-supervisor ro); COMP_CWORD=1; COMP_LINE='agent-supervisor ro'; "
                 "COMP_POINT=${#COMP_LINE}; _shtab_agent_supervisor agent-supervisor ro agent-supervisor; "
                 'printf "%s\\n" "${COMPREPLY[@]}"')
        r = subprocess.run([exe, "-c", probe], capture_output=True, text=True, timeout=30, env={**os.environ})
        assert "rollback" in r.stdout.split(), (r.stdout, r.stderr)


@pytest.mark.timeout(120)
def test_supervise_without_a_command_runs_the_recorded_one_where_it_ran(tmp_path: Path) -> None:
    """The shipped sample runs record 'python research_agent.py' in '../..' (relative to the run directory):
    supervise without '-- CMD' runs it there, from any directory, with an interpreter that has the SDK."""
    samples = tmp_path / "samples"
    shutil.copytree(ROOT / "sample_runs", samples)
    run = samples / "runs" / "crashed-resumed"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    meta = orjson.loads((run / "run.json").read_bytes())
    assert meta["cwd"] == "../.." and meta["command"][0] == "python"
    # a rollback to the start makes the finished run go on: the agent must really start again
    assert _cli("rollback", str(run), "--to", "start", cwd=elsewhere).returncode == 0
    res = _cli("supervise", "--run-dir", str(run), "-q", cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    meta = orjson.loads((run / "run.json").read_bytes())
    assert meta["status"] == "succeeded" and meta["cwd"] == str(samples.resolve())
    assert not (elsewhere / "runs").exists()  # nothing was created where supervise was called
    # a recorded working directory that is gone: one line, exit 2
    (run / "run.json").write_bytes(orjson.dumps({**meta, "cwd": str(tmp_path / "gone")}))
    res = _cli("supervise", "--run-dir", str(run), cwd=elsewhere)
    assert res.returncode == 2 and "no longer exists" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.timeout(120)
def test_agent_log_keeps_the_newest_rotated_files_and_logs_prints_what_is_kept(tmp_path: Path) -> None:
    run = tmp_path / "chatty"
    with Supervised(run, printer(600), "--log-max-bytes", "4096", "--log-keep", "2", "-q") as sup:
        assert sup.wait(60) == 0, sup.stderr()
    sealed = sorted(p.name for p in run.glob("agent.0*.log"))
    assert len(sealed) == 2 and sealed[-1] > sealed[0]
    numbers = [int(n[6:-4]) for n in sealed]
    assert numbers[0] > 1  # the oldest were removed, the newest kept
    got = _numbers(run_cli("logs", str(run)).stdout)
    assert got and got[-1] == 599 and got == list(range(got[0], 600))  # the kept tail, whole and in order
    # --log-keep 0 keeps every rotated file
    run2 = tmp_path / "all"
    with Supervised(run2, printer(600), "--log-max-bytes", "4096", "--log-keep", "0", "-q") as sup:
        assert sup.wait(60) == 0, sup.stderr()
    assert _numbers(run_cli("logs", str(run2)).stdout) == list(range(600))


def test_supervisor_events_rotate_and_keep_the_newest(tmp_path: Path) -> None:
    from supervisor.core.events import EventLog, read_events, sealed_event_paths

    run = tmp_path / "run"
    run.mkdir()
    log = EventLog(run, max_bytes=2048, keep=2)
    for i in range(400):
        log.emit("backoff", i, delay_s=0.5, note="x" * 40)
    log.close()
    sealed = sealed_event_paths(run)
    assert len(sealed) == 2 and int(sealed[0].name.split(".")[1]) > 1  # older ones pruned
    attempts = [e["attempt"] for e in read_events(run)]
    assert attempts[-1] == 399 and attempts == list(range(attempts[0], 400))  # the kept tail, in order
    assert all(p.stat().st_size <= 2048 + 200 for p in sealed)
    # keep=0 keeps every file
    run2 = tmp_path / "all"
    run2.mkdir()
    log = EventLog(run2, max_bytes=2048, keep=0)
    for i in range(400):
        log.emit("backoff", i, delay_s=0.5, note="x" * 40)
    log.close()
    assert [e["attempt"] for e in read_events(run2)] == list(range(400))
