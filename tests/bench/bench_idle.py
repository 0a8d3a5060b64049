"""Benchmark of what idling costs: the dashboard on a finished run, and ``status`` of a run with usage.

    .venv/bin/python tests/bench/bench_idle.py [--seconds 20] [--repeat 7] [--only idle|status]

Figures (each against a floor measured in the same run, on the same machine):
- CPU time of ``agent-supervisor tui RUN`` on a finished run, idle in a real terminal (a pty) for ``--seconds``
  after its first screen, beside a minimal Textual app (an ``App`` with one ``Static``) in the same kind of
  terminal, measured the same way; then both again with the command palette open (ctrl+p: a blinking cursor);
- ``agent-supervisor status`` of a run that recorded usage (so it prints a cost) against the same command on
  the same run without its usage, as whole processes: the median of ``--repeat`` runs each, interleaved (the
  price cache filled by a first run, whose time is printed too).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent.parent
PY = sys.executable
COLS, ROWS = 140, 40

MINIMAL_APP = """
from textual.app import App
from textual.widgets import Static

class Minimal(App):
    def compose(self):
        yield Static("minimal app: READY")

Minimal().run()
"""


class Pty:
    """A program on the slave side of a fresh pty of ``COLS`` x ``ROWS``; its output is read (and kept) by a
    thread, as a terminal would, so the program never blocks on a full pty buffer."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                     start_new_session=True)
        os.close(slave)
        self.master = master
        self.out = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self.out += data

    def seen(self, text: bytes) -> bool:
        with self._lock:
            return text in self.out

    def wait_for(self, text: bytes, timeout: float = 60.0) -> None:
        t0 = time.monotonic()
        while not self.seen(text):
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                with self._lock:
                    tail = bytes(self.out[-2000:])
                raise SystemExit(f"{text!r} never came (exit {self.proc.poll()}); output ended with {tail!r}")
            time.sleep(0.05)

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def cpu(self) -> float:
        """The process's CPU seconds so far (user + system, all its threads)."""
        t = psutil.Process(self.proc.pid).cpu_times()
        return float(t.user + t.system)

    def close(self) -> None:
        try:
            self.proc.terminate()
            self.proc.wait(5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def idle_cpu(p: Pty, seconds: float) -> float:
    """Percent of a core that ``p`` used over ``seconds`` of idling."""
    c0, t0 = p.cpu(), time.monotonic()
    time.sleep(seconds)
    used = 100.0 * (p.cpu() - c0) / (time.monotonic() - t0)
    if p.proc.poll() is not None or p.seen(b"Traceback"):
        with p._lock:
            tail = bytes(p.out[-3000:])
        raise SystemExit(f"the program died or failed while idling (exit {p.proc.poll()}): {tail!r}")
    return used


def start(cmd: list[str], ready: bytes, env: dict[str, str], cwd: Path, settle: float) -> Pty:
    p = Pty(cmd, env, cwd)
    p.wait_for(ready)
    time.sleep(settle)  # the start's workers (scan, reads, watcher import) are done: idling from here
    return p


def bench_idle(base: Path, seconds: float, env: dict[str, str]) -> None:
    run = base / "finished"
    shutil.copytree(ROOT / "sample_runs" / "runs" / "clean", run)
    meta = orjson.loads((run / "run.json").read_bytes())
    assert meta.get("status") in ("succeeded", "failed", "stopped"), meta
    app_py = base / "minimal_app.py"
    app_py.write_text(MINIMAL_APP)
    cwd = base / "cwd"
    cwd.mkdir()
    tui = [PY, "-m", "supervisor.cli.main", "tui", str(run)]
    print(f"idle CPU over {seconds:.0f} s in a {COLS}x{ROWS} pty, after the first screen (percent of one core)")
    rows: list[tuple[str, float, float]] = []
    for palette in (False, True):
        got = []
        for cmd, ready in ((tui, meta["id"].encode()), ([PY, str(app_py)], b"READY")):
            p = start(cmd, ready, env, cwd, settle=3.0)
            try:
                if palette:
                    p.send(b"\x10")  # ctrl+p
                    time.sleep(1.0)
                got.append(idle_cpu(p, seconds))
            finally:
                p.close()
        rows.append(("palette open" if palette else "idle", got[0], got[1]))
    for what, dash, floor in rows:
        ratio = dash / floor if floor > 0 else float("inf")
        print(f"  {what:13s} dashboard {dash:6.3f} %   minimal Textual app {floor:6.3f} %   ratio {ratio:5.2f}x")


def _status_once(run: Path, env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([PY, "-m", "supervisor.cli.main", "status", str(run)], env=env, cwd=cwd, capture_output=True)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(r.stderr.decode())
    return took


def bench_status(base: Path, repeat: int, env: dict[str, str]) -> None:
    with_usage = base / "usage"
    r = subprocess.run([PY, str(ROOT / "tests" / "integration" / "usage_agent.py"), str(with_usage)],
                       env=env, capture_output=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr.decode())
    without = base / "no-usage"
    shutil.copytree(with_usage, without)
    lines = (without / "journal.jsonl").read_bytes().splitlines(keepends=True)
    (without / "journal.jsonl").write_bytes(b"".join(_no_usage(line) for line in lines))
    cwd = base / "cwd-status"
    cwd.mkdir()
    cold = _status_once(with_usage, env, cwd)  # the first on this machine: genai-prices fills the price cache
    shown = subprocess.run([PY, "-m", "supervisor.cli.main", "status", str(with_usage)], env=env, cwd=cwd,
                           capture_output=True, text=True).stdout
    assert "$" in shown, shown  # the figure is a cost: the prices were needed
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        a.append(_status_once(with_usage, env, cwd))
        b.append(_status_once(without, env, cwd))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"status, median of {repeat} whole processes each")
    print(f"  run with usage (prints a cost) {ma * 1000:6.1f} ms   same run without usage {mb * 1000:6.1f} ms"
          f"   ratio {ma / mb:4.2f}x")
    print(f"  (the first with usage, its models not in the price cache yet: {cold * 1000:.1f} ms, {cold / mb:4.2f}x)")


def _no_usage(line: bytes) -> bytes:
    if not line.strip():
        return line
    rec = orjson.loads(line)
    rec.pop("usage", None)
    return orjson.dumps(rec) + b"\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", choices=("idle", "status"))
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}
    env.update(TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS), PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        env["XDG_CONFIG_HOME"] = str(base / "config")  # the TUI's settings: a fresh default
        env["XDG_CACHE_HOME"] = str(base / "cache")  # an empty price cache: the first status fills it
        if args.only != "status":
            bench_idle(base, args.seconds, env)
        if args.only != "idle":
            bench_status(base, args.repeat, env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
