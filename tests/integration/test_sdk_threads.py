"""Thread steps: steps that change run.state share their syncs (JournalWriter.wait_synced) and a resume rebuilds
the exact state; a rollback or a give-up decided in a worker thread ends the whole process (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor import Run
from supervisor.core import rundir
from supervisor.core.journal_reader import JournalReader

from ..conftest import ROOT, clean_env

THREADS = 16
EACH = 8


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in JournalReader(run_dir).load() if isinstance(r, dict)]


def workload(run: Run) -> None:
    """16 threads, 8 steps each; every step function changes run.state (under run.lock, as the README says)."""

    def work(t: int, i: int) -> int:
        with run.lock:
            run.state.setdefault(f"t{t}", []).append(i)
            run.state["total"] = run.state.get("total", 0) + 1
        return t * 100 + i

    def worker(t: int) -> None:
        for i in range(EACH):
            assert run.step(f"w{t}", work, t, i) == t * 100 + i

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def test_threads_changing_state_share_syncs_and_resume_rebuilds_the_exact_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    real = os.fdatasync

    def slow_fdatasync(fd: int) -> None:  # a 2 ms disk: the threads finishing meanwhile must share the next sync
        real(fd)
        syncs.append(fd)
        time.sleep(0.002)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)  # before the writer picks its sync function
    run_dir = tmp_path / "run"
    run = Run.open(run_dir)
    before = len(syncs)
    workload(run)
    used = len(syncs) - before
    final = orjson.dumps(run.state)
    run.close()

    steps = [r for r in records(run_dir) if r.get("kind") == "step"]
    patched = sum(1 for r in steps if "state_patch" in r)
    assert len(steps) == THREADS * EACH and all(r.get("error") is None for r in steps)
    assert orjson.loads(final)["total"] == THREADS * EACH
    # Synced under the lock, each step with a patch paid its own sync (used >= patched); shared, far fewer.
    assert patched >= THREADS * EACH // 2, patched
    assert used * 2 <= patched, f"{used} fdatasyncs for {patched} steps with a state patch: not shared"

    again = Run.open(run_dir)  # resume: every step is served (threads call them in another order)
    workload(again)
    assert len(again.executed) == 0 and len(again.replayed) == THREADS * EACH
    again.close()
    assert orjson.dumps(again.state) == final  # the exact state, key order included


AGENT = """
import sys, threading
from supervisor import Run

run_dir, mode = sys.argv[1], sys.argv[2]
run = Run.open(run_dir, max_failures=2, max_rollbacks=0 if mode == "give-up" else 3)
run.step("setup", lambda: 1)
run.checkpoint("start")
run.state["phase"] = "work"
stuck = threading.Event()


def boom():
    raise RuntimeError("the service is down")


def failing():
    for _ in range(5):
        try:
            run.step("flaky", boom)
        except RuntimeError:
            pass  # each failure is journaled by the SDK; the thread tries again until a rollback ends the process


# a thread that never ends by itself: the process must end all the same
threading.Thread(target=stuck.wait, name="stuck").start()
t = threading.Thread(target=failing, name="worker")
t.start()
t.join()
print("the main thread went on", flush=True)
stuck.set()
"""


def run_thread_agent(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    script = tmp_path / "thread_agent.py"
    script.write_text(AGENT)
    run_dir = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, str(script), str(run_dir), mode],
        capture_output=True, text=True, timeout=20, env=clean_env(), cwd=ROOT, check=False,
    )
    return r, run_dir


def test_rollback_decided_in_a_worker_thread_ends_the_process_with_75(tmp_path: Path) -> None:
    r, run_dir = run_thread_agent(tmp_path, "rollback")
    assert r.returncode == rundir.EXIT_ROLLBACK, r.stdout + r.stderr
    assert "the main thread went on" not in r.stdout  # ended at once, not only the worker thread
    assert "rolled back to checkpoint 'start'" in r.stderr
    recs = records(run_dir)
    assert recs[-1]["kind"] == "rollback" and recs[-1]["checkpoint"] == "start", recs[-1]
    assert [r2.get("kind") for r2 in recs].count("rollback") == 1
    assert sum(1 for x in recs if x.get("step") == "flaky" and x.get("error")) == 2
    # the journal was closed: the next attempt opens it (its lock is free) and resumes from the checkpoint
    with Run.open(run_dir) as again:
        assert again.step("setup", lambda: 2) == 1  # served
        assert again.state == {}  # the state at the checkpoint: the rolled-back change is gone


def test_give_up_decided_in_a_worker_thread_ends_the_process_with_78(tmp_path: Path) -> None:
    r, run_dir = run_thread_agent(tmp_path, "give-up")
    assert r.returncode == rundir.EXIT_FAILED, r.stdout + r.stderr
    assert "the main thread went on" not in r.stdout
    assert "gave up after 0 rollbacks" in r.stderr
    recs = records(run_dir)
    assert any(x.get("kind") == "note" and x.get("message") == "gave up" for x in recs)
    assert not any(x.get("kind") == "rollback" for x in recs)
    assert rundir.read_run_json(run_dir).get("status") == "failed"  # not supervised: the agent says so itself
