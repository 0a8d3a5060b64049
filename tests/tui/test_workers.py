"""The dashboard reads files, computes states and diffs in workers; the UI thread only applies what they post."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from textual.widgets import Log

from supervisor.core.journal_writer import JournalWriter
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane
from supervisor.tui.diff_screen import DiffScreen
from supervisor.views.scan import scan_journal
from supervisor.views.timeline import TimelineModel

from .conftest import settled, until

SIZE = (120, 36)


def notes(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def _settled(pilot: Any) -> DashboardScreen:
    await until(pilot, lambda: settled(pilot.app), what="the dashboard to settle")
    d = pilot.app.screen
    assert isinstance(d, DashboardScreen)
    return d


def _append_events(run: Path, *events: dict[str, Any]) -> None:
    """Append supervisor events as the supervisor writes them (one line each)."""
    with open(run / "supervisor.jsonl", "ab") as f:
        f.writelines(orjson.dumps({"ts": "2026-11-29T10:00:00.000Z", **ev}) + b"\n" for ev in events)


def _spy(obj: Any, name: str, threads: list[int], gate: threading.Event | None = None) -> None:
    """Record the thread of every call of ``obj.name``; with ``gate``, hold each call until it is set."""
    orig = getattr(obj, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        if gate is not None:
            assert gate.wait(20), "the test never released the gate"
        return orig(*args, **kwargs)

    setattr(obj, name, spy)


async def test_records_events_and_agent_output_come_through_the_reading_worker(tmp_path: Path) -> None:
    run = tmp_path / "live"
    w = JournalWriter(run, durable=False)
    try:
        w.append({"kind": "start", "attempt": 1, "pid": 1})
        w.append({"kind": "step", "step": "s0", "output": 0})
        app = make_app(run)
        async with app.run_test(size=SIZE) as pilot:
            d = await _settled(pilot)
            ui = threading.get_ident()
            reads: list[int] = []
            applies: list[int] = []
            _spy(d.model, "read_changes", reads)
            _spy(d.model, "apply", applies)
            # a record appended to the real journal file appears, read by the worker, applied here
            w.append({"kind": "step", "step": "fresh", "output": "hello"})
            await until(pilot, lambda: d.model.count == 3, what="the new record")
            assert d.timeline.selected_seq() == 2
            assert reads and ui not in reads
            assert applies and set(applies) == {ui}
            # supervisor events appear between the records
            _append_events(run, {"event": "exit", "attempt": 1, "code": 1}, {"event": "restart", "attempt": 2})
            await until(pilot, lambda: [e.data["event"] for e in d.model.events] == ["exit", "restart"], what="events")
            # and so does the agent's output
            (run / "agent.log").write_bytes(b"hello from the agent\n")
            log = d.query_one(Log)
            await until(pilot, lambda: "hello from the agent" in log.lines, what="agent output")
            assert ui not in reads
    finally:
        w.close()


async def test_state_pane_and_diff_compute_off_the_ui_thread(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await _settled(pilot)
        ui = threading.get_ident()
        threads: list[int] = []
        gate = threading.Event()
        _spy(d.model, "state_at", threads, gate)
        await pilot.press("colon", *"9", "enter", "s")
        await until(pilot, lambda: threads, what="the state worker to start")
        # a big state is being computed: the UI answers keys meanwhile
        await pilot.press("k")
        assert d.timeline.selected_seq() == 7  # one row per step: the begin at 8 is folded into its step's row (9)
        gate.set()
        body = d.query_one("#state-pane", JsonPane)
        await until(pilot, lambda: body.text.startswith("state as of #7\n"), what="the state at 7")
        assert ui not in threads
        # the diff screen too: its states come from a worker while the screen answers keys
        gate.clear()
        threads.clear()
        await pilot.press("colon", *"20", "enter", "d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and threads, what="the diff worker to start")
        diff = app.screen
        assert isinstance(diff, DiffScreen) and not diff.changes_plain
        await pilot.press("u")
        await until(pilot, lambda: diff.query_one("TabbedContent").active == "unified", what="the unified tab")  # type: ignore[attr-defined]
        gate.set()
        await until(pilot, lambda: diff.changes_plain, what="the diff")
        assert "/findings" in diff.changes_plain and ui not in threads


async def test_worker_errors_become_notifications(rolled_back_run: Path) -> None:
    app = make_app(rolled_back_run)
    async with app.run_test(size=SIZE) as pilot:
        d = await _settled(pilot)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire")

        d.model.state_at = broken  # type: ignore[method-assign]
        await pilot.press("colon", *"9", "enter")
        await until(pilot, lambda: any("RuntimeError: disk on fire" in n for n in notes(app)), what="state worker error")
        await pilot.press("d")
        await until(
            pilot,
            lambda: isinstance(app.screen, DiffScreen) and "diff failed" in str(app.screen.query_one("#changes-body").render()),
            what="diff error",
        )
        assert sum("disk on fire" in n for n in notes(app)) >= 2 and any("(diff failed)" in n for n in notes(app))
        await pilot.press("q")
        d.model.read_changes = broken  # type: ignore[method-assign]
        d.files_changed()
        await until(pilot, lambda: any("disk on fire (live updates stopped)" in n for n in notes(app)), what="reading worker error")


def test_a_read_from_before_the_scan_is_dropped_and_read_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    w = JournalWriter(run, durable=False)
    try:
        for i in range(3):
            w.append({"kind": "step", "step": f"a{i}", "output": i})
        m = TimelineModel(run, tail_rows=5)
        m.open()
        scan = scan_journal(run)
        for i in range(2):
            w.append({"kind": "step", "step": f"b{i}", "output": i})
        stale = m.read_changes()  # before the scan is adopted: from the tail
        assert stale is not None and stale.count == 5
        assert m.read_changes(timeout=0.01) is None  # one read at a time: the last one is not applied yet
        m.adopt(scan)
        assert m.count == 3
        assert m.apply(stale) == (0, False) and m.count == 3  # dropped: the live side started over
        assert m.poll() == (2, False)
        assert m.count == 5 and m.effective_steps == 5
        assert m.record(4)["step"] == "b1"  # type: ignore[index]
        assert m.record(1)["step"] == "a1"  # type: ignore[index]
    finally:
        w.close()


@pytest.mark.parametrize("rotate", [False, True])
def test_readers_handed_over_stay_in_step(tmp_path: Path, rotate: bool) -> None:
    """Each read indexes the reader the UI gave back; the UI always holds one indexed to its count."""
    run = tmp_path / "run"
    w = JournalWriter(run, durable=False, rotate_bytes=300 if rotate else 1 << 30)
    try:
        w.append({"kind": "step", "step": "first", "output": 0})
        m = TimelineModel(run, tail_rows=2)
        m.open()
        m.adopt(scan_journal(run))
        for i in range(12):
            w.append({"kind": "step", "step": f"s{i}", "output": i})
            m.poll()
            assert m.count == i + 2
            for seq in range(m.count):
                rec = m.reader.get_range(seq, seq + 1)
                assert rec and rec[0]["step"] == ("first" if seq == 0 else f"s{seq - 1}")  # type: ignore[index]
    finally:
        w.close()


async def test_runs_list_error_becomes_a_notification(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from supervisor.tui import runs_screen

    def broken(root: Path) -> list[Any]:
        raise PermissionError(f"cannot list {root}")

    monkeypatch.setattr(runs_screen, "list_runs", broken)
    (tmp_path / "runs").mkdir()
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: any("PermissionError: cannot list" in n for n in notes(app)), what="the listing error")


def test_reading_thread_and_ui_thread_at_once(tmp_path: Path) -> None:
    """A thread reads while this one applies and reads rows through the twin reader: every row is right."""
    import queue
    import random

    run = tmp_path / "run"
    # no rotation here: the reader's listing of files can race a rotation (reported; not this test's subject)
    w = JournalWriter(run, durable=False)
    w.append({"kind": "step", "step": "s0", "output": 0})
    m = TimelineModel(run, tail_rows=3)
    m.open()
    m.adopt(scan_journal(run))
    total = 3000
    done = threading.Event()
    stop = threading.Event()
    posted: queue.Queue[Any] = queue.Queue()

    def write() -> None:
        for i in range(1, total):
            w.append({"kind": "step", "step": f"s{i}", "output": i})
        done.set()

    def read() -> None:
        while not stop.is_set():
            finished = done.is_set()
            ch = m.read_changes(timeout=0.5)
            if ch is not None:
                posted.put(ch)
                if finished and ch.count == total:
                    return

    threads = [threading.Thread(target=write, daemon=True), threading.Thread(target=read, daemon=True)]
    for t in threads:
        t.start()
    rng = random.Random(7)
    try:
        while m.count < total:
            m.apply(posted.get(timeout=20))
            for seq in rng.sample(range(m.count), min(5, m.count)):
                (rec,) = m.reader.get_range(seq, seq + 1)
                assert rec["seq"] == seq and rec["step"] == f"s{seq}"  # type: ignore[index]
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        w.close()
    assert m.count == total and m.effective_steps == total
