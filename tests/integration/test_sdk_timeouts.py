"""A plain step function past its timeout, in real agent processes (issue 28, item 4): Python cannot stop it, so
its retry does not start while it still runs (unless the step says ``overlap_retry=True``), and a step that hangs
in every attempt costs one call an attempt until the run gives up. Calls are counted in a file the step function
appends to (``start`` when it is called, ``end`` when it returns)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from supervisor.core.journal_reader import JournalReader

from ..conftest import ROOT, clean_env
from .supervisor_util import Supervised

AGENT = '''
import asyncio, sys, threading, time
from supervisor import Run

run_dir, calls, mode, hang, overlap, timeout = sys.argv[1:7]
opened = {k: int(v) for k, v in (a.split("=") for a in sys.argv[7:] if a != "--resume")}

def work() -> str:
    with open(calls, "a") as f:
        f.write("start\\n")
    if hang == "forever":
        threading.Event().wait()
    time.sleep(float(hang))
    with open(calls, "a") as f:
        f.write("end\\n")
    return "late"

with Run.open(run_dir, **opened) as run:
    extra = {"overlap_retry": True} if overlap == "overlap" else {}
    opts = run.with_options(timeout=float(timeout), retries=2, backoff=0.01, **extra)
    if mode == "async":
        asyncio.run(opts.astep("hang", work))
    else:
        opts.step("hang", work)
'''


def agent_argv(tmp_path: Path, mode: str, hang: str, overlap: str = "no", timeout: float = 0.4, *opened: str) -> list[str]:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return [sys.executable, str(script), str(tmp_path / "run"), str(tmp_path / "calls"), mode, hang, overlap,
            str(timeout), *opened]


def run_agent(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=20, check=False)


def calls(tmp_path: Path) -> list[str]:
    p = tmp_path / "calls"
    return p.read_text().split() if p.exists() else []


def overlapped(lines: list[str]) -> bool:
    """Whether a call started while an earlier one had not ended."""
    running = 0
    for line in lines:
        if line == "start":
            if running:
                return True
            running += 1
        else:
            running -= 1
    return False


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_retry_waits_for_the_timed_out_call_to_end(tmp_path: Path, mode: str) -> None:
    # each call takes 0.5 s against a timeout of 0.4 s: every try times out, and each retry starts only once the
    # call before it has returned (within the one more timeout the retry waits)
    r = run_agent(agent_argv(tmp_path, mode, "0.5"))
    lines = calls(tmp_path)
    assert r.returncode == 1, r.stderr
    assert lines.count("start") == 3 and not overlapped(lines), lines
    assert ("timed out after 0.4 s (try 3 of 3); a plain function cannot be stopped: it may still be running"
            in r.stderr), r.stderr
    tries = [rec for rec in JournalReader(tmp_path / "run").load() if rec.get("kind") == "step"]
    assert [rec.get("transient") for rec in tries] == [True, True, None]
    assert "(try 1 of 3)" in tries[0]["error"]["message"] and tries[0]["error"]["type"] == "TimeoutError"
    assert all(rec["dur_ms"] < 1000 for rec in tries)  # a try's time, not the wait for its call to end


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_that_never_ends_is_not_retried_in_the_process(tmp_path: Path, mode: str) -> None:
    r = run_agent(agent_argv(tmp_path, mode, "forever"))
    assert r.returncode == 1, r.stderr
    assert calls(tmp_path) == ["start"]  # one call: its retries are not paid while it runs
    assert "not retried while it runs" in r.stderr and "(try 1 of 3)" in r.stderr, r.stderr


def test_overlap_retry_starts_the_retry_beside_the_running_call(tmp_path: Path) -> None:
    r = run_agent(agent_argv(tmp_path, "sync", "forever", "overlap", 0.2))
    assert r.returncode == 1, r.stderr
    assert calls(tmp_path) == ["start"] * 3  # three calls at once: the step said that is safe
    assert "(try 3 of 3)" in r.stderr, r.stderr


def test_an_always_hanging_step_gives_up_after_the_failure_limit_one_call_an_attempt(tmp_path: Path) -> None:
    # max_failures=2, max_rollbacks=1: two failed attempts, a rollback, two more, give up: four attempts, four
    # calls (before: every attempt paid all its retries, 3 calls each, 12 in all)
    argv = agent_argv(tmp_path, "sync", "forever", "no", 0.4, "max_failures=2", "max_rollbacks=1")
    with Supervised(tmp_path / "run", argv, "--backoff-initial", "0.05", "-q") as sup:
        code = sup.wait(timeout=30)
    assert code != 0, sup.stderr()
    assert calls(tmp_path) == ["start"] * 4
    spawns = sup.events("spawn")
    assert len(spawns) == 4, spawns
    status = orjson.loads((tmp_path / "run" / "run.json").read_bytes()).get("status")
    assert status == "failed"
    recs = list(JournalReader(tmp_path / "run").load())
    assert [r.get("kind") for r in recs if r.get("kind") in ("rollback",)] == ["rollback"]
    gave_up = [r for r in recs if r.get("kind") == "note" and r.get("status") == "failed"]
    assert gave_up and "2 consecutive failures of step 'hang'" in gave_up[0]["reason"], gave_up


CORO_AGENT = '''
import asyncio, sys
from supervisor import Run

async def slow() -> None:
    await asyncio.sleep(5)

async def own() -> None:
    raise TimeoutError("its own timeout")

with Run.open(sys.argv[1], max_failures=100) as run:
    for fn in (slow, own):
        try:
            asyncio.run(run.with_options(timeout=0.05, retries=1, backoff=0.01).astep(fn.__name__, fn))
        except TimeoutError as e:
            print(fn.__name__, str(e))
'''


@pytest.mark.timeout(60)
def test_a_coroutine_past_its_timeout_says_so_with_the_try(tmp_path: Path) -> None:
    """An async step cancelled at its timeout was journaled as ERROR with an empty message (issue 26, item 12)."""
    agent = tmp_path / "agent.py"
    agent.write_text(CORO_AGENT)
    r = subprocess.run([sys.executable, str(agent), str(tmp_path / "run")], capture_output=True, text=True, timeout=60,
                       env=clean_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "slow step 'slow' timed out after 0.05 s (try 2 of 2); it was cancelled" in r.stdout
    assert "own its own timeout" in r.stdout  # a TimeoutError of the step's own is left as it is
    errors = [e["error"]["message"] for e in JournalReader(tmp_path / "run").load()
              if type(e) is dict and e.get("step") == "slow" and e.get("error")]
    assert errors == [f"step 'slow' timed out after 0.05 s (try {i} of 2); it was cancelled" for i in (1, 2)]
