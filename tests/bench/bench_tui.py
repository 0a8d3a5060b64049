"""Benchmark of the TUI on a large journal, driving the real app in tmux and polling the screen.

    .venv/bin/python tests/bench/bench_tui.py [--records 1000000] [--keep DIR] [--repeat 5] [--first-only]
    .venv/bin/python tests/bench/bench_tui.py --live-load 180 --rate 3500   # the dashboard's RSS under a live load

Figures (each against a floor measured in the same run, on the same machine):
- first correct screen of ``agent-supervisor tui RUN`` (the last record and the
  record count on screen) against a minimal Textual app's first screen;
- peak RSS of the TUI process over the whole run (sampled every 10 ms);
- one appended record on screen, and a burst of 10,000 records on screen;
- a search over all records (time to the match count), and a key answered meanwhile.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent.parent
PY = sys.executable
COLS, ROWS = 140, 40
NEEDLE = "Needle-In-The-Haystack"


# --------------------------------------------------------------------------- data
def make_journal(run: Path, n: int) -> int:
    """Write ``n`` SDK-shaped records (about 290 bytes each), a checkpoint every 10,000; return bytes."""
    run.mkdir(mode=0o700, parents=True)
    (run / "checkpoints").mkdir(mode=0o700)
    pad = "x" * 4
    chunks: list[bytes] = []
    size = 0
    with open(run / "journal.jsonl", "wb") as f:
        for i in range(n):
            ts = f"2026-11-29T10:{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d}.{i % 1000:03d}Z"
            if i % 10_000 == 5_000:
                name = f"cp-{i}"
                fname = f"{i // 10_000 + 1:04d}-{name}.json"
                (run / "checkpoints" / fname).write_bytes(
                    orjson.dumps({"name": name, "seq": i, "pos": i, "ts": ts, "format": 1, "state": {"done": i}})
                )
                rec = {"kind": "checkpoint", "name": name, "pos": i, "file": fname, "seq": i, "id": f"b{i:x}", "ts": ts}
            else:
                out = NEEDLE if i == n // 2 else f"result {i} {pad}"
                rec = {
                    "kind": "step", "step": f"work:{i}", "pos": i, "attempt": 1,
                    "inputs": {"args": [f"work:{i}", i]}, "output": out, "dur_ms": 0.113,
                    "key": f"bench:{i}", "state_patch": [{"op": "replace", "path": "/done", "value": i}],
                    "seq": i, "id": f"b{i:x}", "ts": ts,
                }
            line = orjson.dumps(rec) + b"\n"
            chunks.append(line)
            size += len(line)
            if len(chunks) >= 10_000:
                f.write(b"".join(chunks))
                chunks.clear()
        f.write(b"".join(chunks))
    (run / "run.json").write_bytes(orjson.dumps({"id": run.name, "format": 1, "status": "running", "command": ["bench"]}))
    return size


# --------------------------------------------------------------------------- tmux
class Pane:
    """A program in a detached tmux session of a fixed size; the screen is read with capture-pane."""

    cwd = Path(tempfile.gettempdir())
    """Where the programs start: an empty directory (``main`` makes one)."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        self.name = name
        shell = " ".join(_q(c) for c in cmd)
        # started in a directory without a package: 'python -m' puts the working directory first on sys.path,
        # where a source checkout's supervisor/ would win over PYTHONPATH (--before timed this tree, not its own)
        cmdline = ["tmux", "new-session", "-d", "-s", name, "-x", str(COLS), "-y", str(ROWS), "-c", str(Pane.cwd),
                   f"exec env {_env(env)} {shell}"]
        for attempt in range(5):
            self.t0 = time.perf_counter()
            # the server exits with its last session: a new session started just then fails, the next one works
            if subprocess.run(cmdline, capture_output=True).returncode == 0:
                break
            time.sleep(0.2 * (attempt + 1))
        else:
            subprocess.run(cmdline, check=True)
        self.pid = int(subprocess.run(["tmux", "display", "-p", "-t", name, "#{pane_pid}"], capture_output=True, text=True).stdout)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True).stdout

    def wait(self, cond: object, timeout: float = 60.0, what: str = "") -> float:
        """Seconds from now until ``cond(screen)`` holds."""
        t = time.perf_counter()
        while True:
            s = self.screen()
            if cond(s):  # type: ignore[operator]
                return time.perf_counter() - t
            if time.perf_counter() - t > timeout:
                raise SystemExit(f"timed out waiting for {what}; screen was:\n{s}")
            time.sleep(0.005)  # tmux capture-pane costs CPU too: poll at 200 Hz

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _env(env: dict[str, str]) -> str:
    return " ".join(f"{k}={_q(v)}" for k, v in env.items())


class PeakRSS(threading.Thread):
    """Samples a process's RSS every 10 ms and keeps the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.01)


MINIMAL_APP = """
from textual.app import App
from textual.widgets import Static

class Minimal(App):
    def compose(self):
        yield Static("FLOOR-READY")

Minimal().run()
"""


LIVE_WRITER = """
import sys, time
from supervisor import Run

run_dir, seconds, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])

def work(i):
    return {"i": i, "text": f"result {i}"}

with Run.open(run_dir) as run:
    t0 = time.perf_counter()
    i = 0
    while time.perf_counter() - t0 < seconds:
        due = int((time.perf_counter() - t0) * rate) + 1
        while i < due:
            run.step(f"work:{i % 50}", work, i)
            i += 1
        time.sleep(0.002)
    print(f"{i} steps in {time.perf_counter() - t0:.1f} s = {i / (time.perf_counter() - t0):.0f} steps/s", file=sys.stderr)
"""


def live_load(base: Path, env: dict[str, str], seconds: float, rate: float, every: float) -> int:
    """The dashboard on a run the real SDK writes at ``rate`` steps/s for ``seconds``: its RSS every ``every`` s."""
    run = base / "liverun"
    shutil.rmtree(run, ignore_errors=True)
    writer = subprocess.Popen([PY, "-c", LIVE_WRITER, str(run), str(seconds + 5), str(rate)], env={**os.environ, **env})
    deadline = time.perf_counter() + 10
    while not (run / "journal.jsonl").exists():
        if time.perf_counter() > deadline or writer.poll() is not None:
            raise SystemExit("the writer did not start")
        time.sleep(0.01)
    p = Pane(f"bench-tui-load-{os.getpid()}", [PY, "-m", "supervisor", "tui", str(run)], env)
    proc = psutil.Process(p.pid)
    curve: list[tuple[float, float, str]] = []
    try:
        p.wait(lambda s: "records " in s, 30, "the first screen")
        t0 = time.perf_counter()
        nxt = 0.0
        while True:
            now = time.perf_counter() - t0
            if now >= nxt:
                rss = proc.memory_info().rss / 2**20
                screen = p.screen()
                rec = next(
                    (w for line in screen.splitlines() for w in [line.split("records ", 1)[1].split()[0]] if "records " in line), "?"
                )
                curve.append((now, rss, rec))
                print(f"  t={now:5.0f} s  RSS {rss:6.1f} MiB  records on screen {rec}", flush=True)
                nxt += every
                if nxt > seconds:
                    break
            time.sleep(0.2)
    finally:
        p.kill()
        writer.wait(timeout=60)
    first = [r for t, r, _ in curve if t <= 30]
    last = [r for t, r, _ in curve if t >= seconds - 30]
    print(f"\nlive load {rate:.0f} steps/s for {seconds:.0f} s: RSS {curve[0][1]:.1f} MiB at the start, "
          f"{max(first):.1f} MiB at most in the first 30 s, {max(last):.1f} MiB at most in the last 30 s, "
          f"peak {max(r for _, r, _ in curve):.1f} MiB")
    shutil.rmtree(run, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated journal in this directory")
    ap.add_argument("--repeat", type=int, default=3, help="first-screen measurements, floor and dashboard in pairs (the best is reported)")
    ap.add_argument("--first-only", action="store_true", help="only the first screens against the floor (no live session)")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="also time the first screen of the dashboard of another source tree "
                         "(e.g. a 'git archive' of an older commit), in the same rounds")
    ap.add_argument("--live-load", type=float, metavar="SECONDS",
                    help="instead: the dashboard on a run the SDK writes at --rate steps/s for SECONDS; RSS sampled every --every s")
    ap.add_argument("--rate", type=float, default=3500, help="steps/s of --live-load (default 3500)")
    ap.add_argument("--every", type=float, default=10, help="seconds between RSS samples of --live-load (default 10)")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        print("tmux is required", file=sys.stderr)
        return 2
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-tui-"))
    Pane.cwd = base / "cwd"  # empty: nothing there to import
    Pane.cwd.mkdir(parents=True, exist_ok=True)
    if args.live_load:
        env = {"TERM": "xterm-256color", "PYTHONPATH": str(ROOT), "COLUMNS": str(COLS), "LINES": str(ROWS)}
        try:
            return live_load(base, env, args.live_load, args.rate, args.every)
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
    run = base / "bigrun"
    marker = base / "generated.json"
    extra = [p for p in run.glob("journal.*") if p.name not in ("journal.jsonl", "journal.lock")] if run.exists() else []
    if extra or not (run / "journal.jsonl").exists() or not marker.exists() or orjson.loads(marker.read_bytes())["records"] != args.records:
        shutil.rmtree(run, ignore_errors=True)
        t = time.perf_counter()
        size = make_journal(run, args.records)
        marker.write_bytes(orjson.dumps({"records": args.records, "size": size}))
        print(f"generated {args.records} records, {size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s")
    else:
        size = orjson.loads(marker.read_bytes())["size"]
        os.truncate(run / "journal.jsonl", size)  # drop what an earlier benchmark run appended
    n = args.records
    # bytecode caches as an installed package has them (the dev environment may set PYTHONDONTWRITEBYTECODE)
    env = {
        "TERM": "xterm-256color", "PYTHONPATH": str(ROOT), "COLUMNS": str(COLS), "LINES": str(ROWS),
        "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(base / "pycache"),
    }
    subprocess.run(
        [PY, "-c", "import supervisor.cli.main, supervisor.tui.app, supervisor.tui.dashboard"], env={**os.environ, **env}, check=True
    )
    # warm the page cache and Python's bytecode caches so both sides start equal
    (run / "journal.jsonl").read_bytes()
    results: dict[str, float] = {}

    # floor and dashboard in pairs, in turn (the floor first, then the dashboard first): a machine whose load
    # changes during the benchmark weighs on both sides alike
    floor: list[float] = []
    firsts: list[float] = []
    befores: list[float] = []
    last = f"{n - 1:>6} "
    sides = [0, 1, 2] if args.before else [0, 1]
    for k in range(args.repeat):
        for side in sides[k % len(sides):] + sides[: k % len(sides)]:
            if side == 2:  # the same dashboard from another checkout (--before), in the same rounds
                p = Pane(f"bench-before-{os.getpid()}-{k}", [PY, "-m", "supervisor", "tui", str(run)],
                         {**env, "PYTHONPATH": str(args.before.resolve())})
                try:
                    p.wait(lambda s: last in s and f"records {n}" in s)
                    befores.append(time.perf_counter() - p.t0)
                finally:
                    p.kill()
            elif side == 0:
                p = Pane(f"bench-floor-{os.getpid()}-{k}", [PY, "-c", MINIMAL_APP], env)
                try:
                    p.wait(lambda s: "FLOOR-READY" in s)
                    floor.append(time.perf_counter() - p.t0)
                finally:
                    p.kill()
            else:
                p = Pane(f"bench-tui-{os.getpid()}-{k}", [PY, "-m", "supervisor", "tui", str(run)], env)
                try:
                    p.wait(lambda s: last in s and f"records {n}" in s)
                    firsts.append(time.perf_counter() - p.t0)
                finally:
                    p.kill()
    floor_s = min(floor)
    first_s = min(firsts)
    pairs = sorted(t / f for t, f in zip(firsts, floor, strict=False))
    print(f"\njournal: {n} records, {size / 1e6:.0f} MB; terminal {COLS}x{ROWS}; tmux capture-pane polling")
    print(f"floor (minimal Textual app, first screen): {floor_s:.3f} s  (runs: {', '.join(f'{x:.3f}' for x in floor)})")
    print(f"first correct screen:   {first_s:.3f} s  = {first_s / floor_s:.2f} x floor   "
          f"(target <= 1.5 x; runs: {', '.join(f'{x:.3f}' for x in firsts)})")
    print(f"  pair by pair:         median {statistics.median(pairs):.2f} x, worst {pairs[-1]:.2f} x  "
          f"({', '.join(f'{x:.2f}' for x in pairs)})")
    if befores:
        bpairs = sorted(t / f for t, f in zip(befores, floor, strict=False))
        print(f"--before {args.before}: {min(befores):.3f} s = {min(befores) / floor_s:.2f} x floor  "
              f"(runs: {', '.join(f'{x:.3f}' for x in befores)})")
        print(f"  pair by pair:         median {statistics.median(bpairs):.2f} x, worst {bpairs[-1]:.2f} x  "
              f"({', '.join(f'{x:.2f}' for x in bpairs)})")
    if args.first_only:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        return 0

    # the full session: RSS, live appends, a burst, a search
    from supervisor.core.journal_writer import JournalWriter

    p = Pane(f"bench-tui-live-{os.getpid()}", [PY, "-m", "supervisor", "tui", str(run)], env)
    rss = PeakRSS(p.pid)
    rss.start()
    try:
        p.wait(lambda s: last in s)
        p.wait(lambda s: "indexing" not in s, 60)
        results["index_done_s"] = time.perf_counter() - p.t0
        w = JournalWriter(run, durable=False, rotate_bytes=1 << 40)  # no rotation in the middle of a figure
        try:
            one = []
            for k in range(5):
                seq = w.next_seq
                t = time.perf_counter()
                w.append({"kind": "step", "step": f"live:{k}", "output": k})
                p.wait(lambda s, seq=seq: f"{seq} " in s and f"records {seq + 1}" in s, 10)
                one.append(time.perf_counter() - t)
                time.sleep(0.05)
            results["append_one_ms"] = sorted(one)[len(one) // 2] * 1000
            burst = b"".join(
                orjson.dumps(
                    {"kind": "step", "step": f"burst:{i}", "output": i, "seq": w.next_seq + i, "ts": "2026-11-29T11:00:00.000Z"}
                ) + b"\n"
                for i in range(10_000)
            )
            end = w.next_seq + 10_000
            t = time.perf_counter()
            with open(run / "journal.jsonl", "ab") as f:  # one write of 10,000 lines, as a burst reaches the reader
                f.write(burst)
            p.wait(lambda s: f"{end - 1} " in s and f"records {end}" in s, 20)
            results["burst_10k_s"] = time.perf_counter() - t
        finally:
            w.close()
        # search: the needle is in the middle of the journal; exact case first (smart case: an upper-case
        # letter means exact), then in lower case (any case: every region is lowered, the slower path)
        p.keys("/")
        p.wait(lambda s: "search the raw JSON" in s, 5, "the search prompt")
        p.keys(NEEDLE, "Enter")
        t_sent = time.perf_counter()
        p.wait(lambda s: f"1 match for '{NEEDLE}'" in s, 30, "the exact-case match count")
        results["search_exact_s"] = time.perf_counter() - t_sent
        any_case = NEEDLE.lower()
        p.keys("/")
        p.wait(lambda s: "search the raw JSON" in s, 5, "the search prompt")
        p.keys(any_case, "Enter")
        t_sent = time.perf_counter()
        p.wait(lambda s: f"1 match for '{any_case}'" in s, 30, "the any-case match count")
        results["search_any_s"] = time.perf_counter() - t_sent
        # the same search again, with a key pressed while it runs: ? opens the help
        any_case = NEEDLE.lower()[:-1]
        p.keys("/")
        p.wait(lambda s: "search the raw JSON" in s, 5, "the search prompt")
        p.keys(any_case, "Enter")
        t_sent = time.perf_counter()
        p.wait(lambda s: f"searching for '{any_case}'" in s, 10, "the search to start")
        # a key answered while the search runs: ? opens the help
        t_key = time.perf_counter()
        p.keys("?")
        seen: dict[str, float] = {}

        def both(s: str) -> bool:
            now = time.perf_counter()
            if "next / previous row" in s:  # the help screen's first key line
                seen.setdefault("help", now - t_key)
            if f"1 match for '{any_case}'" in s:
                seen.setdefault("match", now - t_sent)
            return len(seen) == 2

        p.wait(both, 30, "the help screen and the match count")
        results["search_s"] = seen["match"]
        results["key_during_search_s"] = seen["help"]
        results["help_before_match"] = float(seen["help"] + (t_key - t_sent) < seen["match"])
        p.keys("q")
    finally:
        rss.stop.set()
        rss.join()
        p.kill()
    print(f"index + scan finished:  {results['index_done_s']:.2f} s after start (in a worker; the UI answers meanwhile)")
    print(f"peak RSS:               {rss.peak / 2**20:.0f} MB   (target <= 120 MB)")
    print(f"one appended record:    {results['append_one_ms']:.0f} ms median of 5 = "
          f"{results['append_one_ms'] / 1000 / floor_s:.3f} x floor  (target <= 60 ms)")
    print(f"burst of 10,000:        {results['burst_10k_s']:.3f} s = {results['burst_10k_s'] / floor_s:.2f} x floor  (target <= 0.15 s)")
    print(f"search, exact case:     {results['search_exact_s']:.3f} s = "
          f"{results['search_exact_s'] / floor_s:.2f} x floor  (target <= 1.0 s)")
    print(f"search, any case:       {results['search_any_s']:.3f} s = {results['search_any_s'] / floor_s:.2f} x floor  (target <= 1.0 s)")
    print(f"search, any case + key: {results['search_s']:.3f} s = "
          f"{results['search_s'] / floor_s:.2f} x floor  (a key pressed while it runs)")
    during = "before" if results["help_before_match"] else "after"
    print(f"key during the search:  {results['key_during_search_s']:.3f} s to open the help ({during} the search finished)")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
