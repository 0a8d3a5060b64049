"""``S`` starts 'supervise' again on a stopped or failed run (a real supervisor and agent), and refuses what it cannot run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.tui.app import make_app
from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.dashboard import DashboardScreen

from ..conftest import ROOT, clean_env
from .conftest import caught_up, until

SIZE = (120, 36)

AGENT = """
import pathlib, sys
from supervisor import Run

flag = pathlib.Path(sys.argv[1])
with Run.open() as run:
    run.step("one", lambda: 1)
    if not flag.exists():
        flag.write_text("failed once")
        sys.exit(78)  # failed for good: the supervisor does not restart it
    run.step("two", lambda: 2)
"""


def _steps(run: Path) -> list[str]:
    data = (run / "journal.jsonl").read_bytes()
    return [r["step"] for r in map(orjson.loads, data[: data.rfind(b"\n") + 1].splitlines()) if r.get("kind") == "step"]


def notes(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pytest.mark.timeout(120)
async def test_start_again_on_a_failed_run_resumes_it(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    run = tmp_path / "runs" / "once"
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q", "--",
         sys.executable, str(agent), str(tmp_path / "flag")],
        cwd=ROOT, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
    )
    assert done.returncode == 1, done.stderr  # failed
    assert _steps(run) == ["one"]
    app = make_app(run)
    proc: subprocess.Popen[bytes] | None = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: caught_up(app), what="scan")
            d = app.screen
            assert isinstance(d, DashboardScreen)
            await until(pilot, lambda: d.status.state == "failed", what="failed status")
            await pilot.press("R")  # no supervisor: R says so and points at S
            await until(pilot, lambda: any("S starts it again" in n for n in notes(app)), what="R hint")
            await pilot.press("S")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="S asks first")
            assert str(agent) in app.screen.body_text and "failed" in app.screen.body_text
            await pilot.press("n")
            assert d._start_proc is None and not (run.parent / f".{run.name}.supervise-output.log").exists()
            await pilot.press("S", "y")
            await until(pilot, lambda: any("started again" in n or "did not start" in n for n in notes(app)), what="started")
            assert any("started again: supervisor pid" in n for n in notes(app)), notes(app)
            proc = d._start_proc  # None if it already ran to its end and was reaped
            assert (run / "supervisor.jsonl").read_bytes().count(b'"supervisor-start"') == 2
            # the agent resumes: "one" is served from the journal, "two" runs; the run succeeds
            await until(pilot, lambda: d.status.state == "succeeded" and not d.status.live, timeout=60, what="succeeded")
            assert _steps(run) == ["one", "two"]
            await until(pilot, lambda: any(isinstance(e, dict) and e.get("step") == "two"
                                           for e in (d.model.entry(s) for s in range(d.model.count))), what="row of two")
            if proc is not None:
                assert proc.wait(30) == 0
            await until(pilot, lambda: d._start_proc is None, what="the exited supervisor reaped")
            assert "S" not in {k for k, ab in d.active_bindings.items() if ab.binding.show and ab.enabled}
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_start_again_refuses_a_redacted_command_and_a_succeeded_run(tmp_path: Path) -> None:
    run = tmp_path / "secret"
    run.mkdir(mode=0o700)
    (run / "journal.jsonl").write_bytes(orjson.dumps({"kind": "step", "step": "a", "output": 1, "seq": 0}) + b"\n")
    meta = {"id": "secret", "format": 1, "status": "stopped", "cwd": str(tmp_path),
            "command": [sys.executable, "agent.py", "--api-key", "[REDACTED]"]}
    (run / "run.json").write_bytes(orjson.dumps(meta))
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app) and app.screen.status.state == "stopped", what="stopped")  # type: ignore[attr-defined]
        await pilot.press("S")
        await until(pilot, lambda: any("had secrets redacted" in n for n in notes(app)), what="refusal")
        assert not isinstance(app.screen, ConfirmScreen)
        msg = next(n for n in notes(app) if "redacted" in n)
        assert "\n" not in msg and f"agent-supervisor supervise --run-dir {run} -- CMD" in msg
    meta.update(status="succeeded", command=[sys.executable, "agent.py"])
    (run / "run.json").write_bytes(orjson.dumps(meta))
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app) and app.screen.status.state == "succeeded", what="succeeded")  # type: ignore[attr-defined]
        await pilot.press("S")  # not offered, and does nothing
        assert not isinstance(app.screen, ConfirmScreen)
