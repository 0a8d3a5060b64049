"""Benchmark: restart latency of the supervisor against a bare Popen+wait respawn loop, and its own cost.

    .venv/bin/python tests/bench/bench_restart.py [--restarts 30] [--seconds 10]

1. Crash-to-new-child latency: the agent records the time just before it exits 1
   and the time its next incarnation starts; the same agent runs under a bare
   ``Popen`` + ``wait`` loop (the floor) and under ``agent-supervisor supervise``.
   Printed as medians and the ratio supervisor / bare loop (target: <= 1.3). ``--live-ms M``: each
   incarnation runs M ms before it crashes (0: at once, as a crash loop; an agent that runs a while finds
   the supervisor's standby process ready, see docs/supervise.md).
2. The supervisor's own CPU % and RSS while the agent commits 100 SDK steps a
   second, with the agent's own CPU % alongside as the floor it is compared to.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent.parent
AGENT = Path(__file__).resolve().parent.parent / "integration" / "supervisor_agent.py"
PY = sys.executable


LIVE_MS = 0


def _env(run_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}
    env["AGENT_SUPERVISOR_RUN_DIR"] = str(run_dir)
    env["BENCH_LIVE_MS"] = str(LIVE_MS)
    return env


def _latencies(run_dir: Path) -> list[float]:
    starts = [float(x) for x in (run_dir / "bench_starts.txt").read_text().split()]
    exits = [float(x) for x in (run_dir / "bench_exits.txt").read_text().split()]
    return [starts[i + 1] - exits[i] for i in range(len(exits))]


def bare_loop(run_dir: Path, n: int) -> list[float]:
    run_dir.mkdir(parents=True)
    env = _env(run_dir)
    while True:
        p = subprocess.Popen([PY, str(AGENT), "bench", str(n)], env=env, stdin=subprocess.DEVNULL)
        if p.wait() == 0:
            break
    return _latencies(run_dir)


def supervised(run_dir: Path, n: int) -> list[float]:
    env = _env(run_dir)
    del env["AGENT_SUPERVISOR_RUN_DIR"]
    r = subprocess.run(
        [PY, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), "-q", "--no-resume-flag",
         "--", PY, str(AGENT), "bench", str(n)],
        env=env, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"supervise failed: {r.stderr}")
    return _latencies(run_dir)


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def cost(run_dir: Path, seconds: float) -> dict[str, float]:
    steps = int(seconds * 100)
    env = _env(run_dir)
    del env["AGENT_SUPERVISOR_RUN_DIR"]
    sup = subprocess.Popen(
        [PY, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), "-q", "--", PY, str(AGENT), "rate", str(steps), "100"],
        env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )
    sp = psutil.Process(sup.pid)
    deadline = time.monotonic() + 30
    agent = None
    while agent is None and time.monotonic() < deadline:
        # the agent by its command line: the supervisor's first child may be its guardian (idle: "-0.0 %")
        kids = [k for k in sp.children(recursive=True) if str(AGENT) in " ".join(_cmdline(k))]
        agent = kids[0] if kids else None
        time.sleep(0.01)
    assert agent is not None
    time.sleep(1.0)  # past the start-up of both
    t0 = time.monotonic()
    s0, a0 = sp.cpu_times(), agent.cpu_times()
    rss = []
    window = seconds - 2.0
    while time.monotonic() - t0 < window:
        rss.append(sp.memory_info().rss)
        time.sleep(0.2)
    s1, a1 = sp.cpu_times(), agent.cpu_times()
    wall = time.monotonic() - t0
    sup.wait(timeout=60)
    sup_cpu = (s1.user + s1.system - s0.user - s0.system) / wall * 100
    agent_cpu = (a1.user + a1.system - a0.user - a0.system) / wall * 100
    return {"sup_cpu": sup_cpu, "agent_cpu": agent_cpu, "sup_rss": max(rss), "wall": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--live-ms", type=int, default=0, help="each incarnation runs this long before it crashes")
    args = ap.parse_args()
    global LIVE_MS
    LIVE_MS = args.live_ms
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        # interleave the two measurements so both see the same machine load
        bare: list[float] = []
        sup: list[float] = []
        for rnd in range(3):
            bare += bare_loop(t / f"bare{rnd}", args.restarts // 3)
            sup += supervised(t / f"sup{rnd}", args.restarts // 3)
        mb, ms = statistics.median(bare), statistics.median(sup)
        print(f"restart latency, crash -> next child running ({len(bare)} / {len(sup)} restarts):")
        print(f"  bare Popen+wait loop  median {mb * 1000:7.1f} ms   p90 {statistics.quantiles(bare, n=10)[-1] * 1000:7.1f} ms")
        print(f"  agent-supervisor      median {ms * 1000:7.1f} ms   p90 {statistics.quantiles(sup, n=10)[-1] * 1000:7.1f} ms")
        print(f"  ratio supervisor / bare loop: {ms / mb:.2f}x (target <= 1.3x)")
        c = cost(t / "cost", args.seconds)
        print(f"supervisor cost while the agent commits 100 steps/s ({c['wall']:.1f} s window):")
        print(f"  supervisor CPU {c['sup_cpu']:.1f} % of one core, RSS {c['sup_rss'] / 2**20:.1f} MiB")
        print(f"  agent CPU      {c['agent_cpu']:.1f} % (floor); supervisor / agent = {c['sup_cpu'] / max(c['agent_cpu'], 0.01):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
