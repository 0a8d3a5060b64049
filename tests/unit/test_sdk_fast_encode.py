"""The SDK's and the journal writer's fast encodings give the bytes of the full options they stand in for.

Lines, outputs and inputs hashes are first encoded without ``OPT_NON_STR_KEYS`` (about half the cost per line),
and again with the full options on a ``TypeError``: the bytes must be the same either way (the run-directory
format is a public contract), and a value only the full options accept must still be encoded by them.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor import Run
from supervisor.core import journal_writer as journal
from supervisor.replay.session import inputs_hash


@dataclasses.dataclass
class Point:
    x: int
    y: float


VALUES: list[Any] = [
    {},
    {"args": [1, "two", 3.5, None, True]},
    {"kwargs": {"b": 1, "a": [1, {"z": 2, "y": 3}]}},
    {"args": [{1: "int key", "s": "str"}]},  # non-str keys: the full options
    {"args": [Point(1, 2.5)], "kwargs": {"when": datetime.datetime(2026, 11, 29, 18, 30, tzinfo=datetime.UTC)}},
    {"args": [decimal.Decimal("1.5")]},  # not JSON: inputs_hash's repr default
    {"args": ["é ✓ \u2028", 2**63 - 1, -(2**63)]},
    {"kwargs": {"nested": {"b": {"d": 1, "c": 2}, "a": []}}},
]


@pytest.mark.parametrize("inputs", VALUES)
def test_line_bytes_and_hash_are_the_full_options(inputs: dict[str, Any], tmp_path: Path) -> None:
    rec = {"kind": "begin", "step": "s", "pos": 0, "attempt": 1, "inputs": inputs, "id": "ab7", "ts": "t"}
    with journal.JournalWriter(tmp_path / "lines") as w:
        try:
            w.append(rec, sync=False)  # gives rec its seq
        except TypeError:
            with pytest.raises(TypeError):
                orjson.dumps(rec, option=journal._LINE_OPTS)
        else:
            assert (tmp_path / "lines" / "journal.jsonl").read_bytes() == orjson.dumps(rec, option=journal._LINE_OPTS) + b"\n"
    with Run.open(tmp_path / "run") as run:
        # the step record's inputs_hash is inputs_hash's, whichever encoding gave it
        got = run.step("s", lambda *a, **k: None, *inputs.get("args", []), **inputs.get("kwargs", {}))
        assert got is None
    (last,) = [r for r in map(orjson.loads, (tmp_path / "run" / "journal.jsonl").read_bytes().splitlines()) if r["kind"] == "step"]
    assert last["inputs_hash"] == inputs_hash(inputs)

@pytest.mark.parametrize(
    "out",
    [{"value": 1}, {1: "a", 2: ["b"]}, [1, {"k": {3: 4}}], "text", None, {"b": 2, "a": 1}],
)
def test_output_bytes_are_the_full_options(out: Any, tmp_path: Path) -> None:
    with Run.open(tmp_path / "run") as run:
        assert run.step("s", lambda: out) == out
    (line,) = [x for x in (tmp_path / "run" / "journal.jsonl").read_bytes().splitlines() if x.startswith(b'{"kind":"step"')]
    assert b'"output":' + orjson.dumps(out, option=orjson.OPT_NON_STR_KEYS) + b"," in line
