"""Per-call overhead of the OpenAI Agents SDK adapter against the framework alone, in one process.

The sample agent (``sample_runs/openai_agents_agent.py``: 3 model calls and 3 tool calls a run, a
fake model, no network) runs N times bare (``Runner.run`` on the plain agent), N times durable
(``durable(agent, run)``, every call a journaled step synced to a journal in a temporary directory), and
N times served (the same journal opened again: every call served from it, no model or tool called).
Rounds alternate the three so a loaded machine slows them alike; the median round is reported. Where
``/dev/shm`` exists, the live mode runs there too (tmpfs: ``fdatasync`` costs nothing), which leaves the
CPU cost of the adapter and the SDK without the disk's.

    .venv/bin/python tests/bench/bench_adapter_openai_agents.py [--runs N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import agents
from agents import Runner

from supervisor import Run
from supervisor.integrations.openai_agents import durable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: tests/bench/ holds benchutil
from benchutil import raw_sync_floor

ROOT = Path(__file__).resolve().parent.parent.parent
CALLS_PER_RUN = 6  # 3 model calls + 3 tool calls


def _sample() -> Any:
    spec = importlib.util.spec_from_file_location("openai_agents_agent", ROOT / "sample_runs" / "openai_agents_agent.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


Timing = tuple[float, float]
"""Wall seconds, CPU seconds (of the whole process: the journal's writer thread included)."""


async def _bare(sample: Any, n: int) -> Timing:
    agent = sample.build_agent()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        await Runner.run(agent, sample.PROMPT)
    return time.perf_counter() - t0, time.process_time() - c0


async def _journaled(sample: Any, n: int, run_dir: Path, expect_served: bool) -> Timing:
    with Run.open(run_dir) as run:
        agent = durable(sample.build_agent(), run, provider="scripted")
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            await Runner.run(agent, sample.PROMPT)
        dt = time.perf_counter() - t0, time.process_time() - c0
        assert (len(run.replayed) == n * CALLS_PER_RUN) == expect_served, (len(run.replayed), len(run.executed))
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100, help="agent runs per round and mode")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    agents.set_tracing_disabled(True)  # offline, and tracing costs the same in every mode
    sample = _sample()
    n = args.runs
    bare: list[Timing] = []
    live: list[Timing] = []
    served: list[Timing] = []
    syncs: list[float] = []
    shm: list[Timing] = []
    shm_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="bench-oa-") as tmp, \
            tempfile.TemporaryDirectory(prefix="bench-oa-", dir=shm_root) as tmp_shm:
        asyncio.run(_bare(sample, 5))  # warm up imports and caches
        for r in range(args.rounds):
            bare.append(asyncio.run(_bare(sample, n)))
            live.append(asyncio.run(_journaled(sample, n, Path(tmp) / f"r{r}", expect_served=False)))
            served.append(asyncio.run(_journaled(sample, n, Path(tmp) / f"r{r}", expect_served=True)))
            syncs.append(raw_sync_floor(Path(tmp) / f"raw{r}", 200))
            if shm_root is not None:
                shm.append(asyncio.run(_journaled(sample, n, Path(tmp_shm) / f"r{r}", expect_served=False)))
    calls = n * CALLS_PER_RUN

    def med(xs: list[Timing]) -> Timing:
        return statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs)

    b = med(bare)
    print(f"openai-agents {agents.__version__}: {n} runs x {CALLS_PER_RUN} calls (3 model, 3 tool), median of {args.rounds} rounds")
    print(f"  {'':22} {'wall us/call':>12} {'overhead':>9} {'ratio':>6}   {'CPU us/call':>11} {'overhead':>9} {'ratio':>6}")

    def row(label: str, t: Timing, note: str = "") -> None:
        w, c = t
        print(f"  {label:22} {w / calls * 1e6:12.1f} {(w - b[0]) / calls * 1e6:9.1f} {w / b[0]:5.2f}x   "
              f"{c / calls * 1e6:11.1f} {(c - b[1]) / calls * 1e6:9.1f} {c / b[1]:5.2f}x{note}")

    row("bare framework", b)
    row("durable, live", med(live))
    row("durable, served", med(served))
    if shm:
        row("durable, live, tmpfs", med(shm), "   (no disk sync)")
    print(f"  a raw append + fdatasync in the journal's directory: {statistics.median(syncs) * 1e6:.1f} us "
          f"(a live call is one synced record; parallel tool calls share a sync)")


if __name__ == "__main__":
    main()
