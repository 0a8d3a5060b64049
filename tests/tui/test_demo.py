"""``agent-supervisor demo``: the supervised sample agent, detached, stopped when the dashboard quits."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from supervisor.cli.tui_cmds import demo_command, start_demo, stop_demo
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen

from ..conftest import wait_for
from .conftest import until


def test_demo_command_is_the_documented_one(tmp_path: Path) -> None:
    cmd = demo_command(tmp_path / "r")
    assert cmd[1:7] == ["-m", "supervisor", "supervise", "--run-dir", str(tmp_path / "r"), "-q"]
    assert cmd[7] == "--" and cmd[9:11] == ["-m", "supervisor.demo_agent"]  # in the package: any install has it
    assert cmd[11:] == ["--crash-in", "search:q2", "--step-delay", "0.4"]


@pytest.mark.timeout(90)
async def test_demo_crashes_once_resumes_and_stops_on_quit(tmp_path: Path) -> None:
    proc, run = start_demo(tmp_path / "runs", step_delay=0.05)
    try:
        assert run.parent == tmp_path / "runs" and proc.poll() is None
        app = make_app(run)
        async with app.run_test(size=(120, 36)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, DashboardScreen), what="dashboard")
            d: DashboardScreen = app.screen  # type: ignore[assignment]

            def crashed_and_resumed() -> bool:
                evs = [e.data for e in d.model.events]
                return any(e.get("event") == "exit" and e.get("code") == 1 for e in evs) and 2 in d.model.start_seqs

            await until(pilot, crashed_and_resumed, 40, what="crash and resume on screen")
        # the app quit: the demo's supervisor is stopped, the run directory stays
        stop_demo(proc, run)
        assert proc.poll() is not None
        assert (run / "journal.jsonl").exists()
        events = [orjson.loads(x) for x in (run / "supervisor.jsonl").read_bytes().splitlines() if x.strip()]
        assert events[-1]["event"] in ("stop", "succeeded")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        wait_for(lambda: proc.poll() is not None, 5, what="demo exit")
