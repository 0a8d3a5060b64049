"""Nested steps in the text ``log`` (each record after its enclosing steps' names), ``log --json`` (the records as
they are) and the streaming walk that finds a parent's begin it passed over unparsed. In-process, hand-written
journals in the SDK's shape (``tests/nested_runs.py``)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from supervisor.cli.log_text import TextLog
from supervisor.cli.main import main
from supervisor.core import stream
from supervisor.core.nesting import PATH_SEP, UNKNOWN
from supervisor.core.pairing import Pairing

from ..nested_runs import NestedJournal, sample


def _log(monkeypatch: pytest.MonkeyPatch, *argv: str) -> bytes:
    buf = io.BytesIO()
    out = io.TextIOWrapper(buf, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert main(["log", *argv]) == 0
    out.flush()
    return buf.getvalue()


def _bodies(text: bytes) -> list[str]:
    """Each line's text after its kind column (seq 6, ts 23, kind 10)."""
    return [line[42:] for line in text.decode().splitlines()]


def _p(*names: str) -> str:
    return PATH_SEP.join(names)


@pytest.mark.timeout(10)
def test_text_log_shows_each_nested_records_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = sample(tmp_path / "run")
    got = _bodies(_log(monkeypatch, str(run)))
    assert got == [
        "attempt 1 pid 101",
        "outer #1",
        f"{_p('outer', 'inner')} #2",
        f"{_p('outer', 'inner', 'deep')} #3",
        f"{_p('outer', 'inner', 'deep')} #3  -> 1",
        f"{_p('outer', 'inner')} #2  -> 6",
        f"{_p('outer', 'inner')} #4",
        f"{_p('outer', 'inner')} #4  -> 8",
        "outer #1  -> 14",
        "flat #5",
        "flat #5  -> ok",
    ]
    # the filters see each record as it is: --step matches the name, the path is still shown
    assert _bodies(_log(monkeypatch, str(run), "--step", "deep")) == [f"{_p('outer', 'inner', 'deep')} #3",
                                                                       f"{_p('outer', 'inner', 'deep')} #3  -> 1"]
    assert _bodies(_log(monkeypatch, str(run), "--tail", "4"))[0] == f"{_p('outer', 'inner')} #4  -> 8"


@pytest.mark.timeout(10)
def test_log_json_keeps_the_records_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = sample(tmp_path / "run")
    out = _log(monkeypatch, str(run), "--json").splitlines()
    steps = [x for x in (run / "journal.jsonl").read_bytes().splitlines() if not x.startswith(b'{"kind":"start"')]
    assert out[1:] == steps  # byte for byte, "parent" in place (the start record gets its derived pos)
    assert sum(b'"parent":"fb' in x for x in out) == 6


def _walk_text(run: Path, chunk: int) -> list[str]:
    """The text ``log``'s lines, walked at ``chunk`` bytes a chunk (as ``cmd_log`` does when steps overlap)."""
    pl = stream.plan(run, pairs=True, chunk=chunk)
    assert not pl.paired
    pairing = Pairing(keep_paired=False)
    for item in stream.Walk(run, pl, chunk=chunk).items():
        pairing.add_item(item)
    text = TextLog(pairing, False)
    walk = stream.Walk(run, pl, chunk=chunk)
    return [line.decode()[42:] for batch in walk.batches(parse_steps=True) for line in text.lines(batch)]


@pytest.mark.timeout(10)
def test_a_parent_begun_in_a_chunk_without_nesting_is_found_by_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's begin is in a chunk the walk takes unparsed (no nested record there): its name comes from a
    search of the bytes before; concurrent children of two parents keep each its own path."""
    j = NestedJournal()
    j.start()
    a = j.begin("agent-a", 1)
    b = j.begin("agent-b", 2)
    for pos in range(3, 200):  # other steps while both are in flight: kilobytes between the begins and the children
        j.pair(f"other:{pos}", pos)
    ca = j.begin("tool", 200, a)
    cb = j.begin("tool", 201, b)
    j.step("tool", 201, "b's", b)
    j.pair("llm", 202, "x", ca)  # a grandchild: its parent was no parent at its begin
    j.step("tool", 200, "a's", a)
    j.step("agent-a", 1, "A")
    j.step("agent-b", 2, "B")
    run = j.write(tmp_path / "run")
    assert cb
    searched: list[str] = []
    find = stream.find_begin
    monkeypatch.setattr(stream, "find_begin", lambda regions, rid: searched.append(rid) or find(regions, rid))
    for chunk in (1 << 20, 4096, 1024):
        searched.clear()
        lines = _walk_text(run, chunk)
        assert sorted(searched) == ([] if chunk == 1 << 20 else [a, b])  # one search each, in the bytes before
        nested = [x for x in lines if PATH_SEP in x]
        assert nested == [
            f"{_p('agent-a', 'tool')} #200",
            f"{_p('agent-b', 'tool')} #201",
            f"{_p('agent-b', 'tool')} #201  -> b's",
            f"{_p('agent-a', 'tool', 'llm')} #202",
            f"{_p('agent-a', 'tool', 'llm')} #202  -> x",
            f"{_p('agent-a', 'tool')} #200  -> a's",
        ], chunk
        assert "agent-a #1  -> A" in lines and "other:3 #3  -> other:3-3" in lines


@pytest.mark.timeout(10)
def test_a_parent_never_written_is_named_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(Where every begin is followed by its own step no step ran inside another: an orphan there shows no path.)"""
    j = NestedJournal()
    j.start()
    j.begin("a", 1)
    j.pair("orphan", 2, "o", parent="no-such-begin")
    j.step("a", 1)
    run = j.write(tmp_path / "run")
    assert _bodies(_log(monkeypatch, str(run)))[2:4] == [f"{_p(UNKNOWN, 'orphan')} #2", f"{_p(UNKNOWN, 'orphan')} #2  -> o"]


@pytest.mark.timeout(10)
def test_a_run_without_nesting_walks_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sequential steps: the first pass finds every begin followed by its step, and the walk never looks for
    nesting; concurrent steps without nesting: it looks, finds none, and walks every chunk by its bytes."""
    j = NestedJournal()
    j.start()
    for pos in range(1, 50):
        j.pair(f"s:{pos}", pos)
    seq_run = j.write(tmp_path / "seq")
    pl = stream.plan(seq_run, pairs=True)
    assert pl.paired
    looked: list[str] = []
    nested_rows = stream.Walk._nested_rows
    monkeypatch.setattr(stream.Walk, "_nested_rows", lambda self, *a: looked.append("x") or nested_rows(self, *a))
    assert sum(map(len, stream.Walk(seq_run, pl).batches(parse_steps=True))) == 99
    j = NestedJournal()
    j.start()
    j.begin("a", 1)
    j.begin("b", 2)
    j.step("b", 2)
    j.step("a", 1)
    conc = j.write(tmp_path / "conc")
    pl = stream.plan(conc, pairs=True)
    assert not pl.paired
    walk = stream.Walk(conc, pl)
    assert sum(map(len, walk.batches(parse_steps=True))) == 5
    assert looked == [] and walk._nesting is None
