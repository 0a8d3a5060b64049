"""Benchmark of group commit (not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_group_commit.py [--n 800] [--rounds 9] [--slow-disk-us N]

Every figure is a durable append (or step) per second, or a cost per append, measured
in interleaved rounds (the disk is shared and noisy; the median round of each is
printed) against the floor of the same run: a raw loop of O_APPEND write + fdatasync,
one line each.

- writer: sequential ``JournalWriter.append`` against the floor; 16 threads appending at
  once; asyncio with 16 ``aappend`` in flight against one awaited at a time;
- SDK (if ``Run`` has ``astep``): ``asyncio.gather`` of 16 ``run.astep`` against the same
  16 awaited one at a time (target >= 10x), and sequential ``Run.step`` against the floor
  (target <= 1.15x);
- SDK threads: ``run.step`` from 4, 16 and 64 threads at once against one thread alone,
  each printed beside its bound (target: at least 0.8 of it), with the process CPU per step,
  and beside what a hand-written threaded group commit (one lock, one condition, the first
  waiter syncs) gains with as many threads over one: what CPython threads reach on this
  machine with next to no CPU per append. Then the same hand-written commit, and one with a
  syncer thread of its own (each waiter parked on its own lock), each carrying a step's CPU
  (``c`` of pure Python before each append): the fraction of the bound that threads reach
  with no SDK at all. Where that is under 0.8, no threaded SDK reaches 0.8 on this machine.
- the threads' own cost, a floor of the same run: ``run.step`` and the hand-written designs from as many threads on
  /dev/shm, where a sync costs next to nothing, give ``t``, the wall time of a step when N threads take turns
  (its CPU, context switches and GIL hand-offs). A step then costs at least ``t``, and a batch of N at least one
  sync: N in flight gain at most ``(c + f) / max(t, f / N)`` over one at a time, even with every sync hidden
  behind the next steps' work (the bound hides none). Its ratio to the bound is the most that design reaches here.

With N in flight the gain is bounded by the CPU cost of one step ``c`` (the GIL runs one
at a time) against the cost of one sync ``f``: ``N(c + f) / (Nc + f)``. ``c`` is measured
in the same run as the wall time of a sequential ``Run.step`` on /dev/shm (its sync is
nearly free there), ``f`` as the floor. A disk
whose fdatasync is fast (a virtual disk with a write cache) shows a smaller ratio than
a real one; the sync time is printed so the figures can be read. ``--slow-disk-us N``
adds N microseconds to every fdatasync (a sleep, which like a real sync releases the
GIL) of the floor and of the writer alike, to show the batching on a slower disk: the
figures are then labelled emulated.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from supervisor import Run
from supervisor.core.journal_writer import JournalWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: tests/bench/ holds benchutil
from benchutil import raw_sync_floor

THREADS = 16
SDK_THREADS = (4, 16, 64)


def record(i: int) -> dict[str, Any]:
    """A step record as the SDK writes it (about 190 bytes with seq, id and ts)."""
    return {
        "kind": "step", "step": "work", "pos": i, "attempt": 1, "inputs": {"args": [i]},
        "output": {"value": i, "title": "result of the work"}, "dur_ms": 0.012,
    }


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


class Figures:
    """Rounds of several measurements, taken in turn; each measurement returns seconds per operation."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}

    def take(self, name: str, fn: Callable[[], float]) -> None:
        self.times.setdefault(name, []).append(fn())

    def __getitem__(self, name: str) -> float:
        return median(self.times[name])


def seq_appends(w: JournalWriter, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        w.append(record(i))
    return (time.perf_counter() - t0) / n


def thread_appends(w: JournalWriter, n: int) -> float:
    per = n // THREADS
    start = threading.Barrier(THREADS + 1)

    def work() -> None:
        start.wait()
        for i in range(per):
            w.append(record(i))

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return (time.perf_counter() - t0) / (per * THREADS)


def async_appends(w: JournalWriter, n: int, in_flight: int) -> float:
    async def one(count: int) -> None:
        for i in range(count):
            await w.aappend(record(i))

    async def main() -> float:
        per = n // in_flight
        t0 = time.perf_counter()
        await asyncio.gather(*(one(per) for _ in range(in_flight)))
        return (time.perf_counter() - t0) / (per * in_flight)

    return asyncio.run(main())


def sdk_gather(run: Run, n: int, gathered: bool) -> float:
    async def work(x: int) -> dict[str, int]:
        return {"value": x}

    async def main() -> float:
        batches = n // THREADS
        t0 = time.perf_counter()
        for b in range(batches):
            if gathered:
                await asyncio.gather(*(run.astep(f"work:{k}", work, b) for k in range(THREADS)))  # type: ignore[attr-defined]
            else:
                for k in range(THREADS):
                    await run.astep(f"work:{k}", work, b)  # type: ignore[attr-defined]
        return (time.perf_counter() - t0) / (batches * THREADS)

    return asyncio.run(main())


def sdk_seq(run: Run, n: int) -> float:
    def work(x: int) -> dict[str, int]:
        return {"value": x}

    t0 = time.perf_counter()
    for i in range(n):
        run.step("work", work, i)
    return (time.perf_counter() - t0) / n


CPU: dict[int, list[float]] = {}
"""Process CPU seconds per step of each :func:`sdk_threads` round, by threads (user and system: every thread's)."""


def sdk_threads(run: Run, n: int, threads: int) -> float:
    """``run.step`` from ``threads`` threads at once, ``n`` steps in all: seconds per step (its CPU to :data:`CPU`)."""
    per = max(1, n // threads)
    start = threading.Barrier(threads + 1)

    def work(x: int) -> dict[str, int]:
        return {"value": x}

    def worker(t: int) -> None:
        start.wait()
        for j in range(per):
            run.step(f"t{t}", work, j)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    for t in pool:
        t.join()
    CPU.setdefault(threads, []).append((time.process_time() - c0) / (per * threads))
    return (time.perf_counter() - t0) / (per * threads)


def spin(n: int) -> int:
    """Python work for the CPU of a step (``n`` loop turns under the GIL, as a step's own Python is)."""
    x = 0
    for i in range(n):
        x += i
    return x


def spin_turns(seconds: float) -> int:
    """Turns of :func:`spin` that take ``seconds`` here, now."""
    n = 2000
    t0 = time.perf_counter()
    for _ in range(200):
        spin(n)
    per = (time.perf_counter() - t0) / 200
    return max(0, round(n * seconds / per))


class HandWritten:
    """The least a threaded group commit can be, written by hand, in two designs.

    ``leader``: write under one lock; the first caller not covered syncs (lock released), the others wait on one
    condition, all woken when a sync ends. ``syncer``: a thread of its own syncs; each caller writes under the lock,
    wakes it and waits on a lock of its own, released once a sync covers its line (no herd on one condition).
    ``load``: turns of :func:`spin` before each append (the Python a step runs), 0 for none."""

    def __init__(self, path: Path, line: bytes, design: str = "leader", load: int = 0) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.line = line
        self.load = load
        self.lock = threading.Lock()
        self.synced_cond = threading.Condition(self.lock)
        self.written = self.synced = 0
        self.syncing = False
        self.append = self._leader if design == "leader" else self._parked
        self.parked: list[tuple[int, threading.Lock]] = []
        self.kick = threading.Event()
        if design != "leader":
            threading.Thread(target=self._syncer, daemon=True).start()

    def _leader(self) -> None:
        with self.lock:
            os.write(self.fd, self.line)
            self.written += 1
            end = self.written
            while self.synced < end:
                if self.syncing:
                    self.synced_cond.wait()
                    continue
                self.syncing, target = True, self.written
                self.lock.release()
                try:
                    os.fdatasync(self.fd)
                finally:
                    self.lock.acquire()
                self.synced, self.syncing = max(self.synced, target), False
                self.synced_cond.notify_all()

    def _parked(self) -> None:
        mine = threading.Lock()
        mine.acquire()
        with self.lock:
            os.write(self.fd, self.line)
            self.written += 1
            self.parked.append((self.written, mine))
        self.kick.set()
        mine.acquire()

    def _syncer(self) -> None:
        while True:
            self.kick.wait()
            self.kick.clear()
            with self.lock:
                parked, self.parked = self.parked, []
            if not parked:
                continue
            os.fdatasync(self.fd)
            for _, mine in parked:
                mine.release()

    def run(self, n: int, threads: int) -> float:
        """Seconds per append, ``n`` appends from ``threads`` threads (1: this thread alone)."""
        per = max(1, n // threads)
        load = self.load

        def work() -> None:
            for _ in range(per):
                if load:
                    spin(load)
                self.append()

        t0 = time.perf_counter()
        if threads == 1:
            work()
        else:
            pool = [threading.Thread(target=work) for _ in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
        return (time.perf_counter() - t0) / (per * threads)


def bound(n: int, c: float, f: float) -> float:
    """The most ``n`` in flight can gain over one at a time: ``n`` steps' CPU in turn, then one sync."""
    return n * (c + f) / (n * c + f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=800, help="appends per measurement per round")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--slow-disk-us", type=float, default=0.0, help="emulate a slower disk: add this to every fdatasync")
    args = ap.parse_args()
    if args.slow_disk_us > 0:
        real_fdatasync, extra = os.fdatasync, args.slow_disk_us / 1e6

        def slow_fdatasync(fd: int) -> None:
            real_fdatasync(fd)
            time.sleep(extra)

        os.fdatasync = slow_fdatasync  # before the writers are created: they pick their sync function then
    n = args.n - args.n % THREADS
    tmp = Path(tempfile.mkdtemp(prefix="bench-group-", dir=os.environ.get("BENCH_DIR")))
    try:
        w = JournalWriter(tmp / "writer")
        w.append(record(0))
        line = (tmp / "writer" / "journal.jsonl").read_bytes().splitlines(keepends=True)[-1]
        has_astep = hasattr(Run, "astep")
        run = Run.open(tmp / "sdk")
        run.step("warm", lambda: None)
        seq_run = Run.open(tmp / "sdk-seq")  # never overlapped: its steps take the sequential path
        seq_run.step("warm", lambda: None)
        threaded = Run.open(tmp / "sdk-threads")  # its own run: one in which threads ran never syncs holding the lock
        shm = Path(tempfile.mkdtemp(prefix="bench-group-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        cpu_run = Run.open(shm / "sdk")
        hand = HandWritten(tmp / "hand.jsonl", line)
        sdk_seq(cpu_run, n)  # warm
        c_pre = median([sdk_seq(cpu_run, n) for _ in range(5)])
        load = spin_turns(c_pre)  # the hand-written designs below carry a step's CPU, as the SDK's threads do
        loaded = {d: HandWritten(tmp / f"hand-{d}.jsonl", line, d, load) for d in ("leader", "syncer")}
        free = {d: HandWritten(shm / f"hand-{d}.jsonl", line, d, load) for d in ("leader", "syncer")}  # syncs ~free
        shm_threads = Run.open(shm / "sdk-threads")
        f = Figures()
        for _ in range(args.rounds):  # interleaved: each round takes every figure once
            f.take("floor", lambda: raw_sync_floor(tmp / "raw.jsonl", n, line))
            f.take("seq", lambda: seq_appends(w, n))
            f.take("threads", lambda: thread_appends(w, n))
            f.take("async1", lambda: async_appends(w, n // 4, 1))
            f.take("async16", lambda: async_appends(w, n, THREADS))
            f.take("step", lambda: sdk_seq(seq_run, n // 2))
            f.take("cpu", lambda: sdk_seq(cpu_run, n))
            f.take("hand1", lambda: hand.run(n // 2, 1))
            for d, h in loaded.items():
                f.take(f"{d}1", functools.partial(h.run, n // 4, 1))
            for k in SDK_THREADS:
                f.take(f"threads{k}", functools.partial(sdk_threads, threaded, n, k))
                f.take(f"hand{k}", functools.partial(hand.run, n, k))
                for d, h in loaded.items():
                    f.take(f"{d}{k}", functools.partial(h.run, n, k))
                f.take(f"shm{k}", functools.partial(sdk_threads, shm_threads, n, k))
                for d, h in free.items():
                    f.take(f"shm-{d}{k}", functools.partial(h.run, n, k))
            if has_astep:
                f.take("astep1", lambda: sdk_gather(run, n // 4, gathered=False))
                f.take("astep16", lambda: sdk_gather(run, n, gathered=True))
        w.close()
        run.close()
        threaded.close()
        seq_run.close()
        cpu_run.close()
        shm_threads.close()
        for h in (hand, *loaded.values(), *free.values()):
            os.close(h.fd)
        shutil.rmtree(shm, ignore_errors=True)
        floor = f["floor"]

        def rate(name: str) -> str:
            return f"{1 / f[name]:9,.0f}/s {f[name] * 1e6:7.1f} us each"

        emulated = f"; EMULATED slower disk: fdatasync + {args.slow_disk_us:g} us" if args.slow_disk_us > 0 else ""
        print(f"group commit ({args.rounds} interleaved rounds, median round; {len(line)} B lines; {THREADS} in flight{emulated}):")
        print(f"  floor: raw O_APPEND write + fdatasync     {rate('floor')}")
        print(f"  JournalWriter.append, one thread         {rate('seq')}   {f['seq'] / floor:.2f}x the floor's cost")
        print(f"  {THREADS} threads appending at once            {rate('threads')}   "
              f"{f['seq'] / f['threads']:.1f}x one thread, {floor / f['threads']:.1f}x the floor")
        print(f"  aappend awaited one at a time            {rate('async1')}")
        print(f"  {THREADS} aappend in flight                    {rate('async16')}   "
              f"{f['async1'] / f['async16']:.1f}x one at a time, {floor / f['async16']:.1f}x the floor")
        print(f"  Run.step, sequential                     {rate('step')}   {f['step'] / floor:.2f}x the floor's cost (target <= 1.15x)")
        if has_astep:
            print(f"  run.astep, {THREADS} awaited one at a time      {rate('astep1')}")
            print(
                f"  asyncio.gather of {THREADS} run.astep           {rate('astep16')}   "
                f"{f['astep1'] / f['astep16']:.1f}x one at a time (target >= 10x)"
            )
        else:
            print("  (Run has no astep yet: the SDK figures for asyncio.gather are left out)")
        c = f["cpu"]
        print(f"  bound N(c+f)/(Nc+f): c = {c * 1e6:.1f} us (Run.step on /dev/shm), f = {floor * 1e6:.1f} us (the floor)")
        if has_astep:
            b = bound(THREADS, c, floor)
            gain = f["astep1"] / f["astep16"]
            print(f"  asyncio.gather of {THREADS} run.astep: {gain:.2f}x one at a time, bound {b:.2f}x: {gain / b:.2f} of it")
        for k in SDK_THREADS:
            b = bound(k, c, floor)
            gain = f["step"] / f[f"threads{k}"]
            print(f"  run.step from {k:2d} threads: {rate(f'threads{k}')}   {gain:.2f}x one thread, bound {b:.2f}x: "
                  f"{gain / b:.2f} of it (target >= 0.8); hand-written, {k} threads: {f['hand1'] / f[f'hand{k}']:.2f}x one")
            print(f"      process CPU {median(CPU[k]) * 1e6:.1f} us a step (all threads, user and system: "
                  f"{median(CPU[k]) / f[f'threads{k}']:.2f} of a core on average)")
            for d in loaded:
                g = f[f"{d}1"] / f[f"{d}{k}"]
                print(f"      hand-written {d} with a step's CPU ({c_pre * 1e6:.0f} us of Python before each append): "
                      f"{g:.2f}x one thread: {g / b:.2f} of the bound")
            for label, key in (("run.step", f"shm{k}"), *((f"hand-written {d}", f"shm-{d}{k}") for d in free)):
                t = f[key]
                cap = (c + floor) / max(t, floor / k)  # a step costs t at least, a batch of k one sync at least
                print(f"      {label} from {k} threads on /dev/shm (syncs ~free): t = {t * 1e6:.1f} us a step: "
                      f"at most {cap:.2f}x one at a time, {cap / b:.2f} of the bound")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
