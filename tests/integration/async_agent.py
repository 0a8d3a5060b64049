"""An agent that runs 16 steps at once, with asyncio.gather or with threads, for the concurrency tests.

    python tests/integration/async_agent.py [RUN_DIR] --ledger FILE [--mode async|threads] [--exit-after K] [--salt S]

Step ``work:i`` appends ``i`` to the ledger (outside the run directory) each time its function
really runs, sets ``run.state["s<i>"]`` and records a usage. Steps finish in another order than
they were called (later calls are faster). ``--exit-after K``: steps 0..7 hang, and a watcher
ends the process with ``os._exit(3)`` once K steps are committed in the journal (none of the
hanging ones can be). ``--typed``: steps return a pydantic model (even i) or a dataclass (odd i).
The outputs and the state are printed as one JSON line at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
from pydantic import BaseModel

from supervisor import Run

N = 16


class Hit(BaseModel):
    i: int
    square: int
    at: datetime


@dataclass
class Pair:
    i: int
    square: int


def committed_steps(run_dir: Path) -> int:
    try:
        data = (run_dir / "journal.jsonl").read_bytes()
    except FileNotFoundError:
        return 0
    return sum(1 for line in data.splitlines() if line.startswith(b'{"kind":"step"') and b'"error"' not in line)


def watch_and_exit(run_dir: Path, k: int) -> None:
    while committed_steps(run_dir) < k:
        time.sleep(0.005)
    os._exit(3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path, nargs="?")  # default: the environment's (replay)
    ap.add_argument("--ledger", type=Path, required=True)
    ap.add_argument("--mode", choices=["async", "threads"], default="async")
    ap.add_argument("--exit-after", type=int, default=0)
    ap.add_argument("--salt", default="")
    ap.add_argument("--typed", action="store_true")
    ap.add_argument("--on-changed-inputs", default="warn")
    args = ap.parse_args()
    ledger = os.open(args.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    hang = args.exit_after > 0

    def delay(i: int) -> float:
        if hang and i < 8:
            return 30.0  # never finishes: the process ends first
        return 0.01 * (N - i)  # later calls finish first

    def result(i: int) -> object:
        if not args.typed:
            return {"i": i, "square": i * i}
        if i % 2 == 0:
            return Hit(i=i, square=i * i, at=datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC))
        return Pair(i, i * i)

    with Run.open(args.run_dir, on_changed_inputs=args.on_changed_inputs) as run:
        if hang:
            threading.Thread(target=watch_and_exit, args=(args.run_dir, args.exit_after), daemon=True).start()

        def effect(i: int, salt: str) -> None:
            os.write(ledger, f"{i}\n".encode())
            run.usage(model="test-model", provider="test", input_tokens=10 + i, output_tokens=i)
            with run.lock:
                run.state[f"s{i}"] = i

        if args.mode == "async":

            async def work(i: int, salt: str) -> dict[str, int]:
                effect(i, salt)
                await asyncio.sleep(delay(i))
                return result(i)  # type: ignore[return-value]

            async def hit(i: int, salt: str) -> Hit:  # the annotation says what a resume returns
                return await work(i, salt)  # type: ignore[return-value]

            async def pair(i: int, salt: str):  # type: ignore[no-untyped-def]  # no annotation: the journal's output_type
                return await work(i, salt)

            def fn(i: int):  # type: ignore[no-untyped-def]
                return work if not args.typed else hit if i % 2 == 0 else pair

            async def agent() -> list[object]:
                return list(await asyncio.gather(*(run.astep(f"work:{i}", fn(i), i, args.salt if i == 0 else "") for i in range(N))))

            outputs = asyncio.run(agent())
        else:

            def twork(i: int, salt: str) -> object:
                effect(i, salt)
                time.sleep(delay(i))
                return result(i)

            with ThreadPoolExecutor(N) as pool:
                outputs = list(pool.map(lambda i: run.step(f"work:{i}", twork, i, args.salt if i == 0 else ""), range(N)))
        final = run.step("final", lambda n: n, len(outputs))
        shown = [
            {
                "type": type(o).__name__,
                "value": o.model_dump(mode="json") if isinstance(o, BaseModel) else (o.__dict__ if isinstance(o, Pair) else o),
            }
            for o in outputs
        ]
        print(orjson.dumps({"outputs": shown, "final": final, "state": run.state, "replayed": len(run.replayed)}).decode())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
