"""How often a process looks at ``breakpoints.json`` (issue 28 item 20): at most once per ``pauses.LOOK_S``, not once a
step (an ``fstat`` between a step's two writes cost it ~5 us on ext4), and at once after :meth:`Breakpoints.stale`
(a pause answered: the answer may come with new breakpoints). The clock is a fake one: nothing here waits."""

from __future__ import annotations

import os
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from supervisor import Run
from supervisor.core import pauses


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(pauses, "time", types.SimpleNamespace(monotonic=c.monotonic))
    return c


@pytest.mark.timeout(30)
def test_a_change_shows_after_look_s_or_at_once_when_stale(tmp_path: Path, clock: Clock) -> None:
    run = tmp_path / "run"
    run.mkdir()
    bp = pauses.Breakpoints(run)
    try:
        assert bp.read()["patterns"] == []
        pauses.change_breakpoints(run, add=["tool:*"])
        assert bp.read()["patterns"] == []  # looked less than LOOK_S ago: the last view
        clock.now += pauses.LOOK_S
        assert bp.read()["patterns"] == ["tool:*"]
        pauses.change_breakpoints(run, remove=None)
        bp.stale()
        assert bp.read()["patterns"] == []  # stale: looked at once
    finally:
        bp.close()


@pytest.mark.timeout(60)
def test_steps_look_at_the_run_directory_once_per_look_s(tmp_path: Path, clock: Clock,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run.open(tmp_path / "run")
    looks = 0
    real_fstat = os.fstat

    def counting_fstat(fd: Any) -> os.stat_result:
        nonlocal looks
        st = real_fstat(fd)
        if isinstance(fd, int) and os.path.samestat(st, os.stat(tmp_path / "run")):
            looks += 1
        return st

    monkeypatch.setattr(os, "fstat", counting_fstat)
    try:
        for i in range(50):
            run.step("work", lambda x: x, i)
        assert looks == 1  # the first step looks; the 49 others within LOOK_S of it do not
        clock.now += pauses.LOOK_S
        pauses.change_breakpoints(tmp_path / "run", add=["never:*"])
        for i in range(50):
            run.step("work", lambda x: x, i)
        assert looks == 2
        assert run._steps.gate is not None and run._steps.gate.file.doc["patterns"] == ["never:*"]
    finally:
        run.close()


@pytest.mark.timeout(30)
def test_no_read_opens_the_directory_so_racing_threads_leak_no_descriptor(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    bp = pauses.Breakpoints(run)  # opens the directory itself, once
    opens = 0
    real_open = os.open

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> int:
        nonlocal opens
        if Path(path) == run:
            opens += 1
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)

    def reads() -> None:
        for _ in range(50):
            bp.stale()
            bp.read()

    pool = [threading.Thread(target=reads) for _ in range(8)]
    try:
        for t in pool:
            t.start()
        for t in pool:
            t.join(timeout=20)
        assert opens == 0
    finally:
        bp.close()
