"""Text ``log`` of a foreign journal (another writer's key order and spacing) decides the pairing marks in its
first pass (:func:`pairing.foreign_pairs`) instead of a second walk: the same text as the same records written
by the SDK's writer, and as the look ahead gives, with the begins paired, overlapped, interrupted or in flight.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.cli.log_text import TextLog
from supervisor.cli.main import main
from supervisor.core import pairing, stream, wire
from supervisor.core.pairing import Pairing

Rec = dict[str, Any]
_LAST = ("seq", "id", "ts")


def _writer(rec: Rec) -> bytes:
    """The line as the SDK's writer spells it: kind, step, pos first; seq, id, ts last; no spaces."""
    head = {k: rec[k] for k in ("kind", "step", "pos") if k in rec}
    rest = {k: v for k, v in rec.items() if k not in head and k not in _LAST}
    return orjson.dumps({**head, **rest, **{k: rec[k] for k in _LAST}})


def _foreign(rec: Rec) -> bytes:
    """Another writer's spelling: keys sorted, spaces after the separators (Python's ``json``)."""
    return json.dumps(rec, sort_keys=True).encode()


def _pair(pos: int, **step: Any) -> list[Rec]:
    name = f"work:{pos}"
    return [{"kind": "begin", "step": name, "pos": pos, "attempt": 1, "inputs": {"n": pos}},
            {"kind": "step", "step": name, "pos": pos, "attempt": 1, "inputs": {"n": pos}, "output": f"r{pos}", **step}]


def _case(name: str) -> list[Rec]:
    """The records of a case: sequential steps with one twist (a journal of each kind of pairing)."""
    recs: list[Rec] = [{"kind": "start", "attempt": 1, "pid": 1}]
    for i in range(12):
        recs += _pair(i)
    if name == "overlapped":  # two steps in flight at once
        a, b = _pair(12), _pair(13)
        recs += [a[0], b[0], a[1], b[1]]
    elif name == "interrupted":  # a crash: the begin's attempt ended before its step
        recs += [_pair(12)[0], {"kind": "start", "attempt": 2, "pid": 2, "resume": True}]
    elif name == "retried":  # a failed try to be retried does not close its begin
        b, s = _pair(12)
        recs += [b, {**s, "error": {"message": "busy"}, "transient": True}, b, s]
        del recs[-3]["output"]
    elif name == "unkeyed":  # a begin without a pos: the fold gives it 12; its step says 17, as its inputs' "pos" does
        b, s = _pair(17)
        recs += [{**{k: v for k, v in b.items() if k != "pos"}, "inputs": {"pos": 17}}, s]
    for i in range(20, 26):
        recs += _pair(i)
    recs.append(_pair(26)[0])  # the last line: a begin in flight
    for seq, rec in enumerate(recs):
        rec.update(seq=seq, id=f"r{seq}", ts=f"2026-11-29T10:00:{seq % 60:02d}.{seq:03d}Z")
    return recs


CASES = ["sequential", "overlapped", "interrupted", "retried", "unkeyed"]
CHUNKS = [120, 700, stream.CHUNK]
"""Chunk sizes in bytes: a begin and its step split between chunks at many places, and the whole file in one."""


def _write(d: Path, lines: list[bytes]) -> Path:
    d.mkdir()
    (d / "journal.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    return d


def _log(run: Path, flags: list[str], chunk: int, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """``log RUN`` in-process, both passes reading ``chunk`` bytes at a time."""
    buf, err = io.BytesIO(), io.StringIO()
    with monkeypatch.context() as m:
        m.setitem(stream.plan.__kwdefaults__, "chunk", chunk)
        m.setitem(stream.Walk.__init__.__kwdefaults__, "chunk", chunk)
        m.setattr(sys, "stdout", io.TextIOWrapper(buf, encoding="utf-8"))
        m.setattr(sys, "stderr", err)
        assert main(["log", str(run), *flags]) == 0
        sys.stdout.flush()
        return buf.getvalue() + err.getvalue().encode()  # (the wrapper closes the buffer once let go)


def _look_ahead(run: Path, pl: stream.Plan, all_: bool) -> Pairing:
    look = Pairing(keep_paired=False)
    for item in stream.Walk(run, pl, all_=all_).items():
        look.add_item(item)
    return look


def _same_marks(run: Path, chunk: int) -> bool:
    """The first pass says the begins pair line by line; the look ahead gives the same marks (or it says no)."""
    pl = stream.plan(run, pairs=True, check=False, chunk=chunk)
    for all_ in (False, True):
        look = _look_ahead(run, pl, all_)
        if pl.paired:
            assert not look.overlapped and not look.interrupted
            assert {b["seq"] for b in look.open.values()} == ({pl.open_at_end[0]} if pl.open_at_end else set())
    return pl.paired


@pytest.mark.parametrize("case", CASES)
def test_foreign_journal_prints_what_the_writers_journal_prints(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _case(case)
    writer = _write(tmp_path / "writer", [_writer(r) for r in recs])
    foreign = _write(tmp_path / "foreign", [_foreign(r) for r in recs])
    assert all(wire.is_writer_line(x) for x in _lines(writer)) and not any(wire.is_writer_line(x) for x in _lines(foreign))
    for chunk in CHUNKS:
        assert _same_marks(foreign, chunk) == (case == "sequential"), chunk  # decided in the first pass, and right
        for flags in ([], ["--all"]):
            text = _log(foreign, flags, chunk, monkeypatch)
            assert text == _log(writer, flags, chunk, monkeypatch), (chunk, flags)
    text = _log(foreign, [], stream.CHUNK, monkeypatch).decode()
    assert text.count("(in flight: no step record yet)") == 1 + (case == "unkeyed")  # its step closed another pos
    assert ("#12" in text) == (case in ("overlapped", "retried", "unkeyed"))  # overlapping steps show their pos
    assert ("(interrupted" in text) == (case in ("interrupted", "retried"))


def _lines(run: Path) -> list[bytes]:
    return (run / "journal.jsonl").read_bytes().splitlines()


FOREIGN_ONLY = {
    "blank between": lambda ls, k: ls[: k + 1] + [b""] + ls[k + 1 :],
    "damaged step": lambda ls, k: ls[: k + 1] + [ls[k + 1][:-9]] + ls[k + 2 :],
    "text prefix": lambda ls, k: [b"2026-11-29 10:00:01 | INFO | " + x if i in (k, k + 1) else x for i, x in enumerate(ls)],
    "escaped kind": lambda ls, k: [x.replace(b'"begin"', b'"\\u0062egin"') for x in ls],
    "step without kind": lambda ls, k: ls[: k + 1] + [ls[k + 1].replace(b'"kind": "step", ', b"")] + ls[k + 2 :],
    "nested word": lambda ls, k: [x.replace(b'"attempt": 1', b'"parent": "r3"') if i == k + 1 else x for i, x in enumerate(ls)],
    "list line": lambda ls, k: ls[: k + 1] + [b"[1, 2]"] + ls[k + 1 :],
}


@pytest.mark.parametrize("twist", sorted(FOREIGN_ONLY))
def test_first_pass_pairing_matches_the_look_ahead(twist: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines only another writer (or a damaged file) has: the text with the first pass's pairing is the text
    with the look ahead's (the way before: forced here by a first pass that never decides)."""
    lines = [_foreign(r) for r in _case("sequential")]
    k = 2 * 7 + 1  # the begin of step 7
    assert b'"kind": "begin"' in lines[k]
    run = _write(tmp_path / "run", FOREIGN_ONLY[twist](lines, k))
    paired = {chunk: _same_marks(run, chunk) for chunk in CHUNKS}
    expect = twist in ("text prefix", "escaped kind", "step without kind")  # these still pair line by line
    assert set(paired.values()) == {expect}, paired
    for chunk in CHUNKS:
        for flags in ([], ["--all"]):
            fast = _log(run, flags, chunk, monkeypatch)
            with monkeypatch.context() as m:
                m.setattr(pairing, "foreign_pairs", lambda data, carry: (False, None))
                assert fast == _log(run, flags, chunk, monkeypatch), (chunk, flags)


def test_writer_chunk_starting_with_a_retried_try(tmp_path: Path) -> None:
    """A begin that ends a chunk is not closed by a failed try to be retried that starts the next one, even when
    that chunk holds no begin (the look ahead marks it)."""
    recs = _case("sequential")[:-1]
    b, s = _pair(40)
    recs += [b, {**s, "error": {"message": "busy"}, "transient": True}, {"kind": "note", "message": "gave up"}]
    for seq, rec in enumerate(recs):
        rec.update(seq=seq, id=f"r{seq}", ts="2026-11-29T10:00:00.000Z")
    run = _write(tmp_path / "run", [_writer(r) for r in recs])
    for chunk in (64, 150, 400, stream.CHUNK):
        assert not _same_marks(run, chunk), chunk


def test_a_null_kind_is_shown_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written record whose kind is null or a list: one line each, as JSON."""
    run = _write(tmp_path / "run", [b'{"kind": null, "seq": 0, "ts": "t", "step": "a"}', b'{"kind": ["x"], "seq": 1, "ts": "t"}'])
    text = _log(run, [], stream.CHUNK, monkeypatch).decode()
    assert text.splitlines()[0].split()[1:3] == ["t", "null"] and '["x"]' in text.splitlines()[1]


def _twisted() -> list[Rec]:
    """Sequential foreign records whose fields take every branch of the text of a step or begin line."""
    outputs: list[Any] = ["x" * 80, "a\nb", {"k": [1, 2]}, None, 5, "é" * 70, ""]
    recs: list[Rec] = [{"kind": "start", "attempt": 1, "pid": 1}]
    for i, out in enumerate(outputs):
        recs += _pair(i, output=out)
    b, s = _pair(10)
    twists: list[Rec] = [
        {"usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_input_tokens": 100}, "model": "gpt-4o-mini"},
        {"call": {"kind": "tool", "tool": "search"}},
        {"source": "llm"},  # a proxy's record: its own line
        {"error": {"message": "boom"}},
        {"error": None},
        {"step": 'w:"q"\\x'},
        {"step": 7},
        {"ts": "t"},
        {"ts": 5},
        {"attempt": None, "inputs": {"pos": 3, "kind": "begin"}},
    ]
    for i, t in enumerate(twists, 20):
        b, s = _pair(i)
        recs += [{**b, **({"step": t["step"]} if "step" in t else {})}, {**s, **t}]
    recs += [{**_pair(40)[0], "ts": "2026-11-29T10:00:00.1Z"}, _pair(40)[1], _pair(41)[0]]
    for seq, rec in enumerate(recs):
        rec.setdefault("ts", f"2026-11-29T10:00:{seq % 60:02d}.{seq:03d}Z")
        rec.update(seq=seq, id=f"r{seq}")
    recs[5]["seq"] = 999  # a recorded seq that is not the line's
    return recs


def _general_text(run: Path, marks: Pairing, all_: bool) -> bytes:
    """The text as the general path makes it: every line parsed into an item, each line by ``format_record``."""
    log = TextLog(marks, all_)
    lines = [log.other(item) for item in stream.Walk(run, stream.plan(run), all_=all_).items()]
    return b"".join(x + b"\n" for x in lines)


def test_the_rows_of_a_foreign_journal_are_the_general_paths_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk hands out a foreign step or plain begin as a writer line's row (no ``format_record`` a line): the
    text is the general path's, field for field."""
    run = _write(tmp_path / "run", [_foreign(r) for r in _twisted()])
    pl = stream.plan(run, pairs=True, check=False)
    assert pl.paired
    for all_ in (False, True):
        text = _log(run, ["--all"] if all_ else [], stream.CHUNK, monkeypatch)
        assert text == _general_text(run, _look_ahead(run, pl, all_), all_)
    assert "(llm.jsonl #" in text.decode() and "[tool search]" in text.decode() and "ERROR boom" in text.decode()


def test_pairs_across_writer_and_foreign_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A begin in one spelling whose step, in the other, starts the next chunk: paired in the first pass."""
    recs = _case("sequential")
    writer = _write(tmp_path / "writer", [_writer(r) for r in recs])
    mixed = _write(tmp_path / "mixed", [(_writer if (i // 2) % 2 else _foreign)(r) for i, r in enumerate(recs)])
    for chunk in (64, 120, 700, stream.CHUNK):  # 64: a chunk a line, each all in one spelling
        assert _same_marks(mixed, chunk), chunk
        assert _log(mixed, [], chunk, monkeypatch) == _log(writer, [], chunk, monkeypatch), chunk
