"""An agent whose steps call steps (nested steps), for the nested-step tests.

    python tests/integration/nested_agent.py RUN_DIR --ledger FILE [--mode seq|async] [--rounds N]
        [--exit-after K] [--delay S] [--rename]

``seq``: each round runs ``plan``, then ``task`` whose function runs three ``tool`` steps and a ``sub`` step whose
function runs a ``leaf`` step (three levels), then ``after``. ``async``: each round runs an ``astep`` ``fan`` whose
function gathers three ``search`` children (they finish in the reverse order of their calls), then ``after``.

Every step function appends ``{"call": "<name>:<args>", "attempt": N}`` to the ledger (outside the run
directory) each time it really runs. ``--exit-after K``: the process ends with ``os._exit(3)`` right after its
K-th ledger line (inside that step's function: its record never comes). ``--delay``: each leaf sleeps so long
(for kills at random moments). ``--rename``: the second ``tool`` of a task is called ``tool2`` (a changed agent).
The result is printed as one JSON line at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import orjson

from supervisor import Run


class Agent:
    def __init__(self, run: Run, ledger: str, exit_after: int, delay: float, rename: bool) -> None:
        self.run = run
        self.ledger = open(ledger, "ab")  # appended to for the whole run
        self.left = exit_after
        self.delay = delay
        self.rename = rename

    def effect(self, call: str) -> None:
        """The side effect of a step's function (counted by the tests), then maybe the crash."""
        self.ledger.write(orjson.dumps({"call": call, "attempt": self.run.attempt}) + b"\n")
        self.ledger.flush()
        self.left -= 1
        if self.left == 0:
            os._exit(3)

    # ------------------------------------------------------------------ seq
    def tool(self, i: int, j: int) -> int:
        self.effect(f"tool:{i}:{j}")
        time.sleep(self.delay)
        return i * 10 + j

    def leaf(self, i: int) -> int:
        self.effect(f"leaf:{i}")
        time.sleep(self.delay)
        return i + 100

    def sub(self, i: int) -> int:
        self.effect(f"sub:{i}")
        return self.run.step("leaf", self.leaf, i) * 2

    def task(self, i: int) -> int:
        self.effect(f"task:{i}")
        total = 0
        for j in range(3):
            name = "tool2" if self.rename and j == 1 else "tool"
            total += self.run.step(name, self.tool, i, j)
        return total + self.run.step("sub", self.sub, i)

    def seq(self, rounds: int) -> list[Any]:
        out: list[Any] = []
        for i in range(rounds):
            out.append(self.run.step("plan", self._plain, "plan", i))
            out.append(self.run.step("task", self.task, i))
            out.append(self.run.step("after", self._plain, "after", i))
        return out

    def _plain(self, what: str, i: int) -> str:
        self.effect(f"{what}:{i}")
        return f"{what} {i}"

    # ------------------------------------------------------------------ async
    async def search(self, i: int, j: int) -> str:
        self.effect(f"search:{i}:{j}")
        await asyncio.sleep(self.delay * (3 - j))  # later calls finish first
        return f"hit {i}.{j}"

    async def fan(self, i: int) -> list[str]:
        self.effect(f"fan:{i}")
        hits = await asyncio.gather(*(self.run.astep("search", self.search, i, j) for j in range(3)))
        return list(hits)

    async def fanned(self, rounds: int) -> list[Any]:
        out: list[Any] = []
        for i in range(rounds):
            out.append(await self.run.astep("fan", self.fan, i))
            out.append(await self.run.astep("after", self._after, i))
        return out

    async def _after(self, i: int) -> str:
        self.effect(f"after:{i}")
        return f"after {i}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--ledger", required=True)
    p.add_argument("--mode", choices=("seq", "async"), default="seq")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--exit-after", type=int, default=0)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--rename", action="store_true")
    p.add_argument("--resume", action="store_true")  # the supervisor's flag: the run directory says it
    a = p.parse_args(argv)
    run = Run.open(a.run_dir)
    agent = Agent(run, a.ledger, a.exit_after, a.delay, a.rename)
    out = agent.seq(a.rounds) if a.mode == "seq" else asyncio.run(agent.fanned(a.rounds))
    run.close()
    sys.stdout.write(orjson.dumps({"result": out, "replayed": len(run.replayed), "executed": len(run.executed)}).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
