"""Shared fixtures: paths, a polling wait helper, and the sample agent as a real process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_AGENT = ROOT / "sample_runs" / "research_agent.py"


@pytest.fixture(autouse=True)
def _own_config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test gets an empty config directory: the dashboard's saved settings (theme, layout, time format)
    of whoever runs the suite must not change what a test sees, and no test may write the user's. The same
    for the cache (the price table's copy)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


_MYPY: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []


def start_mypy() -> None:
    """Start ``mypy --strict supervisor`` in the background, niced, once (``mypy_verdict`` collects it)."""
    if _MYPY:
        return
    out = tempfile.NamedTemporaryFile(prefix="mypy-", suffix=".txt")  # closed by mypy_verdict
    proc = subprocess.Popen(
        niced([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", "/dev/null", "supervisor"]),
        stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
    )
    _MYPY.append((proc, out))


def mypy_verdict(timeout: float) -> tuple[int, str]:
    """mypy's exit code and output (started now if ``start_mypy`` was not called at collection)."""
    start_mypy()
    proc, out = _MYPY[0]
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"mypy did not finish in {timeout}s")
    out.seek(0)
    return code, out.read().decode(errors="replace")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Slow preparations start once the selection is known, beside the tests: a test module that defines
    ``start_at_collection()`` has it called once if any of its tests is selected (mypy, a wheel's install)."""
    seen: set[object] = set()
    for item in session.items:
        mod = getattr(item, "module", None)
        start = getattr(mod, "start_at_collection", None)
        if start is not None and mod not in seen:
            seen.add(mod)
            start()


def pytest_unconfigure(config: pytest.Config) -> None:
    for proc, out in _MYPY:
        if proc.poll() is None:  # a run stopped early: no mypy left behind
            proc.kill()
            proc.wait()
        out.close()


def niced(argv: list[str]) -> list[str]:
    """A background preparation's command, run at a lower priority: the tests' own processes go first.
    (Through ``nice(1)``, not a ``preexec_fn``: that is unsafe in a process with threads.)"""
    nice = shutil.which("nice")
    return [nice, "-n", "10", *argv] if nice else argv


def attempts(timeout: float, what: str) -> Iterator[int]:
    """Count the tries of a wait loop; fail the test once ``timeout`` seconds have passed (both wait helpers)."""
    deadline = time.monotonic() + timeout
    n = 0
    while True:
        yield n
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        n += 1


def wait_for(cond: Callable[[], object], timeout: float = 30.0, interval: float = 0.02, what: str = "condition") -> object:
    """Poll ``cond`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    for _ in attempts(timeout, what):
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("unreachable: attempts() fails the test")


def clean_env() -> dict[str, str]:
    """The environment without any supervisor variables inherited from an outer run."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}


def run_agent(run_dir: Path, *args: str, timeout: float = 30.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the sample research agent on ``run_dir`` as a real child process."""
    return subprocess.run(
        [sys.executable, str(SAMPLE_AGENT), "--run-dir", str(run_dir), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
        cwd=ROOT,
    )


def run_cli(*args: str, timeout: float = 30.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``agent-supervisor`` as a real process (``python -m supervisor``)."""
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
        cwd=cwd or ROOT,
    )
