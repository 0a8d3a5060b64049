"""The streaming ``log``, ``state`` and ``diff`` print byte for byte what the code before streaming printed.

The expected outputs under ``tests/data/log_golden/expected/`` were written by the
commit before the streaming commands (``make_fixtures.py``: the journals are SDK-shaped,
with nested rollbacks, a fork, failures, overlapping steps, damaged, foreign and
hand-written lines, rotated segments; ``async`` and ``sdk-rollbacks`` the real SDK wrote).
Run in-process (each comparison a few ms); one real process per command kind below.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import orjson
import pytest

from supervisor.cli.main import main
from supervisor.core import stream

from .conftest import run_cli
from .data.log_golden.make_fixtures import CASES, HERE, SAMPLE_CASES, SAMPLES, command_line, commands

EXPECTED = HERE / "expected"
PAIRS = [(case, name) for case in CASES + SAMPLE_CASES for name in commands(case)]


def _run_inprocess(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes, int]:
    out, err = io.BytesIO(), io.StringIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8")
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", err)
    rc = main(argv)
    stdout.flush()
    return out.getvalue(), err.getvalue().encode(), rc


@pytest.mark.parametrize(("case", "name"), PAIRS, ids=[f"{c}-{n}" for c, n in PAIRS])
def test_output_is_byte_identical_to_before(case: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = SAMPLES if case in SAMPLE_CASES else HERE
    out, err, rc = _run_inprocess(command_line(name, case, commands(case)[name]), cwd, monkeypatch)
    assert out == (EXPECTED / case / f"{name}.out").read_bytes()
    assert err + f"exit {rc}\n".encode() == (EXPECTED / case / f"{name}.err").read_bytes()


def test_real_processes_print_the_same(tmp_path: Path) -> None:
    """The command line as a user runs it (stdout a pipe, rotated segments, damaged lines)."""
    for case, name in [("damaged", "log"), ("rotated", "log-all-json"), ("nested", "diff-3-30"), ("damaged", "state-at-19")]:
        p = run_cli(*command_line(name, case, commands(case)[name]), cwd=HERE)
        assert p.stdout.encode() == (EXPECTED / case / f"{name}.out").read_bytes(), (case, name)
        assert (p.stderr + f"exit {p.returncode}\n").encode() == (EXPECTED / case / f"{name}.err").read_bytes()


def test_the_fast_path_takes_writer_lines_and_only_them() -> None:
    """A canonical line is handed out as its bytes; others (start, checkpoint, rollback, failed steps,
    hand-written and damaged lines) are parsed: a test that the fixtures exercise both paths."""
    pl = stream.plan(HERE / "nested")
    items = list(stream.Walk(HERE / "nested", pl, all_=True).items())
    raw = [i for i in items if i.raw is not None]
    parsed = [i for i in items if i.raw is None]
    assert {i.kind for i in raw} == {"begin", "step"}
    assert {i.kind for i in parsed} >= {"start", "checkpoint", "rollback", "note", "fork", "step"}
    assert all(i.rec is not None and i.rec.get("error") is not None for i in parsed if i.kind == "step")
    assert pl.cuts == {17: 9, 21: 3, 40: -1} and pl.missing == {29}  # nested: 21 abandons 17; 29 names no checkpoint
    assert pl.abandoned == [(0, 40)]  # the rollback to the start abandons all before it
