"""Shared fixtures: paths, a polling wait helper, and the sample agent as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_AGENT = ROOT / "sample_runs" / "research_agent.py"


@pytest.fixture(autouse=True)
def _own_config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test gets an empty config directory: the dashboard's saved settings (theme, layout, time format)
    of whoever runs the suite must not change what a test sees, and no test may write the user's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


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
