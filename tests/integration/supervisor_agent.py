"""Misbehaving agents for the supervisor tests (run as real processes).

    grandchildren N crash|sleep  start N grandchildren (one leaves the session), write their pids, then exit 1 or sleep
    tree crash|sleep|exit        a setsid child that starts its own setsid child, and a double-forked daemon with a
                                 cleared environment; their pids in tree.txt; then exit 1, sleep or exit 0
    lockholder SECONDS           take the journal like an agent run by hand (the SDK, no supervisor): steps, then exit
    crashloop                    SDK steps a, checkpoint cp, step b, then a hard crash, every attempt
    hog MB                       hold MB of memory on the first attempt, then sleep; later attempts exit 0
    bench N                      append one journal step and exit 1, until N steps: exit 0 (restart benchmark)
    rate N PER_S                 commit N SDK steps at PER_S steps a second (CPU benchmark)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

RUN_DIR = Path(os.environ.get("AGENT_SUPERVISOR_RUN_DIR", "."))
ATTEMPT = int(os.environ.get("AGENT_SUPERVISOR_ATTEMPT", "1"))


def append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def grandchildren(n: int, then: str) -> int:
    if ATTEMPT > 1:
        print("grandchildren: resumed, done", flush=True)
        return 0
    sleeper = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]
    pids = []
    for i in range(n):
        # the last one leaves the process group and session, as a daemon would
        p = subprocess.Popen(sleeper, start_new_session=(i == n - 1), stdin=subprocess.DEVNULL)
        pids.append(p.pid)
    append(RUN_DIR / "grandchildren.txt", " ".join(map(str, pids)))
    print(f"grandchildren: started {pids}", flush=True)
    if then == "crash":
        os._exit(1)
    while True:
        time.sleep(1)


_CHAIN = """
import os, subprocess, sys, time
b = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"], start_new_session=True)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, f"{os.getpid()} {b.pid}\\n".encode())
while True:
    time.sleep(1)
"""
_DAEMON = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, f"{os.getpid()}\\n".encode())
while True:
    time.sleep(1)
"""


def tree(then: str) -> int:
    if ATTEMPT > 1:
        print("tree: resumed, done", flush=True)
        return 0
    out = str(RUN_DIR / "tree.txt")
    subprocess.Popen([sys.executable, "-c", _CHAIN, out], start_new_session=True, stdin=subprocess.DEVNULL)
    # the daemon: its own session, no environment at all, its parent gone: nothing points to us
    subprocess.run([sys.executable, "-c", _DAEMON, out], env={}, start_new_session=True, stdin=subprocess.DEVNULL,
                   check=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if len(Path(out).read_text().split()) >= 3:
                break
        except FileNotFoundError:
            pass  # the daemons have not written their pids yet: look again
        time.sleep(0.02)
    print(f"tree: started {Path(out).read_text().split()}", flush=True)
    if then == "crash":
        os._exit(1)
    if then == "exit":
        return 0
    while True:
        time.sleep(1)


def lockholder(seconds: float) -> int:
    """An agent run by hand on the run directory: it holds the journal lock and commits steps."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
    from supervisor import Run

    with Run.open() as run:
        append(RUN_DIR / "lockholder.txt", str(os.getpid()))
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            run.step(f"other:{i}", lambda i: i, i)
            i += 1
            time.sleep(0.02)
    return 0


def hog(mb: int) -> int:
    if ATTEMPT > 1:
        return 0
    block = bytearray(mb * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    print(f"hog: holding {mb} MB", flush=True)
    while True:
        time.sleep(1)


def bench(n: int) -> int:
    t = time.time()
    journal = RUN_DIR / "journal.jsonl"
    try:
        done = journal.read_bytes().count(b"\n")
    except FileNotFoundError:
        done = 0
    append(RUN_DIR / "bench_starts.txt", repr(t))
    if done >= n:
        return 0
    append(journal, f'{{"step": "s{done}", "output": {done}}}')
    time.sleep(float(os.environ.get("BENCH_LIVE_MS", "0")) / 1000)  # an agent that runs a while before it crashes
    append(RUN_DIR / "bench_exits.txt", repr(time.time()))
    return 1


def rate(n: int, per_s: float) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
    from supervisor import Run

    with Run.open() as run:
        t0 = time.monotonic()
        for i in range(n):
            run.step(f"s{i}", lambda i: i, i)
            delay = t0 + (i + 1) / per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return 0


def crashloop() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
    from supervisor import Run

    with Run.open() as run:
        run.step("a", lambda: 1)
        run.checkpoint("cp")
        run.step("b", lambda: 2)
        print(f"crashloop: attempt {ATTEMPT}, rollbacks {len(run.rollbacks)}, crashing", file=sys.stderr, flush=True)
        os._exit(1)


def main() -> int:
    mode, *rest = sys.argv[1:]
    rest = [a for a in rest if a != "--resume"]
    if mode == "grandchildren":
        return grandchildren(int(rest[0]), rest[1])
    if mode == "crashloop":
        return crashloop()
    if mode == "tree":
        return tree(rest[0])
    if mode == "lockholder":
        return lockholder(float(rest[0]))
    if mode == "hog":
        return hog(int(rest[0]))
    if mode == "bench":
        return bench(int(rest[0]))
    if mode == "rate":
        return rate(int(rest[0]), float(rest[1]))
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    raise SystemExit(main())
