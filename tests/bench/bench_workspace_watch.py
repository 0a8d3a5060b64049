"""The workspace watch's cost to the agent: step commit under ``supervise`` with and without ``--workspace``
(not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_workspace_watch.py [--steps 2000] [--rounds 5] [--rate 100]

The agent commits SDK steps, each writing a small file into the workspace (one of 50, in turn: the watch
sees a change per step, stores its content and records ``files`` events), and reports each step's time. It
runs under ``supervise`` without a workspace and with ``--workspace`` (the workspace holds 200 files besides),
in interleaved rounds, twice: paced at RATE steps a second (a step's commit latency, as a real agent sees
it) and flat out (STEPS steps as fast as it can: the worst case for the watch). The median round of each is
shown beside the floor of a durable step measured on the same disk in the same run: a raw ``O_APPEND``
write + ``fdatasync`` loop (``benchutil``). The watch runs in the supervisor's process: the figure to look
at is the ratio of the agent's step times with and without it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from tests.bench.benchutil import raw_sync_floor  # noqa: E402
from tests.conftest import clean_env  # noqa: E402

AGENT = """
import json, sys, time
from pathlib import Path
from supervisor import Run
ws, n, rate = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
run = Run.open()
def edit(i):
    (ws / f"out-{i % 50}.txt").write_text(f"step {i}\\n")
    return i
durs = []
t0 = time.perf_counter()
for i in range(n):
    t = time.perf_counter()
    run.step(f"edit:{i}", edit, i)
    durs.append(time.perf_counter() - t)
    if rate:
        time.sleep(max(0.0, t0 + (i + 1) / rate - time.perf_counter()))
print(json.dumps({"total": time.perf_counter() - t0, "durs": durs}))
run.close()
"""


def supervise(tmp: Path, name: str, agent: Path, steps: int, rate: float, watch: bool) -> tuple[list[float], int]:
    """One supervised run in a fresh workspace of 200 files; each step's seconds and the ``files`` events."""
    ws, run = tmp / f"ws-{name}", tmp / f"run-{name}"
    ws.mkdir()
    for i in range(200):
        (ws / f"file-{i}.txt").write_text(f"a file of the workspace {i}\n" * 20)
    cmd = [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q"]
    if watch:
        cmd += ["--workspace", str(ws)]
    cmd += ["--", sys.executable, str(agent), str(ws), str(steps), str(rate)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"supervise failed: {r.stderr}")
    events = (run / "supervisor.jsonl").read_text().count('"event":"files"')
    durs = json.loads(r.stdout.strip().splitlines()[-1])["durs"]
    shutil.rmtree(ws)
    shutil.rmtree(run)
    return durs, events


def scenario(tmp: Path, agent: Path, label: str, steps: int, rate: float, rounds: int, floor: float) -> None:
    """Interleaved rounds without and with the watch; the median round of each beside the floor."""
    per: dict[bool, list[float]] = {False: [], True: []}
    p50: dict[bool, list[float]] = {False: [], True: []}
    p99: dict[bool, list[float]] = {False: [], True: []}
    events = 0
    for rnd in range(rounds):
        for watch in (False, True):
            durs, n = supervise(tmp, f"{int(rate)}-{rnd}-{int(watch)}", agent, steps, rate, watch)
            per[watch].append(sum(durs) / len(durs))
            q = statistics.quantiles(durs, n=100)
            p50[watch].append(q[49])
            p99[watch].append(q[98])
            events = max(events, n)
    print(f"{label}: {steps} steps writing a file each, under supervise (median of {rounds} rounds):")
    for watch in (False, True):
        m = statistics.median(per[watch])
        print(f"  {'with' if watch else 'without'} --workspace: {m * 1e6:.0f} us/step ({1 / m:.0f} steps/s, "
              f"{m / floor:.2f}x the floor); a step's commit p50 {statistics.median(p50[watch]) * 1e6:.0f} us, "
              f"p99 {statistics.median(p99[watch]) * 1e6:.0f} us")
    ratio = statistics.median(per[True]) / statistics.median(per[False])
    print(f"  ratio with/without {ratio:.3f}; {events} files events recorded; rounds (ms/step without/with): "
          + ", ".join(f"{a * 1e3:.2f}/{b * 1e3:.2f}" for a, b in zip(per[False], per[True], strict=True)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=float, default=100.0, help="steps a second of the paced agent")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=ROOT) as d:  # on the disk under test, not a tmpfs
        tmp = Path(d)
        agent = tmp / "agent.py"
        agent.write_text(AGENT)
        floor = raw_sync_floor(tmp / "floor.jsonl")
        print(f"floor (raw write + fdatasync): {floor * 1e6:.0f} us ({1 / floor:.0f} /s)")
        scenario(tmp, agent, f"paced at {a.rate:g}/s", max(200, a.steps // 4), a.rate, a.rounds, floor)
        scenario(tmp, agent, "flat out", a.steps, 0.0, a.rounds, floor)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
