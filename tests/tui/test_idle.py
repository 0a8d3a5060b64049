"""An idle dashboard on a finished run polls nothing: no status poll, no safety-net read, no usage round; the file
watcher alone wakes it, and a run started again (the watcher sees it) is polled as a live run again."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core.journal_writer import JournalWriter
from supervisor.tui import dashboard, dashboard_watch, status_bar
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.views.timeline import TimelineModel

from .conftest import caught_up, until

SIZE = (120, 36)
QUIET_FOR = 0.6
"""How long nothing may happen: with every poll set to 0.05 s, a polling dashboard does each a dozen times."""


class Counts:
    """How often the dashboard polled: status asks, reads of the files, usage rounds (some on worker threads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = {"status": 0, "read": 0, "usage": 0}
        self._lock = threading.Lock()
        for name, cls, attr in (("status", DashboardScreen, "poll_status"), ("read", TimelineModel, "read_changes"),
                                ("usage", status_bar.JournalUsage, "look")):
            monkeypatch.setattr(cls, attr, self._counted(name, getattr(cls, attr)))
        # every poll fast: a dashboard that polls shows it within a fraction of a second
        monkeypatch.setattr(dashboard_watch, "STATUS_POLL_S", 0.05)
        monkeypatch.setattr(dashboard, "SAFETY_NET_S", 0.05)
        monkeypatch.setattr(dashboard, "_WAKE_SLICE_S", 0.05)
        monkeypatch.setattr(status_bar.StatusBar, "USAGE_POLL_S", 0.05)

    def _counted(self, name: str, fn: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.n[name] += 1
            return fn(*args, **kwargs)

        return counted

    def now(self) -> dict[str, int]:
        with self._lock:
            return dict(self.n)


def _run(tmp_path: Path, status: str) -> Path:
    """A run of three steps (one with usage) whose run.json says ``status``, no supervisor."""
    run = tmp_path / "run"
    w = JournalWriter(run, durable=False)
    try:
        w.append({"kind": "step", "step": "plan", "output": 1})
        w.append({"kind": "step", "step": "model:m", "output": "x",
                  "usage": [{"model": "local-llama", "provider": "ollama", "input_tokens": 5, "output_tokens": 1}]})
        w.append({"kind": "step", "step": "done", "output": 3})
    finally:
        w.close()
    meta = {"id": "run", "format": 1, "command": ["true"], "status": status, "attempts": 1}
    (run / "run.json").write_bytes(orjson.dumps(meta))
    return run


async def _started(pilot: Any, d: DashboardScreen) -> None:
    """The dashboard read the files, watches them and summed the usage (the start's work is done)."""
    await until(pilot, lambda: caught_up(pilot.app) and d._watching and d.query_one(status_bar.StatusBar).usage,
                what="the dashboard's start")


@pytest.mark.timeout(30)
async def test_a_finished_run_polls_nothing_until_its_files_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = Counts(monkeypatch)
    run = _run(tmp_path, "succeeded")
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        d: DashboardScreen = app.screen  # type: ignore[assignment]
        await _started(pilot, d)
        assert d.quiet and d.status.state == "succeeded"
        await pilot.pause(0.1)  # a read the start woke may still be on its way
        before = counts.now()
        await pilot.pause(QUIET_FOR)
        assert counts.now() == before, "a finished run's dashboard polled"
        # the watcher still wakes it: a record appended (an agent holds the journal lock: running again)
        w = JournalWriter(run, durable=False)
        try:
            w.append({"kind": "step", "step": "again", "output": 4})
            await until(pilot, lambda: d.model.count == 4, 10, what="the appended record, by the watch alone")
            await until(pilot, lambda: not d.quiet and d.status.state == "running", 10, what="the run running again")
            polled = counts.now()
            await until(pilot, lambda: all(counts.now()[k] > polled[k] + 2 for k in polled), 10,
                        what="the polls of a running run")
        finally:
            w.close()
        # the agent is gone: run.json still says succeeded, the run is finished again and quiet
        await until(pilot, lambda: d.quiet and d.status.state == "succeeded", 10, what="quiet again")


@pytest.mark.timeout(30)
async def test_a_run_that_may_be_running_is_polled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run.json says running and no supervisor lives (a crash): its status, files and usage are polled as today."""
    counts = Counts(monkeypatch)
    run = _run(tmp_path, "running")
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        d: DashboardScreen = app.screen  # type: ignore[assignment]
        await _started(pilot, d)
        assert not d.quiet and d.status.state == "crashed"
        before = counts.now()
        await until(pilot, lambda: all(counts.now()[k] > before[k] + 2 for k in before), 10, what="the polls")
