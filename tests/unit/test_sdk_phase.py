"""The SDK's serve phase (``run.phase``) moves only forward, and sync and async steps share one retry policy and
one record shape: a transient failure retried by ``step`` and by ``astep`` leaves the same records."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor import Run
from supervisor.sdk import Phase


def _kinds(run_dir: Path) -> list[tuple[str, str, bool, bool]]:
    """(kind, step, has an error, transient) of every begin and step line, in file order."""
    out = []
    for line in (run_dir / "journal.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if r["kind"] in ("begin", "step"):
            out.append((r["kind"], r["step"], "error" in r, bool(r.get("transient"))))
    return out


def test_phases_of_a_run_and_its_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        assert run.phase is Phase.IN_ORDER  # nothing recorded: the first call finds nothing and goes live
        run.step("a", lambda: 1)
        assert run.phase is Phase.LIVE
        run.step("b", lambda: 2)
    assert run.phase is Phase.CLOSED
    with Run.open(run_dir) as run:
        assert run.step("a", lambda: 0) == 1 and run.phase is Phase.IN_ORDER
        run.match_by_name()
        assert run.step("c", lambda: 3) == 3  # not b's call: the table of steps by (name, k) answers, b is left
        assert run.phase is Phase.BY_IDENTITY
        assert run.step("b", lambda: 0) == 2  # served by identity at another position
        run.step("d", lambda: 4)
        assert run.phase is Phase.LIVE and list(run.replayed) == ["a", "b"] and list(run.executed) == ["c", "d"]


def test_a_call_from_another_thread_serves_by_identity(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        for name in "xyz":
            run.step(name, lambda n=name: n)
    got: list[Any] = []
    with Run.open(run_dir) as run:
        t = threading.Thread(target=lambda: got.append(run.step("z", lambda: "live")))
        t.start()
        t.join(30)
        assert got == ["z"]  # z's recorded output, though called first, from another thread
        assert run.phase is Phase.BY_IDENTITY
        assert [run.step(n, lambda: "live") for n in "xy"] == ["x", "y"]


@pytest.mark.parametrize("kind", ["step", "astep"])
def test_one_retry_policy_for_step_and_astep(kind: str, tmp_path: Path) -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("try again")
        return "ok"

    run_dir = tmp_path / kind
    with Run.open(run_dir, retries=2, transient=(ConnectionError,), backoff=0.001) as run:
        if kind == "step":
            assert run.step("s", flaky) == "ok"
        else:
            assert asyncio.run(run.astep("s", flaky)) == "ok"
    assert _kinds(run_dir) == [("begin", "s", False, False), ("step", "s", True, True), ("step", "s", True, True),
                               ("step", "s", False, False)]
    shutil.rmtree(run_dir)
    tries.clear()
    with Run.open(run_dir, retries=1, transient=(ConnectionError,), backoff=0.001) as run, pytest.raises(ConnectionError):
        if kind == "step":
            run.step("s", flaky)
        else:
            asyncio.run(run.astep("s", flaky))
    assert _kinds(run_dir) == [("begin", "s", False, False), ("step", "s", True, True), ("step", "s", True, False)]
