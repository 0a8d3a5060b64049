"""Torture: the sample agent SIGKILLed at random moments 50+ times under the supervisor, and the
supervisor itself SIGKILLed with the agent behind ``sh -c``.

In the end every step's side effect (counted in the agent's ledger) happened once
per committed journal record, plus at most one for the step in flight at each
kill, the final output equals an uncrashed run's, and no process of the tree outlives its supervisor.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import orjson
import psutil
import pytest

from supervisor.core.events import read_events
from supervisor.core.history import load, state_at

from ..conftest import SAMPLE_AGENT, run_agent, wait_for
from .supervisor_util import PY, Supervised, research

KILLS = 52
STEPS = 400
"""About 4 steps commit between two kills: 400 leave room for 52 kills on a fast machine."""


def final_state(run_dir: Path) -> object:
    h = load(run_dir)
    return state_at(run_dir, h, h.effective[-1]["seq"])


@pytest.mark.timeout(150)
def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    seed = int(os.environ.get("TORTURE_SEED", "0")) or random.randrange(1, 10**6)
    rng = random.Random(seed)
    print(f"torture seed {seed} (rerun with TORTURE_SEED={seed})")

    ref = tmp_path / "ref"
    r = run_agent(ref, "--steps", str(STEPS), timeout=60)
    assert r.returncode == 0, r.stderr

    run_dir = tmp_path / "run"
    opts = ("-q", "--backoff-initial", "0.01", "--backoff-max", "0.05", "--rollback-after", "0", "--give-up-after", "1000")
    with Supervised(run_dir, research("--steps", str(STEPS), "--step-delay", "0.02"), *opts) as sup:
        kills, last = 0, None
        while kills < KILLS:
            st = wait_for(
                lambda: sup.proc.poll() is not None
                or (lambda s: s if s.get("pid") and s["pid"] != last else None)(sup.try_status()),
                timeout=30, what="a new attempt",
            )
            assert sup.proc.poll() is None, f"the run finished after {kills} kills: raise STEPS"
            if rng.random() < 0.75:
                # most kills land in the step loop: wait until this attempt committed a record first
                base = st["records"]
                wait_for(lambda: sup.try_status().get("records", 0) > base or sup.proc.poll() is not None,
                         timeout=30, what="the attempt's first record")
                time.sleep(rng.uniform(0.0, 0.1))  # the random moment of the kill (not a wait for a condition)
            else:
                time.sleep(rng.uniform(0.0, 0.4))  # during start-up or replay
            try:
                os.kill(st["pid"], signal.SIGKILL)
                kills += 1
            except ProcessLookupError:
                pass  # exited between status and kill
            last = st["pid"]
        assert sup.wait(90) == 0, sup.stderr()[-2000:]

    exits = sup.events("exit")
    killed = [e for e in exits if e["signal"] == "SIGKILL"]
    assert len(killed) >= 50
    h = load(run_dir)
    committed = Counter(r["step"] for r in h.entries if r.get("kind") == "step" and r.get("error") is None)
    assert all(n == 1 for n in committed.values()), "a finished step ran twice: replay failed"
    ledger = Counter()
    for raw in (run_dir / "ledger.jsonl").read_bytes().splitlines():
        ledger[orjson.loads(raw)["step"]] += 1
    in_flight_at_kill = Counter(e["step"] for e in killed if e["step"])
    for step, n in ledger.items():
        assert committed[step] == 1, f"side effect of {step} without a committed record"
        extra = n - committed[step]
        assert 0 <= extra <= in_flight_at_kill[step], f"{step}: {n} side effects, {in_flight_at_kill[step]} kills in it"
    steps_with_effects = {s for s in committed if s != "write_report"}  # write_report has no ledger entry
    assert set(ledger) == steps_with_effects
    extras = sum(ledger.values()) - len(ledger)
    print(f"{len(killed)} kills, {sum(in_flight_at_kill.values())} inside a step, {extras} repeated side effects")
    assert extras <= len(killed)
    # the final output equals an uncrashed run's
    assert (run_dir / "report.md").read_bytes() == (ref / "report.md").read_bytes()
    assert final_state(run_dir) == final_state(ref)
    assert [r["step"] for r in h.steps] == [r["step"] for r in load(ref).steps]


def tree_of(run_dir: Path) -> list[int]:
    """Every live process whose environment names this run directory: the agent's tree, wherever it went."""
    target = str(run_dir.resolve())
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("AGENT_SUPERVISOR_RUN_DIR") == target and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


SUP_ROUNDS = 10
SUP_STEPS = 120


@pytest.mark.timeout(60)
def test_kill_9_of_the_supervisor_and_of_an_agent_behind_sh(tmp_path: Path) -> None:
    """The supervisor itself is SIGKILLed too (and supervised again), with the agent behind ``sh -c``.

    A kill -9 of the supervisor reaches ``sh`` through PDEATHSIG and the python
    agent under it through the guardian: no process of the tree may survive it,
    no committed step may run again, and the end result equals an uncrashed run's.
    """
    seed = int(os.environ.get("TORTURE_SEED", "0")) or random.randrange(1, 10**6)
    rng = random.Random(seed)
    print(f"torture seed {seed} (rerun with TORTURE_SEED={seed})")
    t0 = time.monotonic()

    ref = tmp_path / "ref"
    r = run_agent(ref, "--steps", str(SUP_STEPS), timeout=60)
    assert r.returncode == 0, r.stderr

    run_dir = tmp_path / "run"
    cmd = ["sh", "-c", f'"{PY}" "{SAMPLE_AGENT}" --steps {SUP_STEPS} --step-delay 0.01 "$@"; exit $?', "sh"]
    opts = ("-q", "--backoff-initial", "0.01", "--backoff-max", "0.05", "--rollback-after", "0", "--give-up-after", "1000")
    sup_kills = agent_kills = 0
    sups: list[Supervised] = []
    try:
        for _ in range(SUP_ROUNDS):
            sup = Supervised(run_dir, cmd, *opts, out_dir=tmp_path)
            sups.append(sup)
            st = wait_for(lambda: sup.proc.poll() is not None
                          or (lambda s: s if s.get("pid") and s.get("state") == "running" else None)(sup.try_status()),
                          timeout=30, what="an attempt running")
            assert sup.proc.poll() is None, f"the run finished after {sup_kills} supervisor kills: raise SUP_STEPS"
            base = st["records"]  # type: ignore[index]
            wait_for(lambda: sup.try_status().get("records", 0) > base + 1 or sup.proc.poll() is not None,
                     timeout=30, what="the attempt's first records")
            time.sleep(rng.uniform(0.0, 0.08))  # the random moment of the kill (not a wait for a condition)
            if rng.random() < 0.3:
                # now and then the agent (sh, or the python under it) first: the supervisor restarts it
                pid = st["pid"]  # type: ignore[index]
                with contextlib.suppress(psutil.Error, IndexError):
                    if rng.random() < 0.5:
                        pid = psutil.Process(pid).children()[0].pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    agent_kills += 1
                wait_for(lambda: (lambda s: s.get("pid") not in (None, st["pid"]))(sup.try_status())  # type: ignore[index]
                         or sup.proc.poll() is not None, timeout=30, what="the next attempt")
            sup.kill()
            sup_kills += 1
            # nothing of the tree survives a kill -9 of its supervisor (the guardian's sweep)
            wait_for(lambda: not tree_of(run_dir), timeout=10,
                     what=f"the agent's tree to die with its supervisor: {tree_of(run_dir)}")
        last = Supervised(run_dir, cmd, *opts, out_dir=tmp_path)
        sups.append(last)
        assert last.wait(60) == 0, last.stderr()[-2000:]
    finally:
        for s in sups:
            s.kill()
    assert not tree_of(run_dir)

    h = load(run_dir)
    committed = Counter(r["step"] for r in h.entries if r.get("kind") == "step" and r.get("error") is None)
    assert all(n == 1 for n in committed.values()), "a finished step ran twice: replay failed"
    ledger: Counter[str] = Counter()
    for raw in (run_dir / "ledger.jsonl").read_bytes().splitlines():
        ledger[orjson.loads(raw)["step"]] += 1
    for step, _n in ledger.items():
        assert committed[step] == 1, f"side effect of {step} without a committed record"
    # a step in flight at a kill may have had its side effect without its record: at most one per kill
    extras = sum(ledger.values()) - len(ledger)
    assert extras <= sup_kills + agent_kills
    assert (run_dir / "report.md").read_bytes() == (ref / "report.md").read_bytes()
    assert final_state(run_dir) == final_state(ref)
    assert [r["step"] for r in h.steps] == [r["step"] for r in load(ref).steps]
    spawns = [e["attempt"] for e in read_events(run_dir) if e.get("event") == "spawn"]
    assert spawns == list(range(1, len(spawns) + 1))  # attempt numbers never reused across supervisors
    print(f"{sup_kills} supervisor kills, {agent_kills} agent kills, {extras} repeated side effects, "
          f"{time.monotonic() - t0:.1f} s")
