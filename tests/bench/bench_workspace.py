"""Benchmark: workspace snapshots against ``cp -r`` and ``git add -A && git commit`` of the same tree.

    .venv/bin/python tests/bench/bench_workspace.py [--files 5000] [--mb 200] [--repeats 5]

Builds a tree of ``--files`` files and about ``--mb`` MB (mixed sizes, deterministic content) in a temp dir.

1. First snapshot (every file read, hashed and stored, objects synced before the index line) against
   ``cp -r`` of the tree (the floor: one read and one write of every byte, no hashing, no sync).
   Target: <= 1.5x.
2. Three files changed, then the next snapshot (one stat a file, the three read) against
   ``git add -A && git commit -q -m x`` of the same change in a git repository of the same tree (the same
   directory: the snapshot ignores ``.git/``; the first ``git add``/``commit`` is done outside the timing).
   Target: <= 2x.

Medians of ``--repeats`` runs, each pair run back to back with the order alternating. Prints figures and
ratios; asserts nothing (not collected by pytest).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from supervisor.core import workspace as ws  # noqa: E402


def sizes(files: int, total: int, rng: random.Random) -> list[int]:
    """Mixed sizes that add up to about ``total``: most files small, a few large (as a source tree with
    some data files)."""
    weights = [rng.paretovariate(1.2) for _ in range(files)]
    scale = total / sum(weights)
    return [max(1, min(int(w * scale), 8 * 1024 * 1024)) for w in weights]


def build(root: Path, files: int, mb: int) -> int:
    """The tree: ``files`` files in nested directories; returns its size in bytes."""
    rng = random.Random(25)
    block = rng.randbytes(1 << 20)
    total = 0
    for i, n in enumerate(sizes(files, mb * 1024 * 1024, rng)):
        d = root / f"pkg{i % 40:02d}" / f"mod{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        head = f"{i}\n".encode()
        off = rng.randrange(0, len(block))
        body = (block[off:] + block[:off]) * (n // len(block) + 1)
        (d / f"file{i:05d}.dat").write_bytes(head + body[: n - len(head)] if n > len(head) else head[:n])
        total += n
    return total


def timed(fn: object) -> float:
    """Seconds ``fn()`` takes, started with nothing left to write back (``sync`` first, untimed): what the
    one before left dirty must not slow the next (``cp -r`` leaves 200 MB to write; a snapshot leaves none)."""
    os.sync()
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
                        "GIT_COMMITTER_EMAIL": "b@b"})


def first_snapshot(tmp: Path, tree: Path, repeats: int) -> tuple[list[float], list[float]]:
    """Medians of a first snapshot (fresh run directory) and of ``cp -r`` (fresh target), alternating."""
    settings = ws.Settings(tree.resolve())
    snap, cp = [], []
    for k in range(repeats):
        run_dir, dst = tmp / f"run{k}", tmp / f"copy{k}"
        run_dir.mkdir(mode=0o700)

        def do_cp(dst: Path = dst) -> None:
            subprocess.run(["cp", "-r", str(tree), str(dst)], check=True)

        def do_snap(run_dir: Path = run_dir) -> None:
            ws.take(run_dir, settings, for_="start", seq=None, by="sdk")

        order = [(do_cp, cp), (do_snap, snap)] if k % 2 == 0 else [(do_snap, snap), (do_cp, cp)]
        for fn, out in order:
            out.append(timed(fn))
        shutil.rmtree(dst)
        if k:
            shutil.rmtree(run_dir)
    return snap, cp


def change(tree: Path, k: int) -> None:
    """Change three files: a small, a middling and a large one (other content each round)."""
    files = sorted(tree.rglob("*.dat"), key=lambda p: p.stat().st_size)
    for p in (files[len(files) // 10], files[len(files) // 2], files[-1]):
        data = bytearray(p.read_bytes())
        data[: 16] = f"round {k:09d}\n".encode().ljust(16, b"-")
        p.write_bytes(bytes(data))


def next_snapshot(tmp: Path, tree: Path, repeats: int) -> tuple[list[float], list[float], list[int]]:
    """Three files changed, then the snapshot and ``git add -A && git commit`` of the change, alternating."""
    run_dir = tmp / "run0"  # holds the first snapshot already
    settings = ws.Settings(tree.resolve())
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "initial")
    snap, gitc, stored = [], [], []
    for k in range(repeats):
        change(tree, k)

        def do_git() -> None:
            subprocess.run(["sh", "-c", "git add -A && git commit -q -m x"], cwd=tree, check=True,
                           env={**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
                                "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"})

        def do_snap(k: int = k) -> None:
            stored.append(ws.take(run_dir, settings, for_="abandoned", seq=k, by="sdk").stored)

        order = [(do_git, gitc), (do_snap, snap)] if k % 2 == 0 else [(do_snap, snap), (do_git, gitc)]
        for fn, out in order:
            out.append(timed(fn))
    return snap, gitc, stored


def pairs(ours: list[float], floor: list[float]) -> float:
    """The median ratio of each pair run back to back (a disk shared with other work varies by the second)."""
    return statistics.median(o / f for o, f in zip(ours, floor, strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ws-", dir=os.environ.get("BENCH_DIR")) as t:
        tmp = Path(t)
        tree = tmp / "tree"
        t0 = time.perf_counter()
        total = build(tree, a.files, a.mb)
        print(f"tree: {a.files:,} files, {total / 1e6:.0f} MB, built in {time.perf_counter() - t0:.1f} s; "
              f"{a.repeats} repeats, medians")
        snap, cp = first_snapshot(tmp, tree, a.repeats)
        ms, mc = statistics.median(snap), statistics.median(cp)
        print(f"first snapshot   {ms * 1000:8.0f} ms   cp -r {mc * 1000:8.0f} ms   "
              f"ratio {ms / mc:5.2f}x  (target <= 1.5x; median of the pairs' ratios {pairs(snap, cp):5.2f}x)")
        snap2, gitc, stored = next_snapshot(tmp, tree, a.repeats)
        ms2, mg = statistics.median(snap2), statistics.median(gitc)
        print(f"3 files changed  {ms2 * 1000:8.0f} ms   git add -A && git commit {mg * 1000:8.0f} ms   "
              f"ratio {ms2 / mg:5.2f}x  (target <= 2x; median of the pairs' ratios {pairs(snap2, gitc):5.2f}x; "
              f"objects stored per snapshot: {sorted(set(stored))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
