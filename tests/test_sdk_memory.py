"""The SDK's memory stays flat over a long run: live steps and a long resume, in real processes.

Each agent runs in a child process on a tmpfs (``/dev/shm``), so 100,000 durable
steps take seconds, and reports its resident set size (``VmRSS``) as it goes. The
old SDK kept every record it wrote (159 MiB after 100,000 trivial steps) and, on
resume, every journal page it had replayed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from .conftest import ROOT, clean_env

MiB = 1024 * 1024
STEPS = 100_000

RSS = """
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
"""

LIVE_AGENT = RSS + """
import sys
from supervisor import Run
n = int(sys.argv[2])
with Run.open(sys.argv[1]) as run:
    for i in range(n):
        run.step("tick", lambda: None)
        if i + 1 in (20_000, n):
            print(i + 1, rss(), flush=True)
    assert len(run.executed) == n and run.executed[-1] == "tick"
"""

RESUME_AGENT = RSS + """
import sys
from supervisor import Run
n, more = int(sys.argv[2]), int(sys.argv[3])
with Run.open(sys.argv[1]) as run:
    print("open", rss(), flush=True)
    for i in range(n):
        out = run.step(f"search:q{i}", lambda q: None, f"query number {i}")
        assert out == {"title": f"result for query {i}", "score": i % 97}
    print("replayed", rss(), flush=True)
    for i in range(more):
        run.step("new", lambda: None)
    print("live", rss(), flush=True)
    assert len(run.replayed) == n and len(run.executed) == more
"""


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    """A scratch directory on tmpfs (fdatasync costs next to nothing there), else the usual temp dir."""
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    d = Path(tempfile.mkdtemp(prefix="sdk-memory-", dir=base))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_child(script: str, *args: object, timeout: float = 60.0) -> dict[str, int]:
    r = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=clean_env(), cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return {k: int(v) for k, v in (line.split() for line in r.stdout.splitlines())}


def write_journal(run_dir: Path, steps: int) -> None:
    """A journal as the SDK writes it (a begin and a step record per step), written directly: fast."""
    run_dir.mkdir()
    (run_dir / "run.json").write_bytes(orjson.dumps({"id": run_dir.name, "format": 1}))
    lines = []
    for i in range(steps):
        name, ts, inputs = f"search:q{i}", "2026-11-29T18:30:12.000Z", {"args": [f"query number {i}"]}
        common = {"seq": 2 * i, "id": f"a1b2{2 * i:x}", "ts": ts, "step": name, "pos": i, "attempt": 1, "inputs": inputs}
        lines.append(orjson.dumps({"kind": "begin", **common}))
        common.update(seq=2 * i + 1, id=f"a1b2{2 * i + 1:x}")
        out = {"title": f"result for query {i}", "score": i % 97}
        lines.append(orjson.dumps({"kind": "step", **common, "output": out, "dur_ms": 1.5, "key": f"r:{i}"}))
    (run_dir / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.timeout(90)
def test_memory_stays_flat_over_100000_live_steps(fast_dir: Path) -> None:
    rss = run_child(LIVE_AGENT, fast_dir / "run", STEPS)
    growth = rss[str(STEPS)] - rss["20000"]
    # the old SDK grew by about 0.8 KiB a step here: 65 MiB between these two points
    assert growth < 20 * MiB, f"RSS grew by {growth / MiB:.1f} MiB from step 20,000 to {STEPS:,}"
    assert (fast_dir / "run" / "journal.jsonl").read_bytes().count(b"\n") == 1 + 2 * STEPS  # start, begin + step each


@pytest.mark.timeout(90)
def test_a_long_resume_holds_neither_the_replayed_journal_nor_its_records(fast_dir: Path) -> None:
    run_dir = fast_dir / "run"
    write_journal(run_dir, STEPS)
    journal = (run_dir / "journal.jsonl").stat().st_size  # about 33 MB
    rss = run_child(RESUME_AGENT, run_dir, STEPS, 20_000)
    # served steps are read through a map of the journal: the pages replayed are given back as it goes
    replay_growth = rss["replayed"] - rss["open"]
    assert replay_growth < journal / 4, f"RSS grew by {replay_growth / MiB:.1f} MiB over the replay ({journal / MiB:.0f} MiB journal)"
    # once live, the resume view (a record per step) is let go: less than at open, though 20,000 steps ran since
    assert rss["live"] < rss["open"], rss
