"""A threaded step is folded when its line is written (under the run's lock, with its state patch) and returned
only once a sync covers it; a failed sync still fails the step (real files, a gated fdatasync)."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from supervisor import Run
from supervisor.core.journal_reader import JournalReader
from supervisor.errors import JournalError

WAIT = 30.0  # seconds: a bound for a loaded machine, never a timing under test


class GatedSync:
    """``os.fdatasync`` that, once armed, tells when it is called and holds the caller until released (or fails)."""

    def __init__(self) -> None:
        self.real = os.fdatasync
        self.armed = False
        self.fail = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        if self.armed:
            self.entered.set()
            assert self.release.wait(WAIT)
            if self.fail:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.real(fd)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    got: dict[str, Any] = {}

    def body() -> None:
        try:
            got["out"] = fn()
        except BaseException as e:  # handed to the test
            got["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, got


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> GatedSync:
    g = GatedSync()
    monkeypatch.setattr(os, "fdatasync", g)  # before the writer picks its sync function
    return g


def test_a_threaded_step_is_folded_when_written_and_returned_once_synced(tmp_path: Path, gate: GatedSync) -> None:
    run = Run.open(tmp_path / "run")
    gate.armed = True

    def work() -> int:
        with run.lock:
            run.state["done"] = True
        return 7

    t, got = in_thread(lambda: run.step("work", work))  # another thread than the one that opened the run
    assert gate.entered.wait(WAIT)  # its line is written and its sync under way
    assert list(run.executed) == ["work"] and t.is_alive() and got == {}  # folded, not acknowledged
    gate.release.set()
    t.join(WAIT)
    assert got == {"out": 7}
    gate.armed = False
    run.close()
    steps = [r for r in JournalReader(tmp_path / "run").load() if isinstance(r, dict) and r.get("kind") == "step"]
    assert [s["step"] for s in steps] == ["work"]


def test_a_failed_sync_fails_the_threaded_step_and_every_later_one(tmp_path: Path, gate: GatedSync) -> None:
    run = Run.open(tmp_path / "run")
    gate.armed = gate.fail = True
    gate.release.set()

    def work() -> int:
        with run.lock:
            run.state["done"] = True
        return 7

    t, got = in_thread(lambda: run.step("work", work))
    t.join(WAIT)
    assert isinstance(got.get("error"), JournalError) and "cannot sync" in str(got["error"])
    t, got = in_thread(lambda: run.step("next", lambda: 1))
    t.join(WAIT)
    assert isinstance(got.get("error"), JournalError)  # the writer refuses every later write
    gate.armed = False
