"""Benchmark: what breakpoints cost a live step when none is set (not a test: prints figures).

    .venv/bin/python tests/bench/bench_breakpoints.py [--steps 2000] [--rounds 7]

The same durable SDK steps (a step's commit: its begin and step lines, one fdatasync) in two runs of one
process, interleaved round by round: with the breakpoint check (the SDK as shipped: one ``stat`` of
``breakpoints.json`` a live step) and without it (the check taken out). The floor: a raw ``O_APPEND`` write
plus ``fdatasync`` of a line of the same size, in the same rounds. Medians of the rounds, in microseconds a
step, and the check's cost as a share of a step's commit (the target: at most 2%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from supervisor import Run


def _steps(run: Run, n: int) -> float:
    t = time.perf_counter()
    for i in range(n):
        run.step("work", _work, i)
    return (time.perf_counter() - t) / n * 1e6


def _work(i: int) -> int:
    return i + 1


def _floor(path: Path, n: int) -> float:
    line = b'{"kind":"step","step":"work","pos":1,"attempt":1,"inputs":{"args":[1]},"output":2,"seq":3}\n'
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        t = time.perf_counter()
        for _ in range(n):
            os.write(fd, line)
            os.fdatasync(fd)
        return (time.perf_counter() - t) / n * 1e6
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", ".")) as d:
        with_check = Run.open(Path(d) / "with")
        without = Run.open(Path(d) / "without")
        without._steps.gate = None  # the check taken out
        on, off, floor = [], [], []
        for _ in range(a.rounds):
            on.append(_steps(with_check, a.steps))
            off.append(_steps(without, a.steps))
            floor.append(_floor(Path(d) / "floor.jsonl", a.steps))
        gate = with_check._steps.gate
        assert gate is not None
        t = time.perf_counter()
        for _ in range(100_000):
            gate._breakpoints()
        check_us = (time.perf_counter() - t) / 100_000 * 1e6
        with_check.close()
        without.close()
    m_on, m_off, m_floor = statistics.median(on), statistics.median(off), statistics.median(floor)
    print(f"{a.steps} durable steps a round, median of {a.rounds} interleaved rounds:")
    print(f"  floor (write + fdatasync)   {m_floor:8.1f} us")
    print(f"  step, no breakpoint check   {m_off:8.1f} us  ({m_off / m_floor:.2f}x the floor)")
    print(f"  step, with the check        {m_on:8.1f} us  ({m_on / m_floor:.2f}x the floor)")
    print(f"  the check alone (100,000 calls): {check_us:.2f} us = {check_us / m_off * 100:.2f}% of a step's commit "
          "(target <= 2%)")
    print(f"  with against without: {m_on - m_off:+.1f} us a step = {(m_on - m_off) / m_off * 100:+.2f}% "
          f"(noise: the per-round ratios {', '.join(f'{x / y:.3f}' for x, y in zip(on, off, strict=True))})")


if __name__ == "__main__":
    main()
