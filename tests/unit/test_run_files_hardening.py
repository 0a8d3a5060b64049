"""Issue 28 at the unit level: the one open of run files refuses what is not a regular file, for every mode;
``run.json`` fields are checked when read; an exit 0 with a step in flight is not a success."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir
from supervisor.errors import RunDirError
from supervisor.supervise.policy import Action, Facts, Options, decide


@pytest.mark.timeout(10)
@pytest.mark.parametrize("flags", [
    os.O_RDONLY, os.O_WRONLY | os.O_APPEND | os.O_CREAT, os.O_RDWR, os.O_RDWR | os.O_CREAT,
], ids=["read", "append", "read-write", "create"])
@pytest.mark.parametrize("kind", ["fifo", "socket", "dir"])
def test_open_run_file_refuses_what_is_not_a_regular_file(tmp_path: Path, flags: int, kind: str) -> None:
    p = tmp_path / "journal.jsonl"
    if kind == "fifo":
        os.mkfifo(p)  # no writer and no reader: a blocking open would wait forever
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(p))
    else:
        p.mkdir()
    with pytest.raises(RunDirError, match=r"journal\.jsonl is a (FIFO|socket|directory).*not a regular file") as e:
        rundir.open_run_file(p, flags)
    assert "\n" not in str(e.value)


def test_open_run_file_gives_a_regular_file_in_blocking_mode(tmp_path: Path) -> None:
    p = tmp_path / "journal.jsonl"
    fd = rundir.open_run_file(p, os.O_WRONLY | os.O_CREAT)
    try:
        assert os.get_blocking(fd)  # O_NONBLOCK was only for the open
    finally:
        os.close(fd)
    fd = rundir.open_run_file(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert not os.get_blocking(fd)  # asked for: kept
    finally:
        os.close(fd)


@pytest.mark.parametrize(("meta", "needle"), [
    ({"attempts": "many"}, '"attempts" is "many", not a whole number of attempts'),
    ({"attempts": True}, '"attempts" is true'),
    ({"attempts": -1}, '"attempts" is -1'),
    ({"command": ["python", 3]}, '"command" is ["python",3], not a list of strings'),
    ({"supervisor_pid": 0}, '"supervisor_pid" is 0, not a process id'),
    ({"llm_proxy": "yes"}, '"llm_proxy" is "yes"'),
    ({"cwd": ["a"]}, '"cwd" is ["a"]'),
    ({"id": ["x" * 500]}, "\u2026, not a string (the run id)"),
])
def test_a_run_json_field_of_the_wrong_type_is_refused_when_read(tmp_path: Path, meta: dict[str, object], needle: str) -> None:
    (tmp_path / "run.json").write_bytes(orjson.dumps({"format": 1, **meta}))
    with pytest.raises(RunDirError) as e:
        rundir.read_run_json(tmp_path)
    msg = str(e.value)
    assert needle in msg and str(tmp_path / "run.json") in msg and "\n" not in msg and len(msg) < 300


def test_a_run_json_with_null_or_absent_fields_is_read(tmp_path: Path) -> None:
    meta = {"format": 1, "id": "r", "attempts": 0, "supervisor_pid": None, "ended": None, "reason": None,
            "command": ["python", "agent.py"], "llm_proxy": {"match": "order"}}
    (tmp_path / "run.json").write_bytes(orjson.dumps(meta))
    assert rundir.read_run_json(tmp_path) == meta


def test_an_exit_0_with_a_step_in_flight_is_a_crash() -> None:
    opts = Options(backoff_jitter=0)
    assert decide(Facts(code=0), opts).action is Action.SUCCEED
    d = decide(Facts(code=0, in_flight=True, progress=1), opts)
    assert d.action is Action.RESTART and d.reason == "crash"
    d = decide(Facts(code=0, in_flight=True), opts)
    assert d.action is Action.BACKOFF and d.no_progress == 1
    assert decide(Facts(code=0, in_flight=True, no_progress=4), opts).action is Action.GIVE_UP
