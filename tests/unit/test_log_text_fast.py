"""The text ``log``'s fast lines (made in the walk's loop) are the lines the whole-parse ``log`` made.

The reference is the code before streaming: :func:`history.load` and :func:`format_record` with a
:class:`pairing.Pairing` over the records shown. The journal is in the writer's form (the fast path)
with the shapes a line-level shortcut could get wrong: an ``output`` key nested in the inputs,
outputs long, multi-line, non-ASCII, not text or missing, failed steps, model and tool calls, a
wrong or non-integer seq, escaped names, short and non-ASCII times, a line that is not JSON, a
start and a rollback (abandoned records for ``--all``). Each is run at several chunk sizes, so
lines sit on both sides of chunk boundaries (the ``--all`` mark and the abandoned ranges carry
across them). In-process: a few ms a run.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.cli.log_text import TextLog, format_record
from supervisor.cli.main import main
from supervisor.core import history, stream
from supervisor.core.pairing import Pairing

TS = "2026-11-30T10:00:00.000Z"


class _J:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def add(self, rec: dict[str, Any], *, ts: Any = TS, seq: Any = None) -> None:
        n = len(self.lines)
        self.lines.append(orjson.dumps({**rec, "seq": n if seq is None else seq, "id": f"t{n:x}", "ts": ts}))

    def pair(self, name: str, pos: int, output: Any = "ok", **step: Any) -> None:
        inputs = step.pop("inputs", {"args": [name, pos]})
        self.add({"kind": "begin", "step": name, "pos": pos, "attempt": 1, "inputs": inputs})
        rec: dict[str, Any] = {"kind": "step", "step": name, "pos": pos, "attempt": 1, "inputs": inputs,
                               "inputs_hash": "94b266eb06179852", "output": output, "dur_ms": 0.1, "key": f"k{pos}"}
        rec.update(step)
        self.add(rec)


def _journal(tmp_path: Path) -> Path:
    j = _J()
    j.add({"kind": "start", "attempt": 1, "pid": 1, "resume": False, "argv": ["a.py"]})
    j.pair("plain", 0)
    j.pair("nested-output-key", 1, "real", inputs={"args": [{"output": "fake", "inputs_hash": "x"}]})
    j.pair("nested-before", 2, {"output": "in the value", "error": None})
    j.pair("long", 3, "x" * 71)
    j.pair("seventy", 4, "y" * 70)
    j.pair("lines", 5, "a\nb")
    j.pair("unicode-long", 6, "é" * 80)
    j.pair("unicode", 7, "naïve ✓")
    j.pair("number", 8, 42)
    j.pair("none", 9, None)
    j.pair("list", 10, [1, {"b": 2, "a": 1}])
    j.pair("model:gpt-4o", 11, "answer", call={"kind": "model", "model": "gpt-4o", "provider": "openai"},
           usage=[{"model": "gpt-4o", "provider": "openai", "input_tokens": 200, "output_tokens": 30, "cached_tokens": 0}])
    j.pair("tool:search", 12, "found", call={"kind": "tool", "tool": "search", "call_id": "c9"})
    j.pair("failed", 13, None, error={"type": "ValueError", "message": "bad"})
    j.pair("esc\"aped\\name", 14)
    j.pair("ünïcode name", 15)
    j.add({"kind": "begin", "step": "short-ts", "pos": 16, "attempt": 1}, ts="2026-11-30")
    j.add({"kind": "step", "step": "short-ts", "pos": 16, "attempt": 1, "output": "s"}, ts="2026-11-30")
    j.add({"kind": "begin", "step": "wide-ts", "pos": 17, "attempt": 1}, ts="2026-11-30T10:00:00.000Zé")
    j.add({"kind": "step", "step": "wide-ts", "pos": 17, "attempt": 1, "output": "w"}, ts="2026-11-30T10:00:00.000Zé")
    j.add({"kind": "step", "step": "no-output", "pos": 18, "attempt": 1, "result": "an alias"})
    j.add({"kind": "step", "step": "wrong-seq", "pos": 19, "attempt": 1, "output": "w"}, seq=5)
    j.add({"kind": "step", "step": "float-seq", "pos": 20, "attempt": 1, "output": "f"}, seq=float(len(j.lines)))
    j.add({"kind": "step", "step": "bool-pos", "pos": True, "attempt": 1, "output": "b"})
    j.add({"kind": "step", "step": "text-pos", "pos": "7", "attempt": 1, "output": "t"})
    n = len(j.lines)
    j.lines.append(b'{"kind":"step","step":"not-json","pos":21,"output":"a" "b","seq":%d,"id":"x","ts":"%s"}' % (n, TS.encode()))
    cp = len(j.lines)
    j.add({"kind": "checkpoint", "name": "c1", "pos": 22, "file": "0001-c1.json"})
    for pos in range(22, 26):
        j.pair(f"abandoned:{pos}", pos)
    j.add({"kind": "rollback", "checkpoint": "c1", "checkpoint_seq": cp, "reason": "test", "by": "cli"})
    j.add({"kind": "start", "attempt": 2, "pid": 2, "resume": True, "argv": ["a.py"]})
    for pos in range(22, 60):
        j.pair(f"again:{pos}", pos, f"r{pos}")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "0001-c1.json").write_bytes(orjson.dumps({"name": "c1", "seq": cp, "pos": 22, "format": 1, "state": {}}))
    (run / "journal.jsonl").write_bytes(b"".join(x + b"\n" for x in j.lines))
    (run / "run.json").write_bytes(orjson.dumps({"id": "run", "format": 1, "status": "running", "command": ["a"]}))
    return run


def _reference(run: Path, all_: bool) -> bytes:
    """The ``log`` before streaming (its ``cmd_log``, with today's call summary in ``format_record``)."""
    h = history.load(run)
    abandoned = h.abandoned_seqs if all_ else set()
    records = (
        [e.record() if isinstance(e, history.BadLine) else e for e in h.entries if not isinstance(e, history.BadLine) or not e.foreign]
        if all_
        else h.effective
    )
    pairing = Pairing()
    for rec in records:
        pairing.add(rec)
    lines = []
    for rec in records:
        mark = "~ " if rec["seq"] in abandoned else "  " if all_ else ""
        lines.append((mark + format_record(rec, pairing) + "\n").encode())
    return b"".join(lines)


def _streamed(run: Path, all_: bool, chunk: int, plain_begins: bool = True) -> bytes:
    """``cmd_log``'s plain text stream at a given chunk size (``plain_begins=False``: every begin by ``canon``)."""
    pl = stream.plan(run, pairs=True, chunk=chunk)
    pairing = Pairing(keep_paired=False)
    if pl.paired:
        if pl.open_at_end is not None:
            pairing.open[pl.open_at_end[1]] = {"seq": pl.open_at_end[0]}
    else:
        for item in stream.Walk(run, pl, all_=all_, chunk=chunk).items():
            pairing.add_item(item)
    text = TextLog(pairing, all_)
    walk = stream.Walk(run, pl, all_=all_, chunk=chunk)
    plain = plain_begins and not pairing.overlapped  # as the command asks
    return b"".join(line + b"\n" for batch in walk.batches(parse_steps=True, plain_begins=plain) for line in text.lines(batch))


@pytest.mark.parametrize("all_", [False, True], ids=["effective", "all"])
def test_fast_lines_are_the_whole_parse_lines(tmp_path: Path, all_: bool) -> None:
    run = _journal(tmp_path)
    want = _reference(run, all_)
    assert b"\xe2\x80\xa6" in want and b"\xe2\x8f\x8e" in want and b"[tool search]" in want  # the shapes are there
    assert (b"~ " in want) == all_
    for chunk in (1 << 20, 4096, 700, 256):
        assert _streamed(run, all_, chunk) == want, chunk
    assert _streamed(run, all_, 4096, plain_begins=False) == want


def test_the_command_prints_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _journal(tmp_path)
    for argv, all_ in ((["log", str(run)], False), (["log", str(run), "--all"], True)):
        buf = io.BytesIO()
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(buf, encoding="utf-8"))
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        assert main(argv) == 0
        sys.stdout.flush()
        assert buf.getvalue() == _reference(run, all_)


def test_the_fast_loop_takes_the_common_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that can fail: the writer's plain begin and step lines never reach ``canon`` or ``other``."""
    run = _journal(tmp_path)
    pl = stream.plan(run, pairs=True)
    assert pl.paired
    seen: list[int] = []
    walk = stream.Walk(run, pl)

    def canon(self: TextLog, item: stream.Row) -> bytes:
        seen.append(int(item[0]))
        return b"c"

    def other(self: TextLog, item: stream.Row) -> bytes:
        seen.append(int(item[0]))
        return b"o"

    monkeypatch.setattr(TextLog, "canon", canon)
    monkeypatch.setattr(TextLog, "other", other)
    text = TextLog(Pairing(keep_paired=False), False)
    lines = [text.lines(batch) for batch in walk.batches(parse_steps=True, plain_begins=True)]
    assert sum(map(len, lines)) > 80
    raw = (run / "journal.jsonl").read_bytes().splitlines()
    names = {orjson.loads(raw[i]).get("step") for i in seen if b"not-json" not in raw[i]}
    assert not {n for n in names if isinstance(n, str) and n.startswith(("again:", "plain", "long", "model:", "tool:"))}
    assert {"failed", "wrong-seq", "esc\"aped\\name", "float-seq", "bool-pos"} <= names
    assert any(b"not-json" in raw[i] for i in seen)


def test_line_numbers_count_from_the_nearer_point() -> None:
    data = b"".join(b"line %d\n" % i for i in range(50))
    starts = {0, data.index(b"line 7\n"), data.index(b"line 24\n"), data.index(b"line 25\n"), data.index(b"line 49\n")}
    assert stream._line_numbers(data, 50, starts) == [(s, data.count(b"\n", 0, s)) for s in sorted(starts)]
    assert stream._line_numbers(data, 50, set()) == []
