"""The dashboard on a live supervised sample agent: new steps appear, a rollback key restarts the agent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from supervisor.tui.app import make_app
from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.dashboard import DashboardScreen

from ..conftest import ROOT, SAMPLE_AGENT, clean_env
from .conftest import caught_up, until

SIZE = (120, 36)


def _records(run: Path) -> list[dict]:  # type: ignore[type-arg]
    data = (run / "journal.jsonl").read_bytes()
    return [orjson.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]


@pytest.mark.timeout(240)
async def test_live_step_appears_and_rollback_key_restarts_from_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "live"
    out = open(tmp_path / "supervisor.out", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q", "--",
         sys.executable, str(SAMPLE_AGENT), "--steps", "2000", "--step-delay", "0.15"],
        cwd=ROOT, env=clean_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        from ..conftest import wait_for

        wait_for(lambda: (run / "journal.jsonl").exists() and (run / "control.sock").exists(), 20, what="supervisor up")
        app = make_app(run)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: caught_up(app), what="scan")
            d: DashboardScreen = app.screen  # type: ignore[assignment]
            await until(pilot, lambda: d.status.live and d.status.state == "running", what="live status")
            assert "pid" in str(d.query_one("#status").render())
            # a new step is committed while we watch: it appears, and follow keeps it selected
            n0 = d.model.count
            await until(pilot, lambda: d.model.count >= n0 + 2, what="new records on screen")
            await until(pilot, lambda: d.timeline.selected_seq() == d.model.count - 1, what="follow")
            last = d.model.entry(d.model.count - 1)
            assert isinstance(last, dict)
            # roll back to plan-done through the key: a modal first, then the control socket
            await pilot.press("colon", *"plan-done", "enter")
            cp_seq = d.timeline.selected_seq()
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="modal")
            assert "restarts the agent" in app.screen.body_text
            await pilot.press("y")

            def rolled_back() -> bool:
                recs = _records(run)
                rb = [r for r in recs if r.get("kind") == "rollback"]
                return bool(rb) and any(r.get("kind") == "start" and r["seq"] > rb[-1]["seq"] for r in recs)

            await until(pilot, rolled_back, 30, what="rollback and restarted attempt in the journal")
            recs = _records(run)
            rb = [r for r in recs if r.get("kind") == "rollback"][-1]
            assert rb["checkpoint"] == "plan-done" and rb["checkpoint_seq"] == cp_seq and rb["by"] == "user"
            # the dashboard shows the rollback and the restarted attempt; the old branch is dimmed
            await until(pilot, lambda: d.model.count > rb["seq"] + 1, what="restart on screen")
            assert d.model.is_abandoned(cp_seq + 1) and not d.model.is_abandoned(rb["seq"])
            restart = next(r for r in recs if r.get("kind") == "start" and r["seq"] > rb["seq"])
            assert restart["resume"] is True and restart["replayable_steps"] == 1  # replayed up to plan-done
            # the agent runs search:q1 again after the checkpoint (it is on the abandoned branch)
            ledger = (run / "ledger.jsonl").read_bytes().splitlines()
            await until(
                pilot,
                lambda: sum(1 for x in (run / "ledger.jsonl").read_bytes().splitlines() if b'"search:q1"' in x) == 2,
                20,
                what="search:q1 re-executed",
            )
            assert ledger  # the side effects of the first branch are still there
            # restart through the key (with confirmation): a new attempt starts and resumes
            attempts = lambda: [r["attempt"] for r in _records(run) if r.get("kind") == "start"]  # noqa: E731
            before = max(attempts())
            await pilot.press("R")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="restart modal")
            await pilot.press("n")  # cancel first: nothing happens
            assert not isinstance(app.screen, ConfirmScreen) and max(attempts()) == before
            await pilot.press("R", "y")
            await until(pilot, lambda: max(attempts()) == before + 1, 30, what="restarted attempt")
            await until(pilot, lambda: before + 1 in d.model.start_seqs, what="restart on screen")
            # stop through the key (with confirmation)
            await pilot.press("X")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="stop modal")
            await pilot.press("y")
            await until(pilot, lambda: proc.poll() is not None, 30, what="supervisor stopped")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        out.close()
