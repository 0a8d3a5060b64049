"""``agent-supervisor compare RUN_A RUN_B``: real runs of the nested agent, and hand-written journals."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from ..conftest import ROOT, clean_env
from .supervisor_util import PY

AGENT = ROOT / "tests" / "integration" / "nested_agent.py"


def _agent(run: Path, *args: str) -> None:
    r = subprocess.run([PY, str(AGENT), str(run), "--ledger", str(run.parent / "ledger.jsonl"), *args],
                       capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert r.returncode in (0, 3), r.stderr[-2000:]


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "supervisor", "compare", *map(str, args)], capture_output=True, text=True,
                          timeout=60, env=clean_env(), cwd=ROOT)


def _journal(run: Path, lines: list[dict[str, Any]]) -> Path:
    run.mkdir()
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return run


@pytest.mark.timeout(60)
def test_two_runs_of_the_same_agent_are_the_same(tmp_path: Path) -> None:
    _agent(tmp_path / "a")
    _agent(tmp_path / "b")
    r = _compare(tmp_path / "a", tmp_path / "b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "same: 16 steps match" in r.stdout
    doc = orjson.loads(_compare(tmp_path / "a", tmp_path / "b", "--json").stdout)
    assert doc["same"] is True and doc["first_divergence"] is None
    assert [s["step"] for s in doc["steps"]][:4] == ["plan", "task", "task > tool", "task > tool"]
    assert {s["verdict"] for s in doc["steps"]} == {"same"}
    assert doc["totals"]["a"]["steps"] == doc["totals"]["b"]["steps"] == 16
    assert doc["totals"]["a"]["attempts"] == 1


@pytest.mark.timeout(60)
def test_a_changed_agent_names_its_first_divergence(tmp_path: Path) -> None:
    """B renames each task's second tool call: B has a step A has not, at the same place; the tool calls after
    it are other occurrences, so their inputs differ; a crash and resume in A changes nothing."""
    _agent(tmp_path / "a", "--exit-after", "13")  # A crashed inside round 1's task, then resumed
    _agent(tmp_path / "a")
    _agent(tmp_path / "b", "--rename")
    r = _compare(tmp_path / "a", tmp_path / "b", "--json")
    assert r.returncode == 1, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["same"] is False
    first = doc["first_divergence"]
    assert first == {"step": "task > tool2", "verdict": "only in B", "pos_a": None, "pos_b": 3, "differs": []}
    assert doc["counts"] == {"same": 12, "inputs differ": 2, "output differs": 0, "failed in A": 0, "failed in B": 0,
                             "only in A": 2, "only in B": 2}
    changed = [s for s in doc["steps"] if s["verdict"] == "inputs differ"]
    assert [(s["pos_a"], s["pos_b"], s["differs"]) for s in changed] == [(3, 4, ["inputs", "output"]), (11, 12, ["inputs", "output"])]
    assert doc["totals"]["a"]["attempts"] == 2 and doc["totals"]["b"]["attempts"] == 1
    text = _compare(tmp_path / "a", tmp_path / "b")
    assert text.returncode == 1
    assert "first divergence: step 'task > tool2' (position - in A, 3 in B): only in B" in text.stdout
    assert "  same                    5..10  (6 steps)" in text.stdout


@pytest.mark.timeout(30)
def test_outputs_failures_and_steps_only_one_run_has(tmp_path: Path) -> None:
    """Hand-written journals (no begin records, no k): calls are matched by name and occurrence."""
    a = _journal(tmp_path / "a", [
        {"step": "search", "inputs": {"q": "x"}, "output": [1, 2]},
        {"step": "llm", "inputs": {"p": 1}, "output": "yes"},
        {"step": "llm", "inputs": {"p": 2}, "output": "ok"},
        {"step": "write", "output": None},
    ])
    b = _journal(tmp_path / "b", [
        {"step": "search", "inputs": {"q": "x"}, "output": [1, 2]},
        {"step": "llm", "inputs": {"p": 1}, "output": "no"},
        {"step": "llm", "inputs": {"p": 2}, "error": {"type": "RateLimit", "message": "429"}},
        {"step": "extra", "output": 1},
    ])
    doc = orjson.loads(_compare(a, b, "--json").stdout)
    verdicts = [(s["step"], s["verdict"]) for s in doc["steps"]]
    assert verdicts == [("search", "same"), ("llm", "output differs"), ("llm", "failed in B"), ("write", "only in A"),
                        ("extra", "only in B")]
    assert doc["first_divergence"]["step"] == "llm" and doc["first_divergence"]["differs"] == ["output"]
    assert doc["totals"]["b"]["failures"] == 1 and doc["totals"]["a"]["failures"] == 0
    text = _compare(a, b).stdout
    assert '~ /: "yes" -> "no"' in text


@pytest.mark.timeout(30)
def test_bad_input_exits_2_with_a_message(tmp_path: Path) -> None:
    _agent(tmp_path / "a")
    r = _compare(tmp_path / "a", tmp_path / "nope")
    assert r.returncode == 2
    assert "no such run directory" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "empty").mkdir()
    r = _compare(tmp_path / "empty", tmp_path / "a")
    assert r.returncode == 2 and "is not a run directory" in r.stderr and "Traceback" not in r.stderr


FORKED_AGENT = '''
import os, sys
import orjson
from supervisor import Run
run = Run.open()
ledger = open(sys.argv[1], "ab")
def effect(name, value):
    ledger.write(orjson.dumps({"call": name, "run": os.path.basename(str(run.run_dir))}) + b"\\n"); ledger.flush()
    return value
model = os.environ.get("MODEL", "big")
plan = run.step("plan", lambda q: effect("plan", f"plan for {q}"), "q1")
answer = run.step("llm:answer", lambda p: effect("llm:answer", f"{model} says {p}"), plan)
run.step("tool:save", lambda a: effect("tool:save", len(a)), answer)
run.close()
'''


@pytest.mark.timeout(120)
def test_rerun_from_here_with_a_change_then_compare(tmp_path: Path) -> None:
    """fork --at SEQ --env starts the fork under supervise with the change; compare names the first divergence."""
    agent, ledger = tmp_path / "agent.py", tmp_path / "ledger.jsonl"
    agent.write_text(FORKED_AGENT)
    run = tmp_path / "run"
    sup = subprocess.run([PY, "-m", "supervisor", "supervise", "-q", "--run-dir", str(run), "--", PY, str(agent),
                          str(ledger)], capture_output=True, text=True, timeout=60, env=clean_env(), cwd=tmp_path)
    assert sup.returncode == 0, sup.stderr
    plan_seq = next(r["seq"] for r in (orjson.loads(x) for x in (run / "journal.jsonl").read_bytes().splitlines())
                    if r.get("kind") == "step" and r["step"] == "plan")
    r = subprocess.run([PY, "-m", "supervisor", "fork", str(run), "--at", str(plan_seq), "--to", str(tmp_path / "small"),
                        "--env", "MODEL=small"], capture_output=True, text=True, timeout=90, env=clean_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"agent-supervisor compare {run} {tmp_path / 'small'}" in r.stdout
    calls = [orjson.loads(x) for x in ledger.read_bytes().splitlines()]
    assert [(c["call"], c["run"]) for c in calls] == [("plan", "run"), ("llm:answer", "run"), ("tool:save", "run"),
                                                     ("llm:answer", "small"), ("tool:save", "small")]  # plan served
    doc = orjson.loads(_compare(run, tmp_path / "small", "--json").stdout)
    assert doc["first_divergence"]["step"] == "llm:answer" and doc["first_divergence"]["verdict"] == "output differs"
    assert [s["verdict"] for s in doc["steps"]] == ["same", "output differs", "inputs differ"]
    # --live: run the copied model call again (the tool call before the fork point too would be served)
    r = subprocess.run([PY, "-m", "supervisor", "fork", str(run), "--at", "end", "--to", str(tmp_path / "again"),
                        "--env", "MODEL=tiny", "--live", "llm:*"], capture_output=True, text=True, timeout=90,
                       env=clean_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    again = [(c["call"], c["run"]) for c in (orjson.loads(x) for x in ledger.read_bytes().splitlines())][5:]
    assert again == [("llm:answer", "again")]  # the model call ran again; plan and tool:save were served
    doc = orjson.loads(_compare(run, tmp_path / "again", "--json").stdout)
    assert [s["verdict"] for s in doc["steps"]] == ["same", "output differs", "same"]
    bad = subprocess.run([PY, "-m", "supervisor", "fork", str(run), "--at", "end", "--env", "1X"], capture_output=True,
                         text=True, timeout=30, env=clean_env(), cwd=tmp_path)
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr and not (tmp_path / "run-fork-end").exists()
