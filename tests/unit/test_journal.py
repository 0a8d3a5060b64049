"""Journal writer and reader: durability, torn tails, rotation, tolerance, lazy access."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.core.journal_reader import Entry, JournalReader
from supervisor.core.journal_writer import JournalWriter, open_journal
from supervisor.core.records import BadLine, Kind, LazyRecord, normalize, parse_line
from supervisor.core.segments import (
    JournalFile,
    StreamPos,
    count_lines,
    read_stream,
    segment_paths,
)
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
    with JournalWriter(tmp_path), pytest.raises(JournalLockedError, match="another process is writing"):
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


# --------------------------------------------------------------------------- the one reader primitive

_TEXT = st.text(alphabet=st.characters(blacklist_characters="\n\r{", blacklist_categories=("Cs",)), max_size=40)
_LINE = st.one_of(
    st.tuples(st.just("step"), _TEXT),
    st.tuples(st.just("failed"), _TEXT),
    st.tuples(st.just("begin"), _TEXT),
    st.tuples(st.just("note"), _TEXT),
    st.tuples(st.just("foreign"), _TEXT),  # json.dumps spacing, no seq
    st.tuples(st.just("prefixed"), _TEXT),  # a text prefix, as Python's logging writes it
    st.tuples(st.just("bad"), _TEXT),
    st.tuples(st.just("list"), _TEXT),
    st.tuples(st.just("blank"), _TEXT),
    st.tuples(st.just("long"), st.integers(20, 300)),  # longer than the tiny chunks used below
)


def _render(kind: str, arg: object, seq: int) -> bytes:
    """One journal line for a drawn template, at ``seq``."""
    if kind == "step":
        return orjson.dumps({"kind": "step", "seq": seq, "ts": "t", "step": f"s{seq}", "output": arg})
    if kind == "failed":
        return orjson.dumps({"kind": "step", "seq": seq, "ts": "t", "step": f"s{seq}", "error": {"message": arg}})
    if kind == "begin":
        return orjson.dumps({"kind": "begin", "seq": seq, "ts": "t", "step": f"s{seq}"})
    if kind == "note":
        return orjson.dumps({"kind": "note", "seq": seq, "ts": "t", "message": arg})
    if kind == "foreign":
        return json.dumps({"step": "x", "output": arg}).encode()
    if kind == "prefixed":
        return b"2026-11-29 10:00:01 | INFO | " + json.dumps({"action": "a", "result": arg}).encode()
    if kind == "bad":
        return b"not json " + str(arg).encode()
    if kind == "list":
        return b"[1, 2]"
    if kind == "blank":
        return b"  " if arg else b""
    assert isinstance(arg, int)
    return orjson.dumps({"kind": "step", "seq": seq, "ts": "t", "step": "long", "output": "x" * arg})


@dataclass
class _Journal:
    """Files written for a test, with what a reader must find in them."""

    files: list[Path]
    lines: list[tuple[Path, int, bytes]]  # every committed line: file, line number, bytes
    committed: dict[Path, bytes]
    torn: bytes


def _journal_files(run: Path, segments: list[list[tuple[str, object]]], torn: bytes) -> _Journal:
    """Sealed segments, then the active file (the last list) with ``torn`` after its last newline."""
    run.mkdir(parents=True, exist_ok=True)
    files = [run / f"journal.{i + 1:06d}.jsonl" for i in range(len(segments) - 1)] + [run / "journal.jsonl"]
    seq = 0
    out = _Journal(files, [], {}, torn)
    for path, templates in zip(files, segments, strict=True):
        body = b""
        for k, (kind, arg) in enumerate(templates):
            line = _render(kind, arg, seq)
            out.lines.append((path, k + 1, line))
            body += line + b"\n"
            seq += 1
        out.committed[path] = body
        path.write_bytes(body + (torn if path == files[-1] else b""))
    return out


def _expected(j: _Journal) -> list[Entry]:
    """What every reader must return, built straight from ``parse_line``/``normalize``."""
    out: list[Entry] = []
    for seq, (path, line_no, raw) in enumerate(j.lines):
        if not raw.strip():
            continue
        try:
            rec = parse_line(raw)
        except ValueError as e:
            out.append(BadLine(str(path), line_no, seq, str(e), raw[:200].decode("utf-8", "replace")))
            continue
        out.append(normalize(rec, seq))
    return out


def _seq_of(e: Entry) -> int:
    return e.seq if isinstance(e, BadLine) else int(e["seq"])


_JOURNALS = st.tuples(
    st.lists(st.lists(_LINE, max_size=8), min_size=1, max_size=4),
    st.one_of(st.just(b""), st.binary(min_size=1, max_size=30).map(lambda b: b.replace(b"\n", b"x"))),
    st.integers(1, 64),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(drawn=_JOURNALS)
def test_regions_are_exactly_the_committed_lines_from_any_line_start(tmp_path_factory: pytest.TempPathFactory, drawn: tuple) -> None:
    """Property: from every line start, the regions tile the committed bytes, each starting at a line start with its seq and line."""
    segments, torn, chunk = drawn
    j = _journal_files(tmp_path_factory.mktemp("regions"), segments, torn)
    starts: dict[Path, list[tuple[int, int, int]]] = {p: [] for p in j.files}  # (offset, seq, line) of each line start
    seq = 0
    for p in j.files:
        off = 0
        for line_no, raw in enumerate(j.committed[p].split(b"\n")[:-1], 1):
            starts[p].append((off, seq, line_no))
            off += len(raw) + 1
            seq += 1
        starts[p].append((off, seq, len(starts[p]) + 1))  # the committed end
    for p in j.files:
        at = {off: (s, ln) for off, s, ln in starts[p]}
        with JournalFile.open(p) as jf:  # type: ignore[union-attr]
            assert jf.end == len(j.committed[p]) and jf.torn == (p == j.files[-1] and bool(torn))
            for off, s, ln in starts[p]:
                regions = list(jf.chunks(off, s, ln, chunk=chunk))
                assert b"".join(c.data for c in regions) == j.committed[p][off:]
                pos = off
                for c in regions:
                    r = c.region
                    assert (r.path, r.start, r.ino) == (p, pos, jf.ino) and r.end == pos + len(c.data)
                    assert (r.first_seq, r.first_line) == at[r.start]  # a line start, with its seq and line
                    assert c.data.endswith(b"\n") and (len(c.data) <= chunk or c.data.count(b"\n") == 1)
                    pos = r.end
    # the stream: the files one after another, from every line start
    sizes = [p.stat().st_size for p in j.files]
    everything = b"".join(j.committed[p] for p in j.files)
    for i, p in enumerate(j.files):
        base = sum(sizes[:i])
        for off, s, ln in starts[p]:
            pos = StreamPos(base + off, s, ln)
            got = list(read_stream(p.parent, pos, chunk=chunk))
            assert b"".join(c.data for c in got) == everything[sum(len(j.committed[q]) for q in j.files[:i]) + off :]
            assert pos.seq == len(j.lines)
            last = j.files[-1]
            assert pos.offset == sum(sizes[:-1]) + len(j.committed[last])
            assert pos.line == len(j.committed[last].split(b"\n"))  # the line after the last committed one


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(drawn=_JOURNALS, data=st.data())
def test_every_reader_returns_the_same_entries_with_their_seq_and_line(
    tmp_path_factory: pytest.TempPathFactory, drawn: tuple, data: st.DataObject
) -> None:
    """Property: load (plain, lazy), index + get_range/get, tail(n), read_new and count_lines agree, bad lines included."""
    segments, torn, chunk = drawn
    j = _journal_files(tmp_path_factory.mktemp("readers"), segments, torn)
    run = j.files[-1].parent
    want = _expected(j)
    total = len(j.lines)
    r = JournalReader(run, chunk=chunk)
    assert r.load() == want and r.problems == [e for e in want if isinstance(e, BadLine)]
    assert r.end_seq == total and r.read_new() == []
    assert count_lines(run, chunk=chunk) == total
    # the resume view: successful writer steps unparsed, begin lines left out, the rest as load gives them
    lazy = JournalReader(run, chunk=chunk).load(lazy=True)
    kept = [
        e for e, (_, _, raw) in zip(want, [x for x in j.lines if x[2].strip()], strict=True)
        if not (raw.startswith(b'{"kind":"begin",') and b'"error"' not in raw)
    ]
    assert [_seq_of(e) for e in lazy] == [_seq_of(e) for e in kept]
    for got, exp in zip(lazy, kept, strict=True):
        if isinstance(got, LazyRecord):
            rec = got.record()
            del rec["pos"]
            assert rec == exp and got.kind == Kind.STEP
        else:
            assert got == exp
    # random access after the index
    ix = JournalReader(run, chunk=chunk)
    assert ix.index() == total and len(ix) == total
    assert ix.get_range(0, total) == want
    a = data.draw(st.integers(0, total), label="a")
    b = data.draw(st.integers(a, total), label="b")
    assert ix.get_range(a, b) == [e for e in want if a <= _seq_of(e) < b]
    if total:
        s = data.draw(st.integers(0, total - 1), label="get")
        assert ix.get(s) == next((e for e in want if _seq_of(e) == s), None)
    # the tail
    n = data.draw(st.integers(0, total + 2), label="tail")
    assert JournalReader(run, chunk=chunk).tail(n) == [e for e in want if _seq_of(e) >= total - n]
    # after the tail, following from the end
    follower = JournalReader(run, chunk=chunk)
    follower.load()
    assert follower.end_seq == total and follower.read_new() == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(drawn=_JOURNALS, data=st.data())
def test_read_new_in_steps_while_lines_are_appended_and_rotated(
    tmp_path_factory: pytest.TempPathFactory, drawn: tuple, data: st.DataObject
) -> None:
    """Property: read_new called between appends (torn writes and rotations included) returns what a full load does."""
    segments, torn, chunk = drawn
    final = _journal_files(tmp_path_factory.mktemp("final"), segments, torn)
    run = tmp_path_factory.mktemp("live")
    reader = JournalReader(run, chunk=chunk)
    seen: list[Entry] = reader.read_new()
    active = run / "journal.jsonl"
    for _i, path in enumerate(final.files):
        body = final.committed[path] + (torn if path == final.files[-1] else b"")
        active.touch()
        pos = 0
        while pos < len(body):
            step = data.draw(st.integers(1, max(1, len(body) - pos)), label="append")
            with open(active, "ab") as f:  # any cut: mid-line too, read_new must wait for the newline
                f.write(body[pos : pos + step])
            pos += step
            seen += reader.read_new()
        if path != final.files[-1]:
            os.rename(active, run / path.name)  # a rotation: the active file becomes the sealed segment
            seen += reader.read_new()
    seen += reader.read_new()
    # the same entries as the files written at once, with the same line numbers; a bad line is named
    # by the file it was read from: journal.jsonl if it was read before that file was sealed
    want = [dataclasses.replace(e, path=str(run / Path(e.path).name)) if isinstance(e, BadLine) else e for e in _expected(final)]
    assert len(seen) == len(want)
    for got, exp in zip(seen, want, strict=True):
        if isinstance(got, BadLine) and isinstance(exp, BadLine) and got.path == str(active):
            got = dataclasses.replace(got, path=exp.path)
        assert got == exp
    assert reader.end_seq == len(final.lines)


def test_a_line_longer_than_many_chunks_is_read_once(tmp_path: Path) -> None:
    """A 3 MB line read with 1 kB chunks: one region, and reading it is linear, not quadratic."""
    (tmp_path / "journal.jsonl").write_bytes(
        b'{"kind":"note","seq":0}\n' + orjson.dumps({"kind": "note", "seq": 1, "x": "y" * 3_000_000}) + b"\n{}\n"
    )
    with JournalFile.open(tmp_path / "journal.jsonl") as jf:  # type: ignore[union-attr]
        regions = [c.region for c in jf.chunks(chunk=1024)]
    assert [(r.first_seq, r.first_line) for r in regions] == [(0, 1), (1, 2), (2, 3)]
    r = JournalReader(tmp_path, chunk=1024)
    assert [e["seq"] for e in r.load()] == [0, 1, 2] and len(r.tail(2)[0]["x"]) == 3_000_000
    assert r.index() == 3 and r.get(1)["x"] == "y" * 3_000_000


def test_bad_lines_have_their_file_and_line_in_every_reader(tmp_path: Path) -> None:
    """tail and read_new used to say line 0 (tail) or count from 0 on each call (read_new)."""
    write_records(tmp_path, 30, rotate_bytes=600)
    segs = segment_paths(tmp_path)
    assert len(segs) >= 3
    with open(segs[-1], "ab") as f:
        f.write(b"garbage\n")
    lines_in_active = len(segs[-1].read_bytes().splitlines())
    follower = JournalReader(tmp_path)
    follower.read_new()
    with open(segs[-1], "ab") as f:
        f.write(b"more garbage\n")
    where = (str(segs[-1]), lines_in_active + 1)
    [bad] = follower.read_new()
    assert isinstance(bad, BadLine) and (bad.path, bad.line, bad.seq) == (*where, 31)
    tail = JournalReader(tmp_path).tail(2)
    assert [(b.path, b.line, b.seq) for b in tail if isinstance(b, BadLine)] == [(str(segs[-1]), lines_in_active, 30), (*where, 31)]
    assert f"journal.jsonl:{lines_in_active + 1}" in str(tail[-1])


def test_open_journal_locks_repairs_and_loads_once(tmp_path: Path) -> None:
    write_records(tmp_path, 4)
    with open(tmp_path / "journal.jsonl", "ab") as f:
        f.write(b'{"kind": "step", "step": "ha')
    w, (entries, _) = open_journal(tmp_path, lazy=False)
    try:
        assert [e["seq"] for e in entries] == [0, 1, 2, 3] and w.next_seq == 4 and w.repaired_bytes > 0
        with pytest.raises(JournalLockedError):
            open_journal(tmp_path)
        w.append({"kind": "note"})
    finally:
        w.close()
    assert count_lines(tmp_path) == 5


def test_the_tui_scan_goes_on_mid_file_with_real_line_numbers(tmp_path: Path) -> None:
    """scan_journal's regions, then iter_new_regions from where it stopped, name each line like a full read."""
    from supervisor.views.scan import iter_new_regions, scan_journal, scan_positions

    with JournalWriter(tmp_path, rotate_bytes=700, durable=False) as w:
        for i in range(12):
            w.append({"kind": "step", "step": f"s{i}", "output": i})
        scan = scan_journal(tmp_path, index=False)
        at = scan_positions(scan.regions, scan.count)
        for i in range(3):
            w.append({"kind": "step", "step": f"t{i}", "output": i})
    active = tmp_path / "journal.jsonl"
    end, line = at[active.stat().st_ino]
    assert line == len(active.read_bytes()[:end].splitlines()) + 1
    for known in (line, None):  # passed by the caller, or found from the file's first seq
        [(region, data)] = list(iter_new_regions(active, end, scan.count, known))
        assert (region.first_seq, region.first_line, data.count(b"\n")) == (scan.count, line, 3)


def test_a_rotation_between_listing_and_open_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing says only journal.jsonl, but by the open it was sealed and a new one started: nothing is skipped."""
    from supervisor.core import segments

    write_records(tmp_path, 6, rotate_bytes=500)
    assert len(segment_paths(tmp_path)) >= 2
    real = segments.segment_paths
    stale = [tmp_path / "journal.jsonl"]
    calls = iter([stale])
    monkeypatch.setattr(segments, "segment_paths", lambda source: next(calls, None) or real(source))
    pos = StreamPos()
    data = b"".join(c.data for c in read_stream(tmp_path, pos))
    monkeypatch.undo()
    assert data == b"".join(p.read_bytes() for p in segment_paths(tmp_path)) and pos.seq == 6


def test_index_while_a_writer_rotates_never_shifts_seqs(tmp_path: Path) -> None:
    """A reader indexing while another thread appends and rotates every 20 kB reads every seq's own line.

    A segment renamed between the listing and the read once made the index skip a sealed
    segment, so seq 740 returned step s933.
    """
    import random
    import threading

    from supervisor.core.journal_reader import JournalReader
    from supervisor.core.journal_writer import JournalWriter

    for trial in range(3):
        run = tmp_path / f"run{trial}"
        w = JournalWriter(run, durable=False, rotate_bytes=20_000)
        w.append({"kind": "step", "step": "s0", "output": 0})
        reader = JournalReader(run)
        reader.index()
        total = 3000
        done = threading.Event()

        def write(w: JournalWriter = w, done: threading.Event = done) -> None:
            for i in range(1, total):
                w.append({"kind": "step", "step": f"s{i}", "output": i})
            done.set()

        t = threading.Thread(target=write, daemon=True)
        t.start()
        rng = random.Random(trial)
        try:
            while True:
                finished = done.is_set()
                n = reader.index()
                for seq in rng.sample(range(n), min(5, n)):
                    got = reader.get_range(seq, seq + 1)
                    assert got and got[0]["step"] == f"s{seq}", (seq, n, got)
                if finished:
                    assert n == total
                    break
        finally:
            t.join(10)
            w.close()
