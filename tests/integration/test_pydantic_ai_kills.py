"""Pydantic AI agents killed with SIGKILL at random moments and resumed by ``supervise`` (real processes).

Three patterns, one supervised run each, killed at least six times: a tool that delegates to a sub-agent with
both agents wrapped (``sample_runs/pydantic_ai_delegate.py --wrap both``), the same with only the outer agent
wrapped (``--wrap outer``: the sub-agent's calls are journaled inside the tool's step all the same), and a
streaming agent consumed with ``run_stream_events`` (``sample_runs/pydantic_ai_stream.py``). The fake models and
tools append each call they make to a ledger, with the attempt that paid it. Each run ends as a clean run of the
same agent does (output, usage, what was streamed); every call a clean run makes is committed once; a call
committed in one attempt is never paid in a later one (a call cut off by a kill is paid again, as it must be); and
``agent-supervisor log RUN --json`` shows every call, the sub-agent's nested in the tool's step.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from supervisor import Run
from supervisor.core.history import load

from ..conftest import ROOT, clean_env, wait_for
from .supervisor_util import PY, Supervised

DELEGATE = ROOT / "sample_runs" / "pydantic_ai_delegate.py"
STREAM = ROOT / "sample_runs" / "pydantic_ai_stream.py"
KILLS = 6


def sample(path: Path) -> ModuleType:
    """A sample agent's module, imported once under its own name."""
    mod = sys.modules.get(path.stem)
    if mod is None:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = mod
        spec.loader.exec_module(mod)
    return mod


def ledger(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def call_of(rec: dict[str, Any]) -> str | None:
    """The call a step record committed, named as the samples name it in their ledger (``None``: no call)."""
    step = rec.get("step", "")
    if step.startswith("tool:"):
        kwargs = (rec.get("inputs") or {}).get("kwargs") or {}
        return ":".join([step[5:], *(str(kwargs[k]) for k in sorted(kwargs))])
    if step.startswith("model:"):
        out = rec.get("output") or {}
        if rid := out.get("provider_response_id"):  # the delegate sample names its responses
            return str(rid)
        ids = [p["tool_call_id"] for p in out.get("parts", ()) if str(p.get("tool_call_id", "")).startswith("note-")]
        return f"scribe:model:{ids[0][5:] if ids else 'final'}"  # the stream sample's
    return None


def check_ledger(run_dir: Path, paid: list[dict[str, Any]], clean: list[dict[str, Any]], seed: int) -> None:
    """Every call of a clean run committed once, none paid in an attempt after the one that committed it, and any
    other payment an attempt cut off by a kill."""
    committed: dict[str, int] = {}
    for rec in load(run_dir).steps:
        if (call := call_of(rec)) is not None:
            assert call not in committed, f"{call} committed twice (seed {seed})"
            committed[call] = int(rec["attempt"])
    assert sorted(committed) == sorted(e["call"] for e in clean), f"seed {seed}"
    late = [e for e in paid if e["attempt"] > committed[e["call"]]]
    assert late == [], f"paid again after it committed (seed {seed}): {late}"
    in_attempt = Counter((e["call"], e["attempt"]) for e in paid)
    assert all(n == 1 for n in in_attempt.values()), f"paid twice in one attempt (seed {seed}): {in_attempt}"
    assert all((call, a) in in_attempt for call, a in committed.items()), f"seed {seed}"


def kill_repeatedly(sup: Supervised, paid: Path, rng: random.Random) -> int:
    """SIGKILL each new attempt of the agent once it has paid for a call, at a random moment after: ``KILLS``
    times. The number of attempts killed."""
    kills, last = 0, None
    while kills < KILLS:
        st: Any = wait_for(lambda: sup.proc.poll() is not None
                      or (lambda s: s if s.get("pid") and s["pid"] != last else None)(sup.try_status()),
                      timeout=30, what="a new attempt")
        assert sup.proc.poll() is None, f"the run finished after {kills} kills: give it more calls"
        base = len(ledger(paid))
        wait_for(lambda: len(ledger(paid)) > base or sup.proc.poll() is not None, timeout=30,
                 what="a call paid by this attempt")
        time.sleep(rng.uniform(0.0, 0.06))  # the random moment of the kill (not a wait for a condition)
        try:
            os.kill(st["pid"], signal.SIGKILL)
            kills += 1
        except ProcessLookupError:
            pass
        last = st["pid"]
    return kills


def logged_calls(run_dir: Path) -> list[dict[str, Any]]:
    out = subprocess.run([PY, "-m", "supervisor", "log", str(run_dir), "--json"], capture_output=True, text=True,
                         timeout=60, env=clean_env(), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return [r for r in map(orjson.loads, out.stdout.splitlines()) if r.get("kind") == "step" and call_of(r)]


def supervised(tmp_path: Path, script: Path, args: list[str], clean_run: Any, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``script`` clean in this process (``clean_run(run)``: its report), then under ``supervise`` killed
    ``KILLS`` times; check the ledgers and the log. The two reports, clean and supervised."""
    rng = random.Random(seed)
    clean_paid, paid, result = tmp_path / "clean.jsonl", tmp_path / "paid.jsonl", tmp_path / "result.json"
    os.environ["LEDGER_FILE"] = str(clean_paid)
    try:
        with Run.open(tmp_path / "clean") as run:
            clean = clean_run(run)
    finally:
        del os.environ["LEDGER_FILE"]
    env = {**clean_env(), "LEDGER_FILE": str(paid), "RESULT_FILE": str(result)}
    opts = ("-q", "--backoff-initial", "0.01", "--backoff-max", "0.05", "--rollback-after", "0", "--give-up-after", "1000")
    run_dir = tmp_path / "run"
    with Supervised(run_dir, [PY, str(script), *args], *opts, env=env) as sup:
        kill_repeatedly(sup, paid, rng)
        assert sup.wait(90) == 0, sup.stderr()[-3000:]
    assert len(sup.events("spawn")) >= KILLS + 1
    check_ledger(run_dir, ledger(paid), ledger(clean_paid), seed)
    logged = logged_calls(run_dir)
    assert sorted(call_of(r) or "" for r in logged) == sorted(e["call"] for e in ledger(clean_paid)), f"seed {seed}"
    return clean, orjson.loads(result.read_bytes())


def _seed(name: str) -> int:
    seed = int(os.environ.get("PYDANTIC_AI_KILL_SEED", "0")) or random.randrange(1, 10**6)
    print(f"{name} kill seed {seed} (rerun with PYDANTIC_AI_KILL_SEED={seed})")
    return seed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("wrap", ["both", "outer"])
def test_a_delegating_agent_killed_at_random_moments_pays_each_call_once(tmp_path: Path, wrap: str) -> None:
    seed = _seed(f"delegate --wrap {wrap}")
    mod = sample(DELEGATE)
    args = ["--wrap", wrap, "--rounds", "10", "--parallel", "1", "--delay", "0.02"]
    clean, got = supervised(tmp_path, DELEGATE, args,
                            lambda run: asyncio.run(mod.desk_run(run, wrap=wrap, rounds=10, parallel=1)), seed)
    assert got == clean, f"seed {seed}"
    assert clean["requests"] == 11 + 10 * 3 and clean["tool_calls"] == 10 + 10 * 2  # the experts' calls counted
    nested = [r for r in logged_calls(tmp_path / "run") if r["step"] == "tool:lookup"]
    assert len(nested) == 20 and all(r.get("parent") for r in nested)  # the expert's calls, inside the tool's
    # some kill came while an expert ran: its tool step ran again, its committed calls served (checked above)
    again = Counter(e["call"] for e in ledger(tmp_path / "paid.jsonl") if e["call"].startswith("ask_expert"))
    assert max(again.values()) > 1, f"seed {seed}"


@pytest.mark.timeout(120)
def test_a_streaming_agent_killed_at_random_moments_streams_what_a_clean_run_does(tmp_path: Path) -> None:
    seed = _seed("stream")
    mod = sample(STREAM)
    args = ["--mode", "events", "--notes", "24", "--delay", "0.02"]
    clean, got = supervised(tmp_path, STREAM, args,
                            lambda run: asyncio.run(mod.scribe_run(run, mode="events", notes=24)), seed)
    assert got == clean, f"seed {seed}"
    assert clean["requests"] == 25 and clean["streamed"][-1].startswith("start:text:Summary: note0 note1")
