"""Benchmark of the Pydantic AI adapter's per-call overhead (not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_adapter_pydantic_ai.py [--runs 100] [--rounds 5] [--dir DIR]

The sample agent (``sample_runs/pydantic_ai_agent.py``: 3 model requests to Pydantic AI's ``FunctionModel`` and 3
tool calls per agent run, 6 calls) run ``--runs`` times in one event loop, in this process:

- bare: ``await agent.run(prompt)``, the framework alone;
- journaled: ``await DurableAgent(agent, run).run(prompt)``, every call a live step of one ``Run`` whose journal
  is on a temporary directory (each step's record fdatasync'd before the call returns);
- served: the same calls answered from that journal by a second ``Run`` on it (a resume: nothing is called);
- stubbed: ``DurableAgent`` on a stand-in for ``Run`` whose ``astep`` just awaits the function: the adapter's own
  wrappers (request inputs, the response's JSON) without the SDK's journal.

In interleaved rounds (the median round is printed). The overhead per call is ``(journaled - bare) / 6``; its
share that is the disk's is shown by the cost of a raw ``O_APPEND`` write + ``fdatasync`` of one line on the
same directory (the SDK writes two lines a step, begin and step, and syncs the second).

``--durable-exec`` adds the same two rows (journaled, stubbed) for an engine built the way Pydantic AI's
``durable_exec`` guidelines say a new one should be (``BaseDurabilityCapability`` + ``CallableOperationBackend``,
``JSON_CODEC``, each operation one ``astep``): the evaluation of that layer for this adapter (README, "Pydantic
AI"). It is a measuring stand-in, not the adapter: its tool results come back as JSON (the sample's model is
given the pages as ``Page`` again), and it journals inputs the way the adapter does.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from supervisor import Run
from supervisor.integrations.pydantic_ai import DurableAgent

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: tests/bench/ holds benchutil
from benchutil import raw_sync_floor

SAMPLE = Path(__file__).resolve().parent.parent.parent / "sample_runs" / "pydantic_ai_agent.py"
CALLS_PER_RUN = 6


def load_sample() -> Any:
    spec = importlib.util.spec_from_file_location("pydantic_ai_agent", SAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pydantic_ai_agent"] = mod
    spec.loader.exec_module(mod)
    return mod


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


class Clock:
    """Wall time and this process's CPU time (all threads) since it was made."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def took(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


class _StubOptions:
    async def astep(self, name: str, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)


class StubRun:
    """Stands in for ``Run``: steps run their function, nothing is journaled."""

    def with_options(self, **options: Any) -> _StubOptions:
        return _StubOptions()

    def usage(self, **usage: Any) -> None:
        pass


async def stubbed(mod: Any, runs: int) -> tuple[float, float]:
    durable = DurableAgent(mod.build_agent(), StubRun())  # type: ignore[arg-type]
    clock = Clock()
    for _ in range(runs):
        await durable.run(mod.PROMPT)
    return clock.took()


def durable_exec_engine(run: Any) -> Any:
    """A capability on ``pydantic_ai.durable_exec``'s engine layer whose durable units are steps of ``run``."""
    from pydantic_ai.durable_exec import (
        JSON_CODEC,
        BaseDurabilityCapability,
        CallableOperationBackend,
        DurabilityEngineSpec,
        ModelRequestId,
        RoleBasedOperationConfig,
        ToolsetCallToolId,
    )
    from pydantic_ai.durable_exec._operation_names import DurableInvocationName

    from supervisor.integrations.pydantic_ai import _json_args, request_inputs

    class Namer:
        def operation_name(self, op: Any) -> str:
            return f"model:{op.model_name}" if isinstance(op, ModelRequestId) else type(op).__name__

        def invocation_name(self, op: Any, *, label: str | None) -> Any:
            return DurableInvocationName(f"tool:{label}" if isinstance(op, ToolsetCallToolId) else self.operation_name(op))

    class Backend(CallableOperationBackend[None]):
        def __init__(self) -> None:
            super().__init__(namer=Namer(), config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None))

        async def execute(self, *, operation_id: Any, name: str, body: Any, cache_key: Any, config: Any) -> Any:
            async def unit(**_: Any) -> Any:
                return await body()

            if isinstance(operation_id, ModelRequestId):
                call, inputs = {"kind": "model", "model": operation_id.model_name}, {"request": request_inputs(cache_key[1])}
            elif isinstance(operation_id, ToolsetCallToolId):
                call, inputs = {"kind": "tool", "tool": cache_key[0]}, _json_args(cache_key[1])
            else:
                call, inputs = None, {}
            return await run.with_options(call=call).astep(name, unit, **inputs)

    class Durability(BaseDurabilityCapability[Any]):
        engine_spec = DurabilityEngineSpec(engine_name="agent-supervisor", durable_unit_noun="step",
                                           durable_container_noun="run", codec=JSON_CODEC)

        @property
        def in_durable_context(self) -> bool:
            return True

        def get_durable_operation_backend(self) -> Any:
            return Backend()

    return Durability()


def durable_exec_agent(mod: Any) -> Any:
    """The sample agent, its model given the ``Page`` objects the JSON codec hands back as dicts."""
    from pydantic_ai.messages import ToolReturnPart

    fake = mod.fake_model

    def fake_model(messages: Any, info: Any) -> Any:
        for m in messages:
            for p in getattr(m, "parts", ()):
                if isinstance(p, ToolReturnPart) and isinstance(p.content, dict):
                    p.content = mod.Page(**p.content)
        return fake(messages, info)

    mod.fake_model = fake_model
    try:
        return mod.build_agent()
    finally:
        mod.fake_model = fake


async def on_durable_exec(mod: Any, runs: int, run: Any) -> tuple[float, float]:
    agent = durable_exec_agent(mod)
    clock = Clock()
    for _ in range(runs):
        await agent.run(mod.PROMPT, capabilities=[durable_exec_engine(run)])
    return clock.took()


async def durable_exec_journaled(mod: Any, runs: int, run_dir: Path) -> tuple[float, float]:
    with Run.open(run_dir) as run:
        took = await on_durable_exec(mod, runs, run)
        assert len(run.executed) == runs * CALLS_PER_RUN and not run.replayed
    return took


async def bare(mod: Any, runs: int) -> tuple[float, float]:
    agent = mod.build_agent()
    clock = Clock()
    for _ in range(runs):
        await agent.run(mod.PROMPT)
    return clock.took()


async def journaled(mod: Any, runs: int, run_dir: Path) -> tuple[tuple[float, float], Any]:
    agent = mod.build_agent()
    with Run.open(run_dir) as run:
        durable = DurableAgent(agent, run)
        clock = Clock()
        for _ in range(runs):
            result = await durable.run(mod.PROMPT)
        took = clock.took()
        assert len(run.executed) == runs * CALLS_PER_RUN and not run.replayed
    return took, result.output


async def served(mod: Any, runs: int, run_dir: Path, expected: Any) -> tuple[float, float]:
    agent = mod.build_agent()
    with Run.open(run_dir) as run:
        durable = DurableAgent(agent, run)
        clock = Clock()
        for _ in range(runs):
            result = await durable.run(mod.PROMPT)
        took = clock.took()
        assert len(run.replayed) == runs * CALLS_PER_RUN and not run.executed and result.output == expected
    return took


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100, help="agent runs per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where the journals go (default: a temporary directory)")
    ap.add_argument("--durable-exec", action="store_true", help="also time an engine on pydantic_ai.durable_exec")
    args = ap.parse_args()
    os.environ.pop("MODEL_CALLS_FILE", None)
    os.environ.pop("CRASH_ONCE_FILE", None)
    mod = load_sample()
    base = Path(tempfile.mkdtemp(prefix="bench-pydantic-ai-", dir=args.dir))
    try:
        await bare(mod, 5)  # warm up: imports, schemas, caches
        await journaled(mod, 5, base / "warm")
        b: list[tuple[float, float]] = []
        j: list[tuple[float, float]] = []
        s: list[tuple[float, float]] = []
        st: list[tuple[float, float]] = []
        dj: list[tuple[float, float]] = []
        dst: list[tuple[float, float]] = []
        if args.durable_exec:
            await durable_exec_journaled(mod, 5, base / "warm-durable-exec")
        for i in range(args.rounds):
            b.append(await bare(mod, args.runs))
            took, out = await journaled(mod, args.runs, base / f"r{i}")
            j.append(took)
            s.append(await served(mod, args.runs, base / f"r{i}", out))
            st.append(await stubbed(mod, args.runs))
            if args.durable_exec:
                dj.append(await durable_exec_journaled(mod, args.runs, base / f"d{i}"))
                dst.append(await on_durable_exec(mod, args.runs, StubRun()))
        floor = raw_sync_floor(base / "floor.jsonl")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    calls = args.runs * CALLS_PER_RUN
    n = args.runs * CALLS_PER_RUN
    print(f"Pydantic AI adapter, sample agent: {CALLS_PER_RUN} calls per agent run (3 model, 3 tool), "
          f"{args.runs} runs x {args.rounds} rounds ({calls} calls per measurement), median round; per call:")
    print(f"  {'':18} {'wall us':>9} {'cpu us':>9}   wall ratio to bare")
    bw, bc = median([x[0] for x in b]) / n, median([x[1] for x in b]) / n
    rows = [("bare framework", b), ("journaled (live)", j), ("served (resume)", s), ("stubbed journal", st)]
    if args.durable_exec:
        rows += [("durable_exec live", dj), ("durable_exec stub", dst)]
    for label, xs in rows:
        w, c = median([x[0] for x in xs]) / n, median([x[1] for x in xs]) / n
        print(f"  {label:18} {w * 1e6:9.1f} {c * 1e6:9.1f}   x{w / bw:.2f}")
    jw, jc = median([x[0] for x in j]) / n, median([x[1] for x in j]) / n
    print(f"  adapter overhead per call: {(jw - bw) * 1e6:.1f} us wall, {(jc - bc) * 1e6:.1f} us cpu "
          f"(one raw fdatasync on this directory: {floor * 1e6:.1f} us; a journaled call waits for one)")

if __name__ == "__main__":
    asyncio.run(main())
