"""The resume view's read (``JournalReader.load(lazy=True)``) gives what the lines' prefixes say: successful step
lines unparsed, begin lines left out, every other line parsed, and the same overlap answer as the begins' next
lines, on journals mixing SDK lines with foreign kinds, short lines, text and failed steps, read in regions of
several sizes. The prefixes are written out here, not taken from the module: a wrong constant there fails this."""

from __future__ import annotations

import random
from itertools import pairwise
from pathlib import Path

import orjson

from supervisor.core import wire
from supervisor.core.journal_reader import JournalReader
from supervisor.core.records import LazyRecord


def _line(kind: str, seq: int, rng: random.Random) -> bytes:
    if kind == "step":
        return orjson.dumps({"kind": "step", "step": f"s:{seq}", "pos": seq, "output": rng.choice([None, 1, "p", [1]]), "seq": seq})
    if kind == "failed":
        return orjson.dumps({"kind": "step", "step": f"s:{seq}", "pos": seq, "error": {"type": "E"}, "seq": seq})
    if kind == "begin":
        return orjson.dumps({"kind": "begin", "step": f"s:{seq}", "pos": seq, "seq": seq})
    if kind == "text":
        return b"not a record at all"
    if kind == "short":
        return b"{}"
    # start, rollback, note, and foreign kinds whose names begin as a step's ("skip") or a begin's ("audit") does
    return orjson.dumps({"kind": kind, "seq": seq})


# the SDK's own lines (orjson, "kind" first): the prefixes the resume view tells them by
_STEP_PREFIX = b'{"kind":"step",'
_BEGIN_PREFIX = b'{"kind":"begin",'
_AFTER_BEGIN = (_STEP_PREFIX, b'{"kind":"start",', b'{"kind":"rollback",')  # no overlap when a begin is followed by one

KINDS = ["step"] * 8 + ["begin"] * 8 + ["failed", "text", "short", "start", "rollback", "note", "skip", "audit", "checkpoint"]


def _expected_overlap(data: bytes) -> bool:
    """Overlapping steps as the prefixes tell: a begin line followed by a line that is no step, start or rollback."""
    lines = data.split(b"\n")[:-1]
    return any(a.startswith(_BEGIN_PREFIX) and not b.startswith(_AFTER_BEGIN) for a, b in pairwise(lines))


def test_kind_letters_give_what_the_prefixes_give(tmp_path: Path) -> None:
    rng = random.Random(15)
    for case in range(60):
        rare = case % 3 == 0  # a third of the journals: SDK step and begin lines only, the rest mixed
        kinds = [rng.choice(["step", "begin"] if rare else KINDS) for _ in range(rng.randint(1, 120))]
        lines = [_line(k, i, rng) for i, k in enumerate(kinds)]
        data = b"\n".join(lines) + b"\n"
        run = tmp_path / f"run{case}"
        run.mkdir()
        (run / "journal.jsonl").write_bytes(data)
        full = JournalReader(run).load()
        for chunk in (64, 1000, 1 << 20):
            view = JournalReader(run, chunk=chunk).resume_view()
            got = view.entries
            lazy = [e for e in got if type(e) is LazyRecord]
            kept = {e.seq if type(e) is LazyRecord else e["seq"] if type(e) is dict else e.seq for e in got}
            for seq, raw in enumerate(lines):
                is_lazy = raw.startswith(_STEP_PREFIX) and b'"error"' not in raw
                dropped = raw.startswith(_BEGIN_PREFIX) and b'"error"' not in raw
                assert (seq in kept) == (not dropped), (case, chunk, seq, raw)
                assert (seq in {e.seq for e in lazy}) == is_lazy, (case, chunk, seq, raw)
            by_seq = {e["seq"] if type(e) is dict else e.seq: e for e in full}
            for e in lazy:
                assert e.record() | {"pos": by_seq[e.seq]["pos"]} == by_seq[e.seq]
            maps = {e.src for e in lazy}
            for m in maps:
                assert view.overlaps.get(m, wire.overlaps(m)) == _expected_overlap(data), (case, chunk)
