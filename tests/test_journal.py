"""Journal writer and reader: durability, torn tails, rotation, tolerance, lazy access."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.core.journal import (
    JournalReader,
    JournalWriter,
    count_lines,
    segment_paths,
)
from supervisor.core.records import BadLine
from supervisor.errors import JournalLockedError


def write_records(run_dir: Path, n: int, **kw: object) -> None:
    with JournalWriter(run_dir, **kw) as w:  # type: ignore[arg-type]
        for i in range(n):
            w.append({"kind": "step", "step": f"s:{i}", "output": {"i": i}})


def records(entries: list) -> list[dict]:
    return [e for e in entries if not isinstance(e, BadLine)]


def test_writer_assigns_dense_seq_ids_and_times(tmp_path: Path) -> None:
    write_records(tmp_path, 5)
    recs = records(JournalReader(tmp_path).load())
    assert [r["seq"] for r in recs] == [0, 1, 2, 3, 4]
    assert len({r["id"] for r in recs}) == 5
    assert all(r["ts"].endswith("Z") for r in recs)
    # a second writer continues the sequence
    write_records(tmp_path, 2)
    assert [r["seq"] for r in records(JournalReader(tmp_path).load())] == list(range(7))


def test_files_are_private(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_records(run, 1)
    assert (run.stat().st_mode & 0o777) == 0o700
    assert ((run / "journal.jsonl").stat().st_mode & 0o777) == 0o600


def test_second_writer_is_refused(tmp_path: Path) -> None:
    with JournalWriter(tmp_path):
        with pytest.raises(JournalLockedError, match="another process is writing"):
            JournalWriter(tmp_path)


def test_reader_accepts_minimal_prefixed_and_aliased_lines(tmp_path: Path) -> None:
    lines = [
        b'{"step": "plan", "output": "p"}',
        b'2026-11-29 10:00:01,123 | INFO | {"action": "search", "result": [1, 2], "timestamp": "t1"}',
        b'{"name": "summarize", "result": "s", "extra": {"kept": true}}',
        b"this is not json",
        b"[1, 2, 3]",
        b"",
        b'{"kind": "note", "message": "hi"}',
    ]
    (tmp_path / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    reader = JournalReader(tmp_path)
    entries = reader.load()
    recs = records(entries)
    assert [(r["kind"], r.get("step"), r.get("output")) for r in recs] == [
        ("step", "plan", "p"),
        ("step", "search", [1, 2]),
        ("step", "summarize", "s"),
        ("note", None, None),
    ]
    assert recs[1]["ts"] == "t1" and recs[1]["prefix"].startswith("2026-11-29 10:00:01,123")
    assert recs[2]["extra"] == {"kept": True}
    assert [r["seq"] for r in recs] == [0, 1, 2, 6]
    bad = [(b.line, b.reason) for b in reader.problems]
    assert bad == [(4, "not JSON"), (5, "a JSON list, not an object")]
    assert "journal.jsonl:4" in str(reader.problems[0])


def test_torn_tail_is_ignored_by_readers_and_moved_aside_by_the_next_writer(tmp_path: Path) -> None:
    write_records(tmp_path, 3)
    journal = tmp_path / "journal.jsonl"
    with open(journal, "ab") as f:
        f.write(b'{"kind": "step", "step": "half')
    assert len(records(JournalReader(tmp_path).load())) == 3
    assert [r["seq"] for r in JournalReader(tmp_path).tail(2)] == [1, 2]
    w = JournalWriter(tmp_path)
    assert w.repaired_bytes == len(b'{"kind": "step", "step": "half')
    w.append({"kind": "note"})
    w.close()
    assert (tmp_path / "journal.jsonl.torn").read_bytes() == b'{"kind": "step", "step": "half\n'
    assert [r["seq"] for r in records(JournalReader(tmp_path).load())] == [0, 1, 2, 3]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_truncation_at_every_offset_of_the_last_record_loses_nothing(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Property: cut the journal anywhere inside its last record; earlier records load, the next writer keeps the torn bytes."""
    run = tmp_path_factory.mktemp("torn")
    outputs = data.draw(st.lists(st.text(max_size=30) | st.integers(-(2**63), 2**63 - 1) | st.none(), min_size=1, max_size=5))
    with JournalWriter(run) as w:
        for i, out in enumerate(outputs):
            w.append({"kind": "step", "step": f"s{i}", "output": out})
    journal = run / "journal.jsonl"
    full = journal.read_bytes()
    last_start = full.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(last_start, len(full)):  # every byte offset inside the last record
        journal.write_bytes(full[:cut])
        (run / "journal.jsonl.torn").unlink(missing_ok=True)
        earlier = records(JournalReader(run).load())
        assert [r["output"] for r in earlier] == outputs[:-1]
        with JournalWriter(run) as w:
            w.append({"kind": "note", "message": "after repair"})
        torn = (run / "journal.jsonl.torn").read_bytes() if cut > last_start else b""
        assert torn == (full[last_start:cut] + b"\n" if cut > last_start else b"")
        after = records(JournalReader(run).load())
        assert [r.get("output") for r in after[:-1]] == outputs[:-1]
        assert after[-1]["message"] == "after repair" and after[-1]["seq"] == len(outputs) - 1


def test_rotation_seals_segments_and_readers_see_one_stream(tmp_path: Path) -> None:
    write_records(tmp_path, 50, rotate_bytes=1000)
    segs = segment_paths(tmp_path)
    assert len(segs) > 3 and segs[-1].name == "journal.jsonl" and segs[0].name == "journal.000001.jsonl"
    recs = records(JournalReader(tmp_path).load())
    assert [r["output"]["i"] for r in recs] == list(range(50))
    assert [r["seq"] for r in recs] == list(range(50))
    assert count_lines(tmp_path) == 50
    r = JournalReader(tmp_path)
    assert r.index() == 50
    assert [e["seq"] for e in r.get_range(0, 50)] == list(range(50))
    assert r.get(37)["output"] == {"i": 37}
    assert [e["seq"] for e in r.tail(7)] == list(range(43, 50))


def test_tail_reads_only_the_end_and_counts_without_seq(tmp_path: Path) -> None:
    lines = [orjson.dumps({"step": f"s{i}", "output": i}) for i in range(1000)]
    (tmp_path / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    tail = JournalReader(tmp_path).tail(3)
    assert [(e["seq"], e["output"]) for e in tail] == [(997, 997), (998, 998), (999, 999)]


def test_read_new_follows_appends_across_rotation(tmp_path: Path) -> None:
    w = JournalWriter(tmp_path, rotate_bytes=600)
    reader = JournalReader(tmp_path)
    assert reader.read_new() == []
    seen: list[int] = []
    for i in range(40):
        w.append({"kind": "step", "step": f"s{i}", "output": i})
        if i % 7 == 0:
            seen += [e["output"] for e in reader.read_new()]
    # a line in progress is not returned until its newline is written
    os.write(os.open(tmp_path / "journal.jsonl", os.O_WRONLY | os.O_APPEND), b'{"kind": "note"')
    seen += [e["output"] for e in reader.read_new()]
    assert seen == list(range(40))
    w.close()


def test_index_and_random_access_match_a_full_load(tmp_path: Path) -> None:
    write_records(tmp_path, 300)
    r = JournalReader(tmp_path)
    assert r.index() == 300 and len(r) == 300
    full = records(JournalReader(tmp_path).load())
    assert r.get_range(100, 110) == full[100:110]
    with pytest.raises(IndexError):
        r.get(300)
