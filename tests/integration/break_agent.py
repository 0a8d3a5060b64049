"""An agent for the breakpoint and ``run.ask`` tests.

    python tests/integration/break_agent.py RUN_DIR --ledger FILE [--mode seq|fan|ask] [--crash-in STEP]
        [--ask-timeout S] [--resume]

``seq``: ``plan``, ``tool:bash`` (argument ``"ls"``), ``tool:edit``, ``after``. ``fan``: 8 ``work:i`` steps at once
(asyncio.gather). ``ask``: ``plan``, then ``run.ask("ship it?", choices=["yes", "no"])``, then ``after``.
Every step function appends ``{"call": NAME, "args": [...], "attempt": N}`` to the ledger when it really runs.
``--crash-in STEP``: ``os._exit(3)`` inside that step's function (after its ledger line), in the first attempt only.
The result is printed as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import orjson

from supervisor import Run


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--ledger", required=True)
    p.add_argument("--mode", choices=("seq", "fan", "ask"), default="seq")
    p.add_argument("--crash-in", default="")
    p.add_argument("--ask-timeout", type=float, default=None)
    p.add_argument("--resume", action="store_true")
    a = p.parse_args(argv)
    run = Run.open(a.run_dir)
    ledger = open(a.ledger, "ab")  # appended to for the whole run

    def effect(name: str, *args: Any) -> None:
        ledger.write(orjson.dumps({"call": name, "args": list(args), "attempt": run.attempt}) + b"\n")
        ledger.flush()
        if name == a.crash_in and run.attempt == 1:
            os._exit(3)

    def tool(name: str) -> Any:
        def fn(*args: Any) -> str:
            effect(name, *args)
            return f"{name}({', '.join(map(str, args))})"

        return fn

    out: list[Any] = []
    if a.mode == "seq":
        out.append(run.step("plan", tool("plan"), 1))
        out.append(run.step("tool:bash", tool("tool:bash"), "ls"))
        out.append(run.step("tool:edit", tool("tool:edit"), "a.py"))
        out.append(run.step("after", tool("after"), 2))
    elif a.mode == "fan":

        async def work(i: int) -> int:
            effect(f"work:{i}", i)
            await asyncio.sleep(0.01)
            return i * i

        async def fan() -> list[int]:
            return list(await asyncio.gather(*(run.astep(f"work:{i}", work, i) for i in range(8))))

        out.append(asyncio.run(fan()))
    else:
        out.append(run.step("plan", tool("plan"), 1))
        out.append(run.ask("ship it?", choices=["yes", "no"], default="no" if a.ask_timeout else None,
                           timeout=a.ask_timeout))
        out.append(run.step("after", tool("after"), out[-1]))
    run.close()
    sys.stdout.write(orjson.dumps({"result": out, "replayed": len(run.replayed)}).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
