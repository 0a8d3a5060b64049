"""Benchmark of concurrent steps (not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_sdk_concurrency.py [--steps 640] [--inflight 16]

Durable steps per second of ``await run.astep`` with 16 steps in flight (``asyncio.gather``
of 16 at a time) against the same steps awaited one at a time, and of ``run.step`` from 16
threads against one thread, in one run on the same disk (target: >= 10x). Each step's
function does nothing: the figure is the journal's (begin + step record, one fdatasync
per commit group).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from supervisor import Run


async def work(i: int) -> dict[str, int]:
    return {"value": i}


def swork(i: int) -> dict[str, int]:
    return {"value": i}


def bench_async(tmp: Path, steps: int, inflight: int) -> tuple[float, float]:
    """Interleaved rounds of ``inflight`` steps one at a time and ``inflight`` gathered (the disk is shared and noisy)."""
    run = Run.open(tmp / "async")
    seq_t = par_t = 0.0

    async def rounds() -> None:
        nonlocal seq_t, par_t
        for b in range(0, steps, inflight):
            t0 = time.perf_counter()
            for i in range(b, b + inflight):
                await run.astep(f"seq:{i}", work, i)
            t1 = time.perf_counter()
            await asyncio.gather(*(run.astep(f"par:{i}", work, i) for i in range(b, b + inflight)))
            seq_t += t1 - t0
            par_t += time.perf_counter() - t1

    asyncio.run(rounds())
    run.close()
    return steps / seq_t, steps / par_t


def bench_threads(tmp: Path, steps: int, inflight: int) -> tuple[float, float]:
    run = Run.open(tmp / "threads")
    t0 = time.perf_counter()
    for i in range(steps):
        run.step(f"seq:{i}", swork, i)
    seq = steps / (time.perf_counter() - t0)
    per = steps // inflight

    def worker(t: int) -> None:
        for j in range(per):
            run.step(f"par:{t}:{j}", swork, j)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(inflight) as pool:
        list(pool.map(worker, range(inflight)))
    par = per * inflight / (time.perf_counter() - t0)
    run.close()
    return seq, par


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=640)
    ap.add_argument("--inflight", type=int, default=16)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-sdk-", dir=os.environ.get("BENCH_DIR")))
    try:
        seq, par = bench_async(tmp, args.steps, args.inflight)
        print(f"durable steps/s, {args.steps} steps (begin + step record each):")
        print(f"  astep one at a time      {seq:8.0f} steps/s")
        print(f"  astep {args.inflight} in flight       {par:8.0f} steps/s   ratio {par / seq:.1f}x (target >= 10x)")
        seq, par = bench_threads(tmp, args.steps, args.inflight)
        print(f"  step, one thread         {seq:8.0f} steps/s")
        print(f"  step, {args.inflight} threads         {par:8.0f} steps/s   ratio {par / seq:.1f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
