"""The LangGraph adapter's patterns under ``kill -9``: an agent run by ``agent-supervisor supervise`` is killed at
random moments (at least six times a pattern) and resumed, and the model calls and tool executions it paid for (a
ledger the fake model and tools append to) are a clean run's, plus only the calls a kill cut short (their ``begin``
has no step record in that attempt); its result is the clean run's; ``agent-supervisor log --json`` shows each call
once. The patterns, one sample each:

- ``langgraph_approval.py``: ``interrupt()`` then ``Command(resume=...)`` (the node runs again from its start), some
  kills while the agent waits for the human's answer;
- ``langgraph_react.py``: LangGraph's ``create_react_agent`` made durable by the one line ``saver.journaled(...)``;
- ``langgraph_fanout.py``: six ``Send`` branches at once, whose rows name the node and the branch.

A seed is printed (``LANGGRAPH_KILL_SEED=<n>`` reruns it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from ..conftest import ROOT, clean_env, wait_for
from .supervisor_util import PY, Supervised

sys.path.insert(0, str(ROOT / "sample_runs"))
import langgraph_approval
import langgraph_fakes
import langgraph_fanout
import langgraph_react

KILLS = 6
OPTS = ("-q", "--backoff-initial", "0.01", "--backoff-max", "0.05", "--rollback-after", "0", "--give-up-after", "1000")


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("LANGGRAPH_KILL_SEED", "0")) or random.randrange(1, 10**6)
    print(f"{name}: seed {seed} (rerun with LANGGRAPH_KILL_SEED={seed})")
    return random.Random(seed)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class JournalTail:
    """The run's journal as it grows: how many records, and the pid of the attempt that wrote the last ``start``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "journal.jsonl"
        self.offset = 0
        self.count = 0
        self.pid: int | None = None
        self._rest = b""

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        whole, _, self._rest = (self._rest + data).rpartition(b"\n")
        for line in whole.split(b"\n") if whole else ():
            self.count += 1
            if b'"kind":"start"' in line:
                self.pid = orjson.loads(line)["pid"]


class Human:
    """Answers the agent's questions (``ANSWERS_DIR``) as they come, unless told to hold them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()

    def unanswered(self) -> list[dict[str, Any]]:
        out = []
        for asked in self.folder.glob("*.asked"):
            if not asked.with_suffix(".answer").exists():
                out.append(json.loads(asked.read_text()) | {"path": asked})
        return out

    def answer(self) -> None:
        for q in self.unanswered():
            tmp = q["path"].with_suffix(".answer.tmp")
            tmp.write_text(langgraph_fakes.answer_to(q["question"]))
            tmp.replace(q["path"].with_suffix(".answer"))  # the agent reads a whole answer or none


def clean_run(module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[dict[str, Any]], Path]:
    """The sample run once in this process, nothing killed: its result, its ledger, its run directory."""
    run_dir, ledger = tmp_path / "clean", tmp_path / "clean.ledger"
    with monkeypatch.context() as m:
        m.setenv("LEDGER_FILE", str(ledger))
        for k in ("ANSWERS_DIR", "FAKE_CALL_DELAY", "RESULT_FILE"):
            m.delenv(k, raising=False)
        result = module.main(str(run_dir))
    return result, lines(ledger), run_dir


def supervised_with_kills(
    script: Path, tmp_path: Path, rng: random.Random, clean_records: int, human: bool = False
) -> tuple[Path, Any, list[dict[str, Any]], set[int], int]:
    """The sample under ``supervise``, SIGKILLed ``KILLS`` times: at random journal sizes (spread over the clean run's
    ``clean_records``) plus a random moment after, or (with ``human``, some of them) while it waits for an answer.
    Returns the run directory, the result, the ledger, the attempts killed and how many of them while waiting."""
    run_dir, ledger, result = tmp_path / "run", tmp_path / "run.ledger", tmp_path / "result.json"
    env = clean_env() | {"LEDGER_FILE": str(ledger), "RESULT_FILE": str(result), "FAKE_CALL_DELAY": "0.01"}
    answers = Human(tmp_path / "answers") if human else None
    if answers is not None:
        env["ANSWERS_DIR"] = str(answers.folder)
    targets = sorted(rng.sample(range(3, int(clean_records * 0.8), 3), KILLS))  # 3 apart: each attempt does new work
    in_wait = set(rng.sample(range(KILLS), 2)) if human else set()
    tail = JournalTail(run_dir)
    kills = waiting = 0
    with Supervised(run_dir, [PY, str(script)], *OPTS, env=env, out_dir=tmp_path) as sup:
        last: int | None = None
        for i, target in enumerate(targets):

            def ready(i: int = i, target: int = target, last: int | None = last) -> object:
                tail.poll()
                if sup.proc.poll() is not None:
                    return "finished"
                reached = tail.pid not in (None, last) and tail.count >= target
                if answers is not None:
                    if i in in_wait and reached:
                        return next((q for q in answers.unanswered() if q["pid"] == tail.pid), None)
                    answers.answer()
                return reached

            got = wait_for(ready, timeout=40, interval=0.01, what=f"kill {i + 1} at record {target}")
            assert got != "finished", f"the run finished after {kills} kills: {sup.stderr()[-800:]}"
            if i not in in_wait:
                time.sleep(rng.uniform(0.0, 0.04))  # the random moment of the kill (not a wait for a condition)
            assert tail.pid is not None
            try:
                os.kill(tail.pid, signal.SIGKILL)
            except ProcessLookupError:
                pytest.fail(f"attempt {tail.pid} ended before its kill: {sup.stderr()[-800:]}")
            kills += 1
            waiting += i in in_wait
            last = tail.pid
        wait_for(lambda: (answers is None or answers.answer() or True) and sup.proc.poll() is not None,
                 timeout=60, interval=0.01, what="the run to finish")
        assert sup.wait() == 0, sup.stderr()[-2000:]
    killed = {e["attempt"] for e in sup.events("exit") if e.get("signal") == "SIGKILL"}
    assert len(killed) == kills >= KILLS
    return run_dir, json.loads(result.read_text()), lines(ledger), killed, waiting


def logged(run_dir: Path) -> list[dict[str, Any]]:
    """The records ``agent-supervisor log RUN --json`` prints."""
    p = subprocess.run([PY, "-m", "supervisor", "log", str(run_dir), "--json"], capture_output=True, text=True,
                       timeout=30, env=clean_env(), cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()]


def calls_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The committed model and tool call steps."""
    return [r for r in records if r.get("kind", "step") == "step" and "error" not in r
            and isinstance(r.get("call"), dict) and r["call"].get("kind") in ("model", "tool")]


def check_against_clean(
    run_dir: Path, ledger: list[dict[str, Any]], clean_ledger: list[dict[str, Any]], clean_dir: Path, killed: set[int]
) -> list[dict[str, Any]]:
    """Each call of the clean run was paid once and committed once; any other payment was a call a kill cut short
    (its begin has no step record in that attempt). Returns the committed calls as ``log --json`` shows them."""
    records = logged(run_dir)
    calls = calls_of(records)
    clean_calls = calls_of([orjson.loads(x) for x in (clean_dir / "journal.jsonl").read_bytes().splitlines()])
    assert Counter(c["step"] for c in calls) == Counter(c["step"] for c in clean_calls)  # the same calls, each once
    assert all(n == 1 for n in Counter(c["step"] for c in calls).values())
    by_key = {(c["attempt"], c["key"]): c for c in calls}
    committed = [x for x in ledger if (x["attempt"], x["key"]) in by_key]
    cut_short = [x for x in ledger if (x["attempt"], x["key"]) not in by_key]
    assert Counter((x["what"], x["id"]) for x in committed) == Counter((x["what"], x["id"]) for x in clean_ledger)
    assert len(committed) == len(calls) == len(clean_ledger)  # each committed step paid once
    # paid, not committed: a kill came in the middle of that call (several at once when branches run together),
    # in an attempt that was killed, at a step position that attempt began and never finished
    begins = {(r["attempt"], r["pos"]) for r in records if r.get("kind") == "begin"}
    for x in cut_short:
        assert (x["attempt"], int(str(x["key"]).rsplit(":", 1)[1])) in begins, f"a call paid outside a step: {x}"
        assert x["attempt"] in killed, f"a call paid again in an attempt that was not killed: {x}"
    assert len({(x["attempt"], x["key"]) for x in ledger}) == len(ledger)  # a step's call runs once an attempt
    print(f"{len(killed)} kills, {len(calls)} calls, {len(cut_short)} paid again after a kill cut them short")
    return calls


# ------------------------------------------------------------------------------------------------ the patterns


@pytest.mark.timeout(60)
def test_interrupt_resume_under_kills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``interrupt()`` and ``Command(resume=...)``: the clean run (its resumes in the same process) pays each call
    once, and so does a run killed at random moments, some while it waits for the human."""
    rng = seeded("interrupt/resume")
    clean, clean_ledger, clean_dir = clean_run(langgraph_approval, tmp_path, monkeypatch)
    rounds = langgraph_approval.ROUNDS
    assert len(clean_ledger) == 4 * rounds  # three model calls and a tool a round, though each node ran three times
    assert len({(x["what"], x["id"]) for x in clean_ledger}) == len(clean_ledger)
    records = (clean_dir / "journal.jsonl").read_text().count("\n")
    run_dir, result, ledger, killed, waiting = supervised_with_kills(
        ROOT / "sample_runs" / "langgraph_approval.py", tmp_path, rng, records, human=True)
    assert result == clean
    check_against_clean(run_dir, ledger, clean_ledger, clean_dir, killed)
    assert waiting == 2


@pytest.mark.timeout(60)
def test_one_line_default_under_kills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``create_react_agent(*saver.journaled(model, tools), checkpointer=saver)``: killed at random moments, the
    agent pays for the clean run's calls only."""
    rng = seeded("one-line default")
    clean, clean_ledger, clean_dir = clean_run(langgraph_react, tmp_path, monkeypatch)
    turns = langgraph_react.TURNS
    assert len(clean_ledger) == turns + 1 + 2 * turns
    records = (clean_dir / "journal.jsonl").read_text().count("\n")
    run_dir, result, ledger, killed, _ = supervised_with_kills(
        ROOT / "sample_runs" / "langgraph_react.py", tmp_path, rng, records)
    assert result == clean
    calls = check_against_clean(run_dir, ledger, clean_ledger, clean_dir, killed)
    tools = [c for c in calls if c["call"]["kind"] == "tool"]
    assert sorted(c["call"]["branch"] for c in tools) == sorted([0, 1] * turns)  # prebuilt agent: a Send a tool call


@pytest.mark.timeout(60)
def test_fan_out_rows_under_kills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six ``Send`` branches asking the model the same thing: each row names its node and branch; killed at random
    moments (branches run at once, in threads), each branch's calls are paid once."""
    rng = seeded("fan-out")
    clean, clean_ledger, clean_dir = clean_run(langgraph_fanout, tmp_path, monkeypatch)
    n, rounds = langgraph_fanout.BRANCHES, langgraph_fanout.ROUNDS
    assert len(clean_ledger) == rounds * (2 * n + 1)
    records = (clean_dir / "journal.jsonl").read_text().count("\n")
    run_dir, result, ledger, killed, _ = supervised_with_kills(
        ROOT / "sample_runs" / "langgraph_fanout.py", tmp_path, rng, records)
    assert result == clean
    calls = check_against_clean(run_dir, ledger, clean_ledger, clean_dir, killed)
    models = [c for c in calls if c["call"]["kind"] == "model" and c["call"]["node"] == "research"]
    # the same request in each branch: the rows differ by the branch, in the step name and in the call
    assert len({c["inputs"]["args"][0]["digest"] for c in models}) == 1
    for step in {c["call"]["superstep"] for c in models}:
        here = [c for c in models if c["call"]["superstep"] == step]
        assert sorted(c["call"]["branch"] for c in here) == list(range(n))
        assert all(f"@research[{c['call']['branch']}]:{step}:" in c["step"] for c in here)
