"""Benchmark of the LangGraph adapter against LangGraph alone (not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_adapter_langgraph.py [--runs 40] [--dir /tmp]

The sample agent (sample_runs/langgraph_agent.py: 3 model calls, 3 tool calls, 7 supersteps, langchain-core's fake
chat model) run N times in one process, each run on a new thread:

- ``bare``: the framework alone, LangGraph's ``InMemorySaver`` as the checkpointer, the model and tools unwrapped;
- ``calls``: the model and tools journaled (JournaledChatModel, journaled_tools), ``InMemorySaver`` kept: the
  cost of the journaled steps;
- ``adapter``: the whole adapter: the calls journaled and ``JournalSaver`` (one synced line per checkpoint and per
  task's writes) instead of ``InMemorySaver``.

Each graph is built once (as an agent does); the journal, the run directory and the saver's file are on ``--dir``.

Then the file's size: a thread of 200 supersteps whose state holds a 50 kB document set once and a counter that
changes every step, against the bytes a saver writing every channel at every checkpoint would store (LangGraph's
serializer's bytes of all the values, summed over the checkpoints; the SQLite saver's growth, #7843).
The per-call overhead is the difference to ``bare`` divided by the 6 model and tool calls of a run (the
checkpoint lines are counted in it: LangGraph writes them because the calls ran). Best of 3 rounds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "sample_runs"))

import langgraph_agent as sample  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from supervisor import Run  # noqa: E402
from supervisor.integrations.langgraph import JournalSaver  # noqa: E402

CALLS = 6  # model and tool calls per run of the sample


def timed(graph: Any, runs: int, tag: str) -> tuple[float, float]:
    """Wall and CPU seconds per run of ``graph`` over ``runs`` fresh threads."""
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(runs):
        out = graph.invoke({"messages": [HumanMessage(sample.PROMPT)]}, {"configurable": {"thread_id": f"{tag}-{i}"}})
        assert len(out["messages"]) == 7
    return (time.perf_counter() - t0) / runs, (time.process_time() - c0) / runs


def round_(runs: int, base: Path, n: int) -> dict[str, tuple[float, float]]:
    out = {"bare": timed(sample.build_graph(None, InMemorySaver()), runs, "bare")}
    with Run.open(base / f"calls{n}") as run:
        out["calls"] = timed(sample.build_graph(run, InMemorySaver()), runs, "calls")
    with Run.open(base / f"adapter{n}") as run, JournalSaver(run) as saver:
        out["adapter"] = timed(sample.build_graph(run, saver), runs, "adapter")
        n_lines = sum(1 for _ in saver.path.open("rb"))
    out["lines"] = (n_lines / runs, 0.0)
    return out


def growth(base: Path) -> tuple[int, int]:
    """JournalSaver's file size and the sum of full snapshots, for 200 steps that change one small channel."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        doc: str
        n: int

    def step(state: State) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= 200 else "step")
    with JournalSaver(base / "growth") as saver:
        config: Any = {"configurable": {"thread_id": "long"}, "recursion_limit": 1000}
        g.compile(checkpointer=saver).invoke({"doc": "x" * 50_000, "n": 0}, config)
        full = sum(len(saver.serde.dumps_typed(v)[1]) for t in saver.list(config)
                   for v in t.checkpoint["channel_values"].values())
        return saver.path.stat().st_size, full


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--dir", default=None, help="where the run directories go (default: the temp dir)")
    a = ap.parse_args()
    os.environ.pop("MODEL_CALLS_FILE", None)
    os.environ.pop("CRASH_ONCE_FILE", None)
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        timed(sample.build_graph(None, InMemorySaver()), 3, "warm")  # imports, caches
        rounds = [round_(a.runs, Path(d), n) for n in range(3)]
        size, full = growth(Path(d))
    wall = {k: min(r[k][0] for r in rounds) for k in ("bare", "calls", "adapter")}
    cpu = {k: min(r[k][1] for r in rounds) for k in ("bare", "calls", "adapter")}
    lines = rounds[0]["lines"][0]
    print(f"LangGraph sample agent, {a.runs} runs x 3 rounds (best), {CALLS} model/tool calls per run, "
          f"journal in {a.dir or tempfile.gettempdir()}")
    print(f"  {'':<38} {'wall ms/run':>11} {'ratio':>6} {'+us/call':>9}   {'cpu ms/run':>10} {'ratio':>6} {'+us/call':>9}")
    for k, what in (("bare", "bare (LangGraph, InMemorySaver)"), ("calls", "journaled calls, InMemorySaver"),
                    ("adapter", "journaled calls + JournalSaver")):
        print(f"  {what:<38} {wall[k] * 1e3:11.2f} {wall[k] / wall['bare']:6.2f} "
              f"{(wall[k] - wall['bare']) / CALLS * 1e6:9.0f}   {cpu[k] * 1e3:10.2f} {cpu[k] / cpu['bare']:6.2f} "
              f"{(cpu[k] - cpu['bare']) / CALLS * 1e6:9.0f}")
    print(f"  JournalSaver lines per run: {lines:.0f}, each synced (wall - cpu is mostly fdatasync)")
    print(f"200 steps changing a counter beside a 50 kB channel: JournalSaver file {size / 1e3:.0f} kB, "
          f"full snapshots {full / 1e6:.1f} MB ({full / size:.0f}x)")


if __name__ == "__main__":
    main()
