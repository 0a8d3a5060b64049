"""Benchmark: ``replay --verify`` of a 100,000-step run against a raw scan of its journal.

    .venv/bin/python tests/bench/bench_replay.py [--steps 100000] [--repeat 3]

The run is recorded once by the real SDK and the sample research agent
(plan, search:q1, search:q2, work:0..N-1, summarize, write_report; a state
patch in every step), with ``fdatasync`` turned off in that process only, so
recording takes seconds, not minutes; the bytes are the same. Figures are the best of ``--repeat`` runs:

* floor: read the journal files and ``orjson.loads`` every line, in this process;
* verify: the whole ``agent-supervisor replay RUN --verify -- python research_agent.py ...``
  command, two Python processes included: parse, fold, and every step served
  with its inputs hashed and compared, state patches applied;
* also the SDK's load and fold alone, the scratch copy of the run directory
  (copied and hashed, then the original and the copy hashed again after the
  agent: a replay never writes into the run directory), and the two
  interpreters' start-up, to show where the time goes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent.parent
AGENT = ROOT / "sample_runs" / "research_agent.py"
PY = sys.executable


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}


def record(run_dir: Path, steps: int, ledger: Path) -> float:
    extra = steps - 5  # plan, search:q1, search:q2, summarize, write_report
    code = (
        "import os, runpy, sys; os.fdatasync = lambda fd: None; "
        f"sys.argv = [{str(AGENT)!r}, '--run-dir', {str(run_dir)!r}, '--ledger', {str(ledger)!r}, '--steps', '{extra}']; "
        f"runpy.run_path({str(AGENT)!r}, run_name='__main__')"
    )
    t0 = time.perf_counter()
    subprocess.run([PY, "-c", code], check=True, env=env(), cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def raw_scan(run_dir: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = 0
    for p in sorted(run_dir.glob("journal*.jsonl")):
        with open(p, "rb") as f:
            for line in f:
                orjson.loads(line)
                n += 1
    return time.perf_counter() - t0, n


def load_fold(run_dir: Path) -> float:
    from supervisor.core.history import load

    t0 = time.perf_counter()
    h = load(run_dir)
    dt = time.perf_counter() - t0
    assert h.steps
    return dt


def scratch_copy(run_dir: Path) -> float:
    from supervisor.replay.runner import copy_run_dir, snapshot

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        copy_run_dir(run_dir, Path(tmp) / run_dir.name)
        snapshot(run_dir)
        snapshot(Path(tmp) / run_dir.name)
        return time.perf_counter() - t0


def startup() -> float:
    t0 = time.perf_counter()
    subprocess.run([PY, "-c", "import supervisor.replay.runner, supervisor.sdk"], check=True, env=env())
    subprocess.run([PY, "-c", "import supervisor.cli.main"], check=True, env=env())
    return time.perf_counter() - t0


def verify(run_dir: Path, ledger: Path, steps: int) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [PY, "-m", "supervisor", "replay", str(run_dir), "--verify", "--",
         PY, str(AGENT), "--ledger", str(ledger), "--steps", str(steps - 5)],
        env=env(), cwd=ROOT, capture_output=True, text=True,
    )
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"verify failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return dt, r.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        rec = record(run_dir, args.steps, Path(tmp) / "ledger.jsonl")
        size = sum(p.stat().st_size for p in run_dir.glob("journal*.jsonl"))
        scans = [raw_scan(run_dir) for _ in range(args.repeat)]
        floor, lines = min(s[0] for s in scans), scans[0][1]
        fold_t = min(load_fold(run_dir) for _ in range(args.repeat))
        copy_t = min(scratch_copy(run_dir) for _ in range(args.repeat))
        boot = min(startup() for _ in range(args.repeat))
        runs = [verify(run_dir, Path(tmp) / "replay-ledger.jsonl", args.steps) for _ in range(args.repeat)]
        best, verdict = min(runs)
        replay_ledger = Path(tmp) / "replay-ledger.jsonl"
        assert not replay_ledger.exists(), "a step function ran during --verify"
    print(f"run: {args.steps:,} steps, {lines:,} journal lines, {size / 1e6:.1f} MB (recorded in {rec:.1f} s)")
    print(f"floor  raw scan (read + orjson.loads per line): {floor:.3f} s")
    print(f"       SDK load + fold:                         {fold_t:.3f} s  ({fold_t / floor:.2f}x floor)")
    print(f"       scratch copy + hashes before/after:      {copy_t:.3f} s  ({copy_t / floor:.2f}x floor)")
    print(f"       2 interpreters start + import:           {boot:.3f} s  ({boot / floor:.2f}x floor)")
    print(f"verify whole command, best of {args.repeat}:          {best:.3f} s  ({best / floor:.2f}x floor)")
    print(f"       per step: {best / args.steps * 1e6:.1f} us; verdict of that run: {verdict}")


if __name__ == "__main__":
    main()
