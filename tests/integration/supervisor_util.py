"""Helpers for the supervisor tests: start ``agent-supervisor supervise`` as a real process and watch it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from supervisor.core.events import read_events
from supervisor.errors import ControlUnavailable
from supervisor.supervise.control import ControlClient

from ..conftest import ROOT, SAMPLE_AGENT, clean_env, wait_for

MINIMAL_AGENT = ROOT / "sample_runs" / "minimal_agent.py"
TEST_AGENT = Path(__file__).resolve().parent / "supervisor_agent.py"
PY = sys.executable


def research(*args: str) -> list[str]:
    return [PY, str(SAMPLE_AGENT), *args]


def helper_agent(*args: str) -> list[str]:
    return [PY, str(TEST_AGENT), *args]


class Supervised:
    """A ``supervise`` process; its stdout/stderr go to files (a full pipe would stall it)."""

    def __init__(self, run_dir: Path, cmd: list[str] | None, *opts: str, env: dict[str, str] | None = None,
                 out_dir: Path | None = None) -> None:
        self.run_dir = run_dir
        self.out_path = (out_dir or run_dir.parent) / f"{run_dir.name}.sup-{os.urandom(3).hex()}.out"
        self.err_path = self.out_path.with_suffix(".err")
        argv = [PY, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), *opts]
        if cmd is not None:
            argv += ["--", *cmd]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env or clean_env(), cwd=ROOT
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        evs = read_events(self.run_dir)
        return [e for e in evs if name is None or e.get("event") == name]

    def status(self) -> dict[str, Any]:
        return ControlClient(self.run_dir, timeout=5.0).request({"cmd": "status"})

    def try_status(self) -> dict[str, Any]:
        """The status, or ``{}`` while the supervisor is not listening yet."""
        try:
            return self.status()
        except ControlUnavailable:
            return {}

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        return ControlClient(self.run_dir, timeout=20.0).request(req)

    def wait_event(self, name: str, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
        return wait_for(lambda: (lambda evs: evs if len(evs) >= count else None)(self.events(name)),
                        timeout=timeout, what=f"{count} {name!r} event(s); stderr: {self.stderr()[-500:]}")  # type: ignore[return-value]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> Supervised:
        return self

    def __exit__(self, *exc: object) -> None:
        # never leave a supervisor (and so an agent) behind a failed test
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone


def guardian_of(sup_pid: int) -> int:
    """The pid of a supervisor's guardian process (its child running ``guardian.py``)."""

    def find() -> int | None:
        try:
            kids = psutil.Process(sup_pid).children()
        except psutil.Error:
            return None
        for k in kids:
            try:
                if any(a.endswith("guardian.py") for a in k.cmdline()):
                    return k.pid
            except psutil.Error:
                continue
        return None

    return int(wait_for(find, timeout=10, what="the guardian process"))  # type: ignore[arg-type]


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (the test is skipped where none can be mounted)."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def kept_full(path: Path) -> Iterator[None]:
    """Fill the filesystem of ``path`` and keep it full (space freed meanwhile is taken again) until the block ends."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    stop = threading.Event()

    def fill() -> None:
        while not stop.is_set():
            try:
                os.write(fd, b"\0" * 512)
            except OSError:
                stop.wait(0.002)

    t = threading.Thread(target=fill, daemon=True)
    t.start()
    try:
        wait_for(lambda: shutil.disk_usage(path.parent).free < 4096, timeout=10, what="the disk full")
        yield
    finally:
        stop.set()
        t.join()
        os.close(fd)
        path.unlink()
