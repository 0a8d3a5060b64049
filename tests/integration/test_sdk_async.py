"""Concurrent steps in real processes: 16 steps at once (asyncio.gather, threads), killed with os._exit after
some committed, then resumed; typed outputs across a resume; changed inputs; usage; replay --verify/--live."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core.journal_reader import JournalReader

from ..conftest import ROOT, clean_env, run_cli

AGENT = ROOT / "tests" / "integration" / "async_agent.py"
PY = sys.executable


def agent(run_dir: Path | None, ledger: Path, *opts: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    argv = [PY, str(AGENT), *([str(run_dir)] if run_dir else []), "--ledger", str(ledger), *opts]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean_env(), cwd=ROOT, check=False)


def calls(ledger: Path) -> list[int]:
    return [int(x) for x in ledger.read_text().split()] if ledger.exists() else []


def steps(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in JournalReader(run_dir).load() if r.get("kind") == "step" and r.get("error") is None]


def result(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.returncode == 0, r.stdout + r.stderr
    return orjson.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["async", "threads"])
def test_sixteen_steps_killed_mid_flight_then_resumed(tmp_path: Path, mode: str) -> None:
    clean = result(agent(tmp_path / "clean", tmp_path / "clean.ledger", "--mode", mode))
    assert sorted(calls(tmp_path / "clean.ledger")) == list(range(16))

    run_dir, ledger = tmp_path / "run", tmp_path / "run.ledger"
    r = agent(run_dir, ledger, "--mode", mode, "--exit-after", "4")
    assert r.returncode == 3, r.stdout + r.stderr  # os._exit from the watcher, mid-gather
    first = calls(ledger)
    assert sorted(first) == list(range(16))  # every step was called
    done = steps(run_dir)
    committed = {int(s["step"].split(":")[1]) for s in done}
    assert 4 <= len(committed) < 16 and not committed & set(range(8)), committed  # 0..7 hang: never committed
    positions = [s["pos"] for s in done]
    assert positions != sorted(positions), positions  # committed in another order than called

    resumed = result(agent(run_dir, ledger, "--mode", mode))
    second = calls(ledger)[len(first) :]
    assert sorted(second) == sorted(set(range(16)) - committed)  # no committed step function called again, each other once
    assert resumed["outputs"] == clean["outputs"] and resumed["state"] == clean["state"] and resumed["final"] == 16
    assert resumed["replayed"] == len(committed)

    again = result(agent(run_dir, ledger, "--mode", mode))  # everything is in the journal now
    assert calls(ledger)[len(first) + len(second) :] == [] and again["outputs"] == clean["outputs"]
    assert again["replayed"] == 17 and again["state"] == clean["state"]
    # the pairs are by position: each position has one begin before its step in every attempt
    recs = JournalReader(run_dir).load()
    for s in steps(run_dir):
        begins = [b for b in recs if b.get("kind") == "begin" and b.get("pos") == s["pos"] and b["seq"] < s["seq"]]
        assert begins and begins[-1]["step"] == s["step"]


def test_typed_outputs_come_back_as_their_types_after_a_crash(tmp_path: Path) -> None:
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger"
    assert agent(run_dir, ledger, "--typed", "--exit-after", "4").returncode == 3
    types = {s["output_type"].split(":")[0] for s in steps(run_dir)}
    assert types <= {"pydantic", "dataclass"} and types, types
    resumed = result(agent(run_dir, ledger, "--typed"))
    # served (committed before the kill) and live ones alike: even steps a pydantic model (by the annotation),
    # odd ones a dataclass (no annotation: by the journal's output_type)
    assert [o["type"] for o in resumed["outputs"]] == ["Hit", "Pair"] * 8
    served = result(agent(run_dir, ledger, "--typed"))
    assert served["replayed"] == 17 and served["outputs"] == resumed["outputs"]
    hit = next(s for s in steps(run_dir) if s["step"] == "work:2")
    assert hit["output"] == {"i": 2, "square": 4, "at": "2026-01-01T00:00:02Z"}  # plain JSON any reader shows


def test_usage_is_recorded_per_step(tmp_path: Path) -> None:
    result(agent(tmp_path / "run", tmp_path / "ledger"))
    for s in steps(tmp_path / "run"):
        if s["step"].startswith("work:"):
            i = int(s["step"].split(":")[1])
            assert s["usage"] == [{"model": "test-model", "provider": "test", "input_tokens": 10 + i, "output_tokens": i}]
    assert "usage" not in steps(tmp_path / "run")[-1]  # 'final' recorded none


@pytest.mark.parametrize("how", ["warn", "error", "rerun"])
def test_changed_inputs_on_resume(tmp_path: Path, how: str) -> None:
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger"
    result(agent(run_dir, ledger))
    n = len(calls(ledger))
    r = agent(run_dir, ledger, "--salt", "other", "--on-changed-inputs", how)
    notes = [x for x in JournalReader(run_dir).load() if x.get("kind") == "note" and x.get("message") == "changed inputs"]
    line = "the inputs of step 'work:0' at position 0 changed since it was recorded"
    if how == "error":
        assert r.returncode == 78 and line in r.stderr and notes == []
        assert calls(ledger)[n:] == []
        return
    assert r.returncode == 0 and r.stderr.count("inputs of step") == 1 and line in r.stderr, r.stderr
    assert len(notes) == 1 and notes[0]["step"] == "work:0" and notes[0]["action"] == ("served" if how == "warn" else "rerun")
    first = next(x for x in steps(run_dir) if x["step"] == "work:0")
    assert notes[0]["pos"] == 0 and notes[0]["served_seq"] == first["seq"] and notes[0]["recorded_hash"] == first["inputs_hash"]
    assert calls(ledger)[n:] == ([] if how == "warn" else [0])


@pytest.mark.parametrize("mode", ["async", "threads"])
def test_replay_verify_and_live_of_a_concurrent_agent(tmp_path: Path, mode: str) -> None:
    run_dir, ledger = tmp_path / "run", tmp_path / "ledger"
    assert agent(run_dir, ledger, "--exit-after", "4", "--mode", mode).returncode == 3
    result(agent(run_dir, ledger, "--mode", mode))
    n = len(calls(ledger))
    cmd = [PY, str(AGENT), "--ledger", str(ledger), "--mode", mode]
    r = run_cli("replay", str(run_dir), "--verify", "--", *cmd)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "17 of 17 steps replayed" in r.stdout and calls(ledger)[n:] == []
    r = run_cli("replay", str(run_dir), "--live", "work:1?", "--", *cmd)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(calls(ledger)[n:]) == list(range(10, 16))  # only the live ones ran
