"""Benchmark of live follow: one appended record, from the write to the screen, beside ``tail -F`` and lnav.

    .venv/bin/python tests/bench/bench_follow.py [--records 10000] [--repeat 20] [--idle 10]
    .venv/bin/python tests/bench/bench_follow.py --supervised [--repeat 20]

Each program runs in its own tmux pane and follows its own copy of the same journal; one SDK-shaped line is
appended to each in turn (one ``write``), and the time until it is on the pane is taken by polling
``capture-pane`` every 2 ms. ``tail -F`` is the floor (it sleeps on inotify and prints the line); lnav is printed
when installed. Then the dashboard's CPU over ``--idle`` seconds with nothing appended, on the followed run and on
a finished one (psutil ``cpu_times``), beside the floor's.

``--supervised``: a run under ``agent-supervisor supervise`` whose SDK agent runs one step per trigger; the three
follow its journal (the dashboard also its control socket, events and agent log), timed from the agent's step call.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent.parent))
from bench_tui import COLS, PY, ROOT, ROWS, Pane, make_journal

from supervisor.core.journal_writer import JournalWriter

POLL_S = 0.002

AGENT = """
import os, sys, time
from supervisor import Run

fifo, stamps = sys.argv[1], sys.argv[2]
with Run.open() as run, open(fifo, "rb", buffering=0) as trigger, open(stamps, "a") as out:
    k = 0
    while (b := trigger.read(1)) and b != b"q":
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: the same clock as the benchmark's
        run.step(f"live:{k}", lambda i: i * i, k)
        out.write(f"{k} {t0}\\n")
        out.flush()
        k += 1
"""


def _line(seq: int, tag: str) -> bytes:
    rec = {"kind": "step", "step": f"live:{tag}", "pos": seq, "attempt": 1, "inputs": {"args": [tag]},
           "output": f"out-{tag}", "dur_ms": 0.1, "key": f"live:{tag}", "seq": seq, "id": f"l{seq:x}",
           "ts": "2026-11-29T11:00:00.000Z"}
    return orjson.dumps(rec) + b"\n"


def _row(s: str, seq: int) -> bool:
    """Whether the dashboard's screen has the row of ``seq`` and counts it in the status bar."""
    return f"records {seq + 1}" in s and any(line.split()[:1] == [str(seq)] for line in s.splitlines())


def _append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _time_to_screen(p: Pane, path: Path, data: bytes, cond: Callable[[str], bool]) -> float:
    """Seconds from one append of ``data`` to ``path`` until ``cond(screen)`` holds (capture-pane every 2 ms)."""
    t = time.perf_counter()
    _append(path, data)
    while True:
        s = p.screen()
        now = time.perf_counter()
        if cond(s):
            return now - t
        if now - t > 10:
            raise SystemExit(f"{p.name}: the appended line did not appear in 10 s; screen was:\n{s}")
        time.sleep(POLL_S)


def _cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _idle_cpu(pid: int, seconds: float) -> float:
    """Percent of a core the process (and its threads) used over ``seconds`` with nothing happening."""
    c0, t0 = _cpu(pid), time.perf_counter()
    time.sleep(seconds)
    return 100 * (_cpu(pid) - c0) / (time.perf_counter() - t0)


def _fmt(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1000:6.1f} ms, {xs[0] * 1000:5.1f} to {xs[-1] * 1000:5.1f} ms"


def supervised(repeat: int) -> int:
    """A live run under ``supervise``: each trigger makes the agent run one SDK step; the dashboard, ``tail -F``
    and lnav all follow its journal, one of them timed per step (in turn), from the agent's step call."""
    base = Path(tempfile.mkdtemp(prefix="bench-follow-sup-"))
    Pane.cwd = base / "cwd"
    Pane.cwd.mkdir()
    (base / "home").mkdir()
    env = {"TERM": "xterm-256color", "PYTHONPATH": str(ROOT), "COLUMNS": str(COLS), "LINES": str(ROWS),
           "HOME": str(base / "home")}
    run, fifo, stamps, agent = base / "run", base / "trigger", base / "stamps", base / "agent.py"
    os.mkfifo(fifo)
    agent.write_text(AGENT)
    sup = subprocess.Popen([PY, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q", "--", PY, str(agent),
                            str(fifo), str(stamps)], cwd=Pane.cwd, env={**os.environ, **env},
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    panes: list[Pane] = []
    trig = os.open(fifo, os.O_WRONLY)  # blocks until the agent opened it
    try:
        journal = run / "journal.jsonl"
        panes.append(Pane(f"follow-tui-{os.getpid()}", [PY, "-m", "supervisor", "tui", str(run)], env))
        panes.append(Pane(f"follow-tail-{os.getpid()}", ["tail", "-F", "-n", "5", str(journal)], env))
        names = ["dashboard", "tail -F"]
        if shutil.which("lnav"):
            panes.append(Pane(f"follow-lnav-{os.getpid()}", [str(shutil.which("lnav")), str(journal)], env))
            names.append("lnav")
        panes[0].wait(lambda s: "running" in s and "indexing" not in s, 30, "the dashboard")
        time.sleep(1.0)
        times: dict[str, list[float]] = {name: [] for name in names}
        for k in range(repeat * len(names)):
            i = k % len(names)
            t = time.perf_counter()
            os.write(trig, b"g")
            mark = f'"live:{k}"'
            while True:
                s = panes[i].screen()
                now = time.perf_counter()
                if (_row_named(s, f"live:{k}") and f"steps {k + 1} " in s) if i == 0 else mark in s:
                    break
                if sup.poll() is not None or now - t > 10:
                    raise SystemExit(f"{names[i]}: step {k} not on screen in 10 s; screen was:\n{s}")
                time.sleep(POLL_S)
            lines = _wait_lines(stamps, k + 1)
            times[names[i]].append(now - float(lines[k].split()[1]))
            time.sleep(0.05)
        print(f"\nsupervised SDK agent, {repeat} steps timed per program (in turn, all following one journal); "
              f"terminal {COLS}x{ROWS}; capture-pane every {POLL_S * 1000:.0f} ms; from the agent's step call")
        floor = statistics.median(times["tail -F"])
        for name in ["tail -F", "dashboard", "lnav"]:
            if times.get(name):
                print(f"{name:10} {_fmt(times[name])}  = {statistics.median(times[name]) / floor:5.1f} x tail -F")
    finally:
        os.write(trig, b"q")
        os.close(trig)
        for p in panes:
            p.kill()
        try:
            sup.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, 9)
        shutil.rmtree(base, ignore_errors=True)
    return 0


def _row_named(s: str, step: str) -> bool:
    """Whether a row of the dashboard's screen shows the step ``step``."""
    return any(step in line.split() for line in s.splitlines())


def _wait_lines(path: Path, n: int) -> list[str]:
    """The agent's first ``n`` stamps (``k t0``), waited for up to 10 s."""
    deadline = time.perf_counter() + 10
    while time.perf_counter() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n:
            return lines
        time.sleep(0.001)
    raise SystemExit(f"{path}: the agent wrote no stamp {n}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000, help="records in the journal before the appends")
    ap.add_argument("--repeat", type=int, default=20, help="appends per program")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measured (0: none)")
    ap.add_argument("--supervised", action="store_true",
                    help="instead: a supervised SDK agent runs one step per trigger; the three follow its journal, "
                         "timed from the agent's step call")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        print("tmux is required", file=sys.stderr)
        return 2
    if args.supervised:
        return supervised(args.repeat)
    base = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    Pane.cwd = base / "cwd"
    Pane.cwd.mkdir()
    (base / "home").mkdir()
    env = {"TERM": "xterm-256color", "PYTHONPATH": str(ROOT), "COLUMNS": str(COLS), "LINES": str(ROWS),
           "HOME": str(base / "home")}
    run = base / "run"
    make_journal(run, args.records)
    journal = run / "journal.jsonl"
    tail_file = base / "tail.jsonl"
    shutil.copyfile(journal, tail_file)
    lnav = shutil.which("lnav")
    lnav_file = base / "lnav.jsonl"
    panes: list[Pane] = []
    # an agent holds the journal lock while it runs: the run is "running" (not crashed) without a supervisor
    writer = JournalWriter(run, durable=False, rotate_bytes=1 << 40)
    try:
        tui = Pane(f"follow-tui-{os.getpid()}", [PY, "-m", "supervisor", "tui", str(run)], env)
        panes.append(tui)
        tail = Pane(f"follow-tail-{os.getpid()}", ["tail", "-F", "-n", "5", str(tail_file)], env)
        panes.append(tail)
        lnv: Pane | None = None
        if lnav:
            shutil.copyfile(journal, lnav_file)
            lnv = Pane(f"follow-lnav-{os.getpid()}", [lnav, str(lnav_file)], env)
            panes.append(lnv)
        n = args.records
        tui.wait(lambda s: _row(s, n - 1), 60, "the dashboard's first screen")
        tui.wait(lambda s: "indexing" not in s, 60, "the dashboard's index")
        tail.wait(lambda s: f'"work:{n - 1}"' in s, 10, "tail's first screen")
        if lnv is not None:
            lnv.wait(lambda s: f'"work:{n - 1}"' in s, 20, "lnav's first screen")
        time.sleep(1.0)  # every program settled (the dashboard's first reads, lnav's indexing)
        times: dict[str, list[float]] = {"tail -F": [], "dashboard": [], "lnav": []}
        for k in range(args.repeat):
            seq = n + k
            times["tail -F"].append(_time_to_screen(tail, tail_file, _line(seq, f"t{k}"), lambda s, k=k: f"live:t{k}" in s))
            time.sleep(0.05)
            times["dashboard"].append(_time_to_screen(
                tui, journal, _line(seq, f"d{k}"), lambda s, seq=seq: _row(s, seq)))
            time.sleep(0.05)
            if lnv is not None:
                times["lnav"].append(_time_to_screen(lnv, lnav_file, _line(seq, f"n{k}"), lambda s, k=k: f"live:n{k}" in s))
                time.sleep(0.05)
        print(f"\njournal: {n} records before; {args.repeat} appends of one line each; terminal {COLS}x{ROWS}; "
              f"capture-pane every {POLL_S * 1000:.0f} ms")
        floor = statistics.median(times["tail -F"])
        for name, xs in times.items():
            if xs:
                print(f"{name:10} {_fmt(xs)}  = {statistics.median(xs) / floor:5.1f} x tail -F")
        if lnv is None:
            print("lnav: not installed")
        if args.idle > 0:
            time.sleep(0.5)
            print(f"\nidle CPU over {args.idle:.0f} s (percent of a core), nothing appended:")
            print(f"  tail -F:                      {_idle_cpu(tail.pid, args.idle):5.2f} %")
            print(f"  dashboard, followed run:      {_idle_cpu(tui.pid, args.idle):5.2f} %")
            writer.close()  # the agent is gone and run.json says how it ended
            raw = orjson.loads((run / "run.json").read_bytes())
            (run / "run.json").write_bytes(orjson.dumps({**raw, "status": "succeeded"}))
            done = Pane(f"follow-done-{os.getpid()}", [PY, "-m", "supervisor", "tui", str(run)], env)
            panes.append(done)
            done.wait(lambda s: "indexing" not in s and f"records {n + args.repeat}" in s, 60, "the finished run")
            time.sleep(1.0)
            print(f"  dashboard, finished run:      {_idle_cpu(done.pid, args.idle):5.2f} %")
    finally:
        writer.close()
        for p in panes:
            p.kill()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
