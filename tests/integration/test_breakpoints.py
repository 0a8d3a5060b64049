"""Breakpoints and a person in the loop (issue 24): real agents, real files, the CLI as a person types it.

A live step that matches pauses before its function runs (a ``pause`` record), a served one never; each choice
changes what runs and what is recorded; a pause outlives ``kill -9`` of the agent and of its supervisor; one
paused step among 8 concurrent ones holds only itself; ``run.ask`` is answered from the CLI and served on
resume; a paused step is no hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core.journal_reader import JournalReader

from ..conftest import ROOT, clean_env, wait_for
from .supervisor_util import PY, Supervised

AGENT = ROOT / "tests" / "integration" / "break_agent.py"


def _cli(*args: Any, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "supervisor", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(), cwd=ROOT)


def _cmd(run: Path, *args: str) -> list[str]:
    return [PY, str(AGENT), str(run), "--ledger", str(run.parent / "ledger.jsonl"), *args]


@contextmanager
def _agent(run: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    p = subprocess.Popen(_cmd(run, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env(), cwd=ROOT)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=30)


def _records(run: Path) -> list[dict[str, Any]]:
    return [e for e in JournalReader(run).load() if type(e) is dict]


def _ledger(run: Path) -> list[dict[str, Any]]:
    path = run.parent / "ledger.jsonl"
    return [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


def _paused(run: Path) -> dict[str, Any] | None:
    st = orjson.loads(_cli("status", run, "--json").stdout)
    p: dict[str, Any] | None = st.get("paused")
    return p


def _wait_paused(run: Path, step: str, proc: subprocess.Popen[str] | None = None) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        assert proc is None or proc.poll() is None, proc.communicate()
        p = _paused(run) if (run / "journal.jsonl").exists() else None
        return p if p and p["step"] == step else None

    got: dict[str, Any] = wait_for(ready, timeout=30, what=f"a pause before {step}")  # type: ignore[assignment]
    return got


def _new_run(tmp: Path, *patterns: str) -> Path:
    """A run directory that exists (one ``plan``-less start) with breakpoints set, before the agent runs."""
    run = tmp / "run"
    run.mkdir()
    (run / "run.json").write_text('{"format": 1, "id": "run"}')
    for p in patterns:
        assert _cli("break", run, p).returncode == 0
    return run


@pytest.mark.timeout(90)
def test_a_breakpoint_pauses_a_live_step_never_a_served_one(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "tool:*")
    with _agent(run) as p:
        pause = _wait_paused(run, "tool:bash", p)
        assert pause["inputs"] == {"args": ["ls"]} and pause["reason"] == "breakpoint" and pause["pattern"] == "tool:*"
        assert [e["call"] for e in _ledger(run)] == ["plan"]  # its function has not run
        listed = _cli("break", run, "--list").stdout
        assert "tool:*" in listed and "paused before step 'tool:bash'" in listed
        assert _cli("continue", run).returncode == 0
        _wait_paused(run, "tool:edit", p)
        assert _cli("continue", run, "--all").returncode == 0  # clears every breakpoint
        _out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
    assert [e["call"] for e in _ledger(run)] == ["plan", "tool:bash", "tool:edit", "after"]
    choices = [r["choice"] for r in _records(run) if r.get("kind") == "choice"]
    assert choices == ["continue", "all"]
    assert _cli("break", run, "tool:*").returncode == 0
    r = subprocess.run(_cmd(run), capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert r.returncode == 0 and orjson.loads(r.stdout)["replayed"] == 4  # all served: nothing paused
    assert len(_ledger(run)) == 4


@pytest.mark.timeout(90)
def test_each_choice_changes_what_runs_and_what_is_recorded(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "plan")
    with _agent(run) as p:
        _wait_paused(run, "plan", p)
        assert _cli("continue", run, "--step").returncode == 0  # run it, pause before the next live step
        assert _wait_paused(run, "tool:bash", p)["reason"] == "next"
        assert _cli("break", run, "tool:edit").returncode == 0  # set while paused: the next step pauses too
        assert _cli("continue", run, "--inputs", '{"args": ["pwd"]}').returncode == 0  # run with other inputs
        _wait_paused(run, "tool:edit", p)
        assert _cli("continue", run, "--output", '"edited by hand"').returncode == 0  # skip it
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
    calls = [(e["call"], e["args"]) for e in _ledger(run)]
    assert calls == [("plan", [1]), ("tool:bash", ["pwd"]), ("after", [2])]  # tool:edit never ran
    steps = {r["step"]: r for r in _records(run) if r.get("kind") == "step"}
    assert steps["tool:bash"]["inputs"] == {"args": ["ls"]} and steps["tool:bash"]["given_inputs"] == {"args": ["pwd"]}
    assert steps["tool:bash"]["output"] == "tool:bash(pwd)"
    assert steps["tool:edit"]["given"] is True and steps["tool:edit"]["output"] == "edited by hand"
    assert orjson.loads(out)["result"] == ["plan(1)", "tool:bash(pwd)", "edited by hand", "after(2)"]
    # on resume every step is served, the given output included: no pause, nothing runs
    r = subprocess.run(_cmd(run), capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert r.returncode == 0 and orjson.loads(r.stdout)["result"] == orjson.loads(out)["result"]
    assert len(_ledger(run)) == 3


@pytest.mark.timeout(90)
def test_abort_stops_the_run_and_it_resumes_paused_again(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "tool:bash")
    with _agent(run) as p:
        first = _wait_paused(run, "tool:bash", p)
        r = _cli("continue", run, "--abort")
        assert r.returncode == 0, r.stderr
        p.communicate(timeout=30)
        assert p.returncode == 79
    assert [e["call"] for e in _ledger(run)] == ["plan"]
    assert _paused(run) is None  # answered: the run is not paused, only stopped
    with _agent(run) as p:
        again = _wait_paused(run, "tool:bash", p)  # the breakpoint holds: the same step pauses again
        assert again["seq"] != first["seq"]
        assert _cli("continue", run, "--all").returncode == 0
        p.communicate(timeout=30)
        assert p.returncode == 0
    assert [e["call"] for e in _ledger(run)] == ["plan", "tool:bash", "tool:edit", "after"]


@pytest.mark.timeout(120)
def test_a_pause_outlives_kill_9_of_the_agent_and_of_the_supervisor(tmp_path: Path) -> None:
    run = tmp_path / "run"
    opts = ("-q", "--backoff-initial", "0.01", "--backoff-max", "0.05", "--hang-timeout", "1", "--break", "tool:bash")
    with Supervised(run, _cmd(run), *opts) as sup:
        wait_for(lambda: (sup.try_status().get("paused") or {}).get("step") == "tool:bash", timeout=30,
                 what="the supervised agent paused")
        before = sup.status()["paused"]
        pid = sup.status()["pid"]
        os.kill(pid, signal.SIGKILL)  # the agent dies while paused
        wait_for(lambda: (lambda s: s.get("pid") not in (None, pid) and (s.get("paused") or {}).get("seq") == before["seq"])(
            sup.try_status()), timeout=30, what="the restarted agent paused again under the same record")
        assert sup.events("hang") == []  # well past --hang-timeout 1: a paused step is no hang
        sup.kill()  # and the supervisor too
    assert _paused(run)["seq"] == before["seq"]  # offline: still paused, at the same step, with the same inputs
    assert _paused(run)["inputs"] == {"args": ["ls"]}
    with Supervised(run, None, *opts[:-2]) as sup:
        wait_for(lambda: (sup.try_status().get("paused") or {}).get("seq") == before["seq"], timeout=30,
                 what="paused again after the supervisor's restart")
        assert _cli("continue", run).returncode == 0
        assert sup.wait(60) == 0, sup.stderr()[-2000:]
    assert [e["call"] for e in _ledger(run)] == ["plan", "tool:bash", "tool:edit", "after"]
    assert [e["event"] for e in sup.events() if e["event"] in ("paused", "asked")] == ["paused"]


@pytest.mark.timeout(90)
def test_one_paused_step_among_8_concurrent_ones(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "work:3")
    with _agent(run, "--mode", "fan") as p:
        _wait_paused(run, "work:3", p)
        wait_for(lambda: len(_ledger(run)) == 7, timeout=30, what="the 7 other steps")
        assert sorted(e["call"] for e in _ledger(run)) == sorted(f"work:{i}" for i in range(8) if i != 3)
        assert sum(1 for r in _records(run) if r.get("kind") == "step") == 7
        assert _cli("continue", run).returncode == 0
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
    assert orjson.loads(out)["result"] == [[i * i for i in range(8)]]


@pytest.mark.timeout(90)
def test_run_ask_answered_from_the_cli_then_served_on_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with _agent(run, "--mode", "ask") as p:
        q = _wait_paused(run, "ask", p)
        assert q["prompt"] == "ship it?" and q["choices"] == ["yes", "no"] and q["reason"] == "ask"
        bad = _cli("answer", run, "maybe")
        assert bad.returncode == 2 and "not one of the choices" in bad.stderr
        assert _cli("answer", run, "yes").returncode == 0
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
    assert orjson.loads(out)["result"] == ["plan(1)", "yes", "after(yes)"]
    r = subprocess.run(_cmd(run, "--mode", "ask"), capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert r.returncode == 0 and orjson.loads(r.stdout)["result"] == ["plan(1)", "yes", "after(yes)"]
    asks = [r for r in _records(run) if r.get("kind") == "pause"]
    assert len(asks) == 1  # served on resume: not asked again
    # a question with a timeout and a default takes the default
    run2 = tmp_path / "run2"
    r = subprocess.run(_cmd(run2, "--mode", "ask", "--ask-timeout", "0.2"), capture_output=True, text=True, timeout=60,
                       env=clean_env(), cwd=ROOT)
    assert r.returncode == 0 and orjson.loads(r.stdout)["result"][1] == "no"
    assert [c["by"] for c in _records(run2) if c.get("kind") == "choice"] == ["timeout"]


@pytest.mark.timeout(90)
def test_break_interrupted_pauses_a_step_a_crash_cut_off(tmp_path: Path) -> None:
    run = _new_run(tmp_path, "interrupted")
    r = subprocess.run(_cmd(run, "--crash-in", "tool:bash"), capture_output=True, text=True, timeout=60,
                       env=clean_env(), cwd=ROOT)
    assert r.returncode == 3  # its side effect happened, its record never came
    with _agent(run) as p:
        pause = _wait_paused(run, "tool:bash", p)
        assert pause["reason"] == "interrupted"
        assert _cli("continue", run, "--output", '"done before the crash"').returncode == 0  # not done twice
        _out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
    assert [e["call"] for e in _ledger(run)] == ["plan", "tool:bash", "tool:edit", "after"]  # tool:bash once


@pytest.mark.timeout(30)
def test_bad_input_to_the_commands(tmp_path: Path) -> None:
    run = _new_run(tmp_path)
    r = _cli("continue", run)
    assert r.returncode == 2 and "no open paused step" in r.stderr and "Traceback" not in r.stderr
    r = _cli("continue", run, "--inputs", "{nope")
    assert r.returncode == 2 and "not JSON" in r.stderr
    r = _cli("answer", run, "yes")
    assert r.returncode == 2 and "no open question" in r.stderr
    (run / "breakpoints.json").write_text("{")
    r = _cli("break", run, "--list")
    assert r.returncode == 2 and "breakpoints.json is not JSON" in r.stderr
    assert _cli("break", run, "--clear").returncode == 2  # the damaged file is not overwritten silently
    assert (run / "breakpoints.json").read_text() == "{"


@pytest.mark.timeout(60)
def test_abort_under_supervise_stops_the_supervisor_without_a_restart(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with Supervised(run, _cmd(run), "-q", "--break", "tool:bash") as sup:
        wait_for(lambda: (sup.try_status().get("paused") or {}).get("step") == "tool:bash", timeout=30, what="paused")
        assert _cli("continue", run, "--abort").returncode == 0
        assert sup.wait(30) == 0, sup.stderr()[-2000:]
    assert [e["code"] for e in sup.events("exit")] == [79]
    assert sup.events("restart") == [] and len(sup.events("spawn")) == 1
    st = orjson.loads(_cli("status", run, "--json").stdout)
    assert st["state"] == "stopped" and st["paused"] is None
