"""The served step's tail, inline in :meth:`Server.serve` (issue 28 item 21): a resume in order and a replay give
each recorded output typed exactly, with the state as recorded after it, and never call the step function; a
replay still checks a served step's inputs and stops at a step the journal does not have."""

from __future__ import annotations

import enum
import functools
import re
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor import Run
from supervisor.core import rundir
from supervisor.errors import ReplayError
from supervisor.replay.session import ENV_REPLAY_REPORT


class Color(enum.Enum):
    RED = "red"


ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _typed() -> tuple[int, str]:
    return (1, "a")


def _annotated(q: str) -> uuid.UUID:
    return ID


def _record(run_dir: Path) -> None:
    """A run whose state changes between some steps (patched steps) and not others (cursor-only steps). Only the
    tuple keeps its recorded type: the others come back typed by their hints (as from an SDK that recorded none)."""
    _steps(run_dir)
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join(re.sub(rb',"output_type":"(uuid|enum:[^"]*)"', b"", raw) for raw in lines))
    assert journal.read_bytes().count(b'"output_type"') == 1


def _steps(run_dir: Path) -> None:
    with Run.open(run_dir) as run:
        run.step("plain", lambda q: {"q": q}, "x")
        run.state["n"] = 1
        run.step("tuple", _typed)
        run.step("uuid", _annotated, "y")
        run.with_options(returns=Color).step("enum", lambda: Color.RED)
        run.state["n"] = 2
        run.step("partial", functools.partial(_annotated, "z"))
        run.step("last", lambda: None)


def _agent(run: Run, calls: list[str]) -> list[Any]:
    """The same agent, recording what it sees: each output, and the state after some (as recorded: the agent's
    assignment after a step is in the next step's record)."""
    seen: list[Any] = [run.step("plain", lambda q: calls.append("plain"), "x")]
    seen.append(dict(run.state))
    seen.append(run.step("tuple", lambda: calls.append("tuple")))
    seen.append(run.step("uuid", _annotated_called(calls), "y"))
    seen.append(run.with_options(returns=Color).step("enum", lambda: calls.append("enum")))
    seen.append(dict(run.state))
    seen.append(run.step("partial", functools.partial(_annotated_called(calls), "z")))  # its hint through the partial
    seen.append(run.step("last", lambda: calls.append("last")))
    seen.append(dict(run.state))
    return seen


def _annotated_called(calls: list[str]) -> Any:
    def fn(q: str) -> uuid.UUID:
        calls.append("uuid")
        return ID

    return fn


EXPECTED = [{"q": "x"}, {}, (1, "a"), ID, Color.RED, {"n": 1}, ID, None, {"n": 2}]


def test_a_resume_serves_each_output_typed_with_its_state_and_calls_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _record(run_dir)
    calls: list[str] = []
    with Run.open(run_dir) as run:
        seen = _agent(run, calls)
        assert list(run.replayed) == ["plain", "tuple", "uuid", "enum", "partial", "last"]
        assert run.step("new", lambda: "ran") == "ran"  # past the journal: live
    assert calls == []
    assert seen == EXPECTED
    assert [type(v) for v in seen] == [type(v) for v in EXPECTED]  # a tuple stays a tuple, a UUID a UUID


def test_a_replay_serves_the_same_and_checks_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "run"
    _record(run_dir)
    report = tmp_path / "report.json"
    monkeypatch.setenv(rundir.ENV_REPLAY, "strict")
    monkeypatch.setenv(ENV_REPLAY_REPORT, str(report))
    calls: list[str] = []
    with Run.open(run_dir) as run:
        seen = _agent(run, calls)
    assert calls == []
    assert seen == EXPECTED
    assert [type(v) for v in seen] == [type(v) for v in EXPECTED]
    doc = orjson.loads(report.read_bytes())
    assert doc["replayed"] == 6 and doc["divergences"] == []


def test_a_replay_reports_changed_inputs_and_stops_at_a_step_not_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "run"
    _record(run_dir)
    report = tmp_path / "report.json"
    monkeypatch.setenv(rundir.ENV_REPLAY, "strict")
    monkeypatch.setenv(ENV_REPLAY_REPORT, str(report))
    with Run.open(run_dir) as run:
        assert run.step("plain", lambda q: None, "changed") == {"q": "x"}  # served, its inputs reported
        for name, args in (("tuple", ()), ("uuid", ("y",)), ("enum", ()), ("partial", ()), ("last", ())):
            run.step(name, lambda *a: None, *args)
        with pytest.raises(ReplayError, match="asked for step 'extra' at position 6"):
            run.step("extra", lambda: None)
    kinds = [d["kind"] for d in orjson.loads(report.read_bytes())["divergences"]]
    assert kinds[:2] == ["inputs", "missing"]
