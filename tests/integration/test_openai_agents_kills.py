"""The OpenAI Agents SDK adapter under ``agent-supervisor supervise``, its agent killed with SIGKILL at random moments.

One real supervised run (``sample_runs/openai_agents_helpdesk.py --observe``) killed six times, each kill landing
while every pattern is at work (a seed printed, ``OPENAI_AGENTS_KILL_SEED`` reruns it); an agent import costs a
second a process, so the patterns share the processes:

- the help desk: a durable conversation on a ``SQLiteSession`` whose every turn is streamed by a model that gives no
  response id, runs a guardrail's guard agent beside the first model call and an ``as_tool`` agent whose tool is a
  nested step. In the end the model calls and tool executions (the ledger the fake model and tool append to) are the
  clean run's, a call made again only if it was in flight at a kill (steps are at-least-once), the answers and the
  session's history equal the clean run's, and ``log --json`` shows every call of every agent;
- beside it, the agent of ``sample_runs/openai_agents_observed.py``, not durable, seen by ``JournalTracingProcessor``:
  every model call that ended is a step with its tokens in the attempt that paid it, and ``status`` counts them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..conftest import ROOT, clean_env, wait_for
from .supervisor_util import PY, Supervised

HELPDESK = ROOT / "sample_runs" / "openai_agents_helpdesk.py"
OPTS = ("-q", "--backoff-initial", "0.01", "--backoff-max", "0.05", "--rollback-after", "0", "--give-up-after", "1000")


_STEP_OF = {"guard": "model:Guardrail check", "support": "model:support", "researcher": "model:researcher",
            "tool": "tool:lookup"}
"""The step of each kind of ledger line (a model call by its agent's instructions tag, the tool)."""


def _seed() -> random.Random:
    seed = int(os.environ.get("OPENAI_AGENTS_KILL_SEED", "0")) or random.randrange(1, 10**6)
    print(f"kill seed {seed} (rerun with OPENAI_AGENTS_KILL_SEED={seed})")
    return random.Random(seed)


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # function_tool reads the module's annotations
    spec.loader.exec_module(mod)
    return mod


def _kill_at_random(sup: Supervised, rng: random.Random, kills: int, max_delay: float, hold: Path) -> int:
    """SIGKILL the supervised agent ``kills`` times, each attempt after it wrote 2-5 records (or waits at the
    ``hold`` file: ``<hold>.<pid>``) and a random pause; fewer if the run ends first. Returns how many landed."""
    landed, last = 0, None
    while landed < kills:
        st: Any = wait_for(
            lambda: sup.proc.poll() is not None
            or (lambda s: s if s.get("pid") and s["pid"] != last else None)(sup.try_status()),
            timeout=30, what="a new attempt",
        )
        if sup.proc.poll() is not None:
            break
        need = st["records"] + rng.randint(2, 5)
        waits = hold.with_name(f"{hold.name}.{st['pid']}")
        wait_for(lambda: sup.proc.poll() is not None or waits.exists() or sup.try_status().get("records", 0) >= need,
                 timeout=30, what="the attempt's progress")
        time.sleep(rng.uniform(0.0, max_delay))  # the random moment of the kill (not a wait for a condition)
        try:
            os.kill(st["pid"], signal.SIGKILL)
            landed += 1
        except ProcessLookupError:
            pass  # it ended between the status and the kill
        last = st["pid"]
    return landed


def _ledger(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines()) if path.exists() else Counter()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``agent-supervisor ARGS`` in this process (the real parser and readers; no interpreter start)."""
    from supervisor.cli.main import main

    before = capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    print(before.out, end="")  # the seed stays in the test's output, shown if it fails
    assert code == 0, err
    return out


def _log_json(capsys: pytest.CaptureFixture[str], run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _cli(capsys, "log", str(run_dir), "--json").splitlines()]


@pytest.mark.timeout(90)
def test_helpdesk_and_an_observed_agent_killed_at_random_moments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    rng = _seed()
    desk = _load(HELPDESK)
    # the clean run, in this process: its ledger, answers and session history
    clean_ledger = tmp_path / "clean.ledger"
    monkeypatch.setenv("LEDGER_FILE", str(clean_ledger))
    answers, history, _, _ = desk.run_conversation(tmp_path / "clean", tmp_path / "clean.db")
    monkeypatch.delenv("LEDGER_FILE")
    clean = _ledger(clean_ledger)
    assert {json.loads(k)["agent"] for k in clean if '"model"' in k} == {"guard", "support", "researcher"}

    ledger, result, hold = tmp_path / "ledger", tmp_path / "result.json", tmp_path / "hold"
    env = clean_env() | {"LEDGER_FILE": str(ledger), "RESULT_FILE": str(result), "DESK_DELAY": "0.03",
                         "OBSERVED_DELAY": "0.03", "SESSION_DB": str(tmp_path / "session.db"), "HOLD_FILE": str(hold)}
    run_dir = tmp_path / "run"
    with Supervised(run_dir, [PY, str(HELPDESK), "--observe"], *OPTS, env=env) as sup:
        kills = _kill_at_random(sup, rng, 6, 0.04, hold)
        hold.touch()  # the last turn may start, the observed writer may answer
        assert sup.wait(60) == 0, sup.stderr()[-2000:]
    exits = sup.events("exit")
    print(f"{kills} kills, in flight: {[e.get('step') for e in exits if e.get('signal') == 'SIGKILL']}")
    assert kills == 6
    assert len([e for e in exits if e.get("signal") == "SIGKILL"]) == kills
    out = json.loads(result.read_text())
    # the answers and the session's history (no turn lost or doubled) are the clean run's
    assert (out["answers"], out["history"]) == (answers, history)
    assert out["observed"].startswith("Durable, because: notes on durable agents")

    lines = ledger.read_text().splitlines()
    got = Counter(line for line in lines if '"observed"' not in line)
    paid = [json.loads(line) for line in lines if '"observed"' in line]
    recs = _log_json(capsys, run_dir)
    _durable_calls(clean, got, recs)
    observed = _observed_calls(paid, recs)
    # status counts the tokens of every call journaled, the observed ones with the durable ones
    tokens = json.loads(_cli(capsys, "status", str(run_dir), "--json"))["tokens"]
    steps = [r for r in recs if r.get("kind") == "step" and r.get("usage")]
    assert tokens["input"] == sum(u["input_tokens"] for r in steps for u in r["usage"])
    assert tokens["output"] == sum(u["output_tokens"] for r in steps for u in r["usage"])
    assert sum(r["usage"][0]["input_tokens"] for r in observed) > 0


def _durable_calls(clean: Counter[str], got: Counter[str], recs: list[dict[str, Any]]) -> None:
    """The durable conversation: every call the clean run made was made, and made again only if it was in flight
    at a kill (a begin record without its step in that attempt: steps are at-least-once); ``log --json`` shows each
    agent's calls, the ``as_tool`` agent's as children of the tool step."""
    assert set(got) == set(clean), set(got) ^ set(clean)
    ended = {(r["attempt"], r["pos"]) for r in recs if r.get("kind") == "step"}
    cut = Counter(r["step"] for r in recs if r.get("kind") == "begin" and (r["attempt"], r["pos"]) not in ended)
    again = Counter[str]()
    for entry, n in (got - clean).items():
        again[_STEP_OF[json.loads(entry).get("agent", "tool")]] += n
    print(f"paid again: {dict(again)}; interrupted: {dict(cut)}")
    assert all(n <= cut[step] for step, n in again.items()), (again, cut)
    steps = [r for r in recs if r.get("kind") == "step" and "error" not in r]
    calls = Counter(r["call"]["agent"] for r in steps
                    if r.get("call", {}).get("kind") == "model" and not r["call"].get("observed"))
    made = Counter(json.loads(k)["agent"] for k in clean.elements() if '"model"' in k)
    assert calls == {"Guardrail check": made["guard"], "support": made["support"], "researcher": made["researcher"]}
    inner = [r for r in steps if r["step"] in ("model:researcher", "tool:lookup")]
    assert inner and all(r.get("parent") for r in inner)  # the as_tool agent's calls are the tool step's children
    assert sum(1 for r in steps if r["step"] == "tool:lookup") == sum(1 for k in clean if '"tool"' in k)


def _observed_calls(paid: list[dict[str, Any]], recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The observed agent (not durable, run anew by each attempt): each of its model calls that ended is a step
    of the attempt that paid it, with its agent and tokens; a killed attempt may lose the one in flight."""
    observed = [r for r in recs if r.get("kind") == "step" and r.get("call", {}).get("observed") is True]
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    for r in observed:
        by_attempt.setdefault(r["attempt"], []).append(r)
    last = max(int(p["attempt"]) for p in paid)
    for attempt in range(1, last + 1):
        made = [p for p in paid if int(p["attempt"]) == attempt]
        shown = by_attempt.get(attempt, [])
        assert [(r["call"]["agent"], r["usage"][0]["input_tokens"], r["usage"][0]["output_tokens"]) for r in shown] \
            == [(p["agent"], p["input_tokens"], p["output_tokens"]) for p in made[: len(shown)]]
        assert len(made) - len(shown) <= (0 if attempt == last else 1), (attempt, made, shown)
        suffix = "" if attempt == 1 else f" (attempt {attempt})"
        assert {r["step"] for r in shown} <= {f"model:planner{suffix}", f"model:writer{suffix}"}
    assert len(by_attempt.get(last, [])) == 3  # the attempt that finished: planner twice, writer once
    return observed
