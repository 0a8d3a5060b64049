"""The reader's sparse line index (an anchor every ``ANCHOR`` lines): exact gets and ranges, bounded memory."""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import tracemalloc
from pathlib import Path

import orjson
import pytest

from supervisor.core import journal_reader as journal
from supervisor.core.journal_reader import ANCHOR, JournalReader
from supervisor.core.journal_writer import JournalWriter
from supervisor.core.records import BadLine
from supervisor.core.segments import segment_paths


def _oracle(source: Path) -> list[journal.Entry | None]:
    """Every line of the stream parsed on its own (what ``get`` must give), BadLines with their offsets."""
    out: list[journal.Entry | None] = []
    for path in segment_paths(source):
        data = path.read_bytes()
        data = data[: data.rfind(b"\n") + 1]  # committed lines only
        at = 0
        for k, raw in enumerate(data.split(b"\n")[:-1]):
            ent = journal._parse(raw, len(out), path, k + 1)
            if type(ent) is BadLine:
                ent = dataclasses.replace(ent, offset=at)
            out.append(ent)
            at += len(raw) + 1
    return out


def _line(seq: int, rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.03:
        return b""  # blank: no record
    if r < 0.06:
        return b"not json " + b"x" * rng.randint(0, 40)  # a bad line
    if r < 0.08:
        return orjson.dumps({"kind": "note", "message": "y" * rng.randint(300, 3000), "seq": seq})  # long
    return orjson.dumps({"kind": "step", "step": f"s{seq}", "pos": seq, "output": "z" * rng.randint(0, 60), "seq": seq})


def _write(path: Path, first_seq: int, n: int, rng: random.Random, mode: str = "ab") -> None:
    with open(path, mode) as f:
        f.write(b"".join(_line(first_seq + k, rng) + b"\n" for k in range(n)))


def _check(reader: JournalReader, want: list[journal.Entry | None], rng: random.Random, gets: int = 300) -> None:
    n = len(want)
    assert len(reader) == n
    for seq in [0, n - 1, *(rng.randrange(n) for _ in range(gets))]:
        assert reader.get(seq) == want[seq], seq
    for _ in range(gets // 3):
        a = rng.randrange(n)
        b = min(n, a + rng.choice([1, 2, ANCHOR - 1, ANCHOR, ANCHOR + 1, 3 * ANCHOR + 5, 1000]))
        assert reader.get_range(a, b) == [e for e in want[a:b] if e is not None], (a, b)
    assert reader.get_range(0, n) == [e for e in want if e is not None]
    with pytest.raises(IndexError):
        reader.get(n)


@pytest.mark.parametrize("chunk", [97, 4096, journal.CHUNK])
def test_random_gets_and_ranges_match_the_lines_across_segments(tmp_path: Path, chunk: int) -> None:
    rng = random.Random(chunk)
    run = tmp_path / "run"
    run.mkdir()
    # sealed segments of lengths around the anchor spacing, then the active file
    seq = 0
    for i, n in enumerate([ANCHOR - 1, 1, ANCHOR, 700]):
        _write(run / f"journal.{i + 1:06d}.jsonl", seq, n, rng)
        seq += n
    _write(run / "journal.jsonl", seq, 2 * ANCHOR + 3, rng)
    want = _oracle(run)
    reader = JournalReader(run, chunk=chunk)
    assert reader.index() == len(want)
    assert any(type(e) is BadLine for e in want) and None in want
    _check(reader, want, rng)
    # growth at every place in an anchor's block, a torn line last (not committed: not indexed)
    for n in [1, ANCHOR - 2, 1, ANCHOR, ANCHOR + 1, 5]:
        _write(run / "journal.jsonl", len(want), n, rng)
        want = _oracle(run)
        assert reader.index() == len(want)
        _check(reader, want, rng, gets=60)
    with open(run / "journal.jsonl", "ab") as f:
        f.write(b'{"kind":"step","torn')
    assert reader.index() == len(want)
    _check(reader, want, rng, gets=60)


def test_twins_share_one_index_and_follow_a_rotating_writer(tmp_path: Path) -> None:
    """The writer's real rotation (a rename: the index stays with the inode); two twins indexing in turn,
    as the dashboard's worker and UI thread do, share one index and never add an anchor twice."""
    rng = random.Random(3)
    run = tmp_path / "run"
    w = JournalWriter(run, durable=False, rotate_bytes=20_000)
    try:
        a = JournalReader(run)
        a.index()
        b = a.twin()
        readers = [a, b]
        for round_ in range(12):
            for _ in range(rng.choice([1, ANCHOR - 1, ANCHOR, 150])):
                w.append({"kind": "step", "step": "s", "pos": 0, "output": "o" * rng.randint(0, 200)}, sync=False)
            r = readers[round_ % 2]
            r.index()
            want = _oracle(run)
            _check(r, want, rng, gets=40)
        assert len(segment_paths(run)) >= 4  # it rotated
        a.index()
        b.index()
        for sa, sb in zip(a._segs, b._segs, strict=True):
            if sa.lines is sb.lines:
                assert list(sa.lines.starts) == list(range(0, sa.lines.n, ANCHOR))  # one anchor per block, none twice
        assert any(sa.lines is sb.lines for sa, sb in zip(a._segs, b._segs, strict=True))
    finally:
        w.close()


def test_a_file_rewritten_in_place_is_indexed_again(tmp_path: Path) -> None:
    rng = random.Random(5)
    path = tmp_path / "journal.jsonl"
    _write(path, 0, 500, rng, "wb")
    reader = JournalReader(path)
    reader.index()
    ino = os.stat(path).st_ino
    new = b"".join(_line(k, random.Random(6)) + b"\n" for k in range(300))
    with open(path, "r+b") as f:  # other lines over the first bytes, and shorter: the old end is past the new one
        f.write(new)
        f.truncate(len(new))
    assert os.stat(path).st_ino == ino
    want = _oracle(path)
    assert reader.index() == len(want)
    _check(reader, want, rng)


def test_the_index_holds_a_fraction_of_a_byte_a_line(tmp_path: Path) -> None:
    """200,000 lines indexed keep under half a byte each (a start offset a line, as before, was 8 bytes)."""
    n = 200_000
    path = tmp_path / "journal.jsonl"
    with open(path, "wb") as f:
        f.write(b"".join(b'{"kind":"step","step":"s","pos":%d,"seq":%d}\n' % (i, i) for i in range(n)))
    reader = JournalReader(path)
    gc.collect()
    tracemalloc.start()
    try:
        assert reader.index() == n
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < n // 2, f"{kept / n:.2f} bytes a line"  # 8 bytes a line would be 1.6 MB
    assert reader.get(n - 1)["pos"] == n - 1  # type: ignore[index]
    assert reader.get(123_457)["pos"] == 123_457  # type: ignore[index]


def test_large_records_are_read_a_line_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines of 300 kB (and one among small ones) are anchored each: a get or a screen's range reads about the
    lines it wants, not the 64 lines before them (with an anchor every 64th line only: 19 MB for one line)."""
    rng = random.Random(9)
    path = tmp_path / "journal.jsonl"
    big = b"x" * 300_000
    with open(path, "wb") as f:
        for i in range(70):
            f.write(orjson.dumps({"kind": "note", "seq": i, "blob": big.decode()}) + b"\n")
        for i in range(70, 200):  # small lines, then one large one, then small ones, in one block of 64
            blob = big.decode() if i == 150 else "y" * rng.randint(0, 50)
            f.write(orjson.dumps({"kind": "note", "seq": i, "blob": blob}) + b"\n")
    reader = JournalReader(path)
    assert reader.index() == 200
    want = _oracle(path)
    read = [0]
    real = os.pread

    def counting(fd: int, n: int, off: int) -> bytes:
        data = real(fd, n, off)
        read[0] += len(data)
        return data

    monkeypatch.setattr(os, "pread", counting)
    for i in [0, 62, 63, 69, 151, 199]:
        read[0] = 0
        assert reader.get(i) == want[i]
        assert read[0] < 2 * len(big), (i, read[0])
        read[0] = 0
        assert reader.get_range(i, i + 1) == [want[i]]
        assert read[0] < 2 * len(big), (i, read[0])
    monkeypatch.undo()
    _check(reader, want, rng)


@pytest.mark.timeout(60)
def test_a_twin_reads_while_the_other_indexes(tmp_path: Path) -> None:
    """The UI's reader gets lines it has counted while the worker's twin indexes a growing file into the same
    index (some records over ``ANCHOR_BYTES``: byte anchors are added meanwhile too); every line read is its own."""
    import threading

    run = tmp_path / "run"
    w = JournalWriter(run, durable=False)
    a = JournalReader(run, chunk=4096)
    a.index()
    b = a.twin()
    stop = threading.Event()
    turns = threading.Semaphore(1)  # a round of appends and an index per 10 reads: the file grows with the reads

    def indexer() -> None:
        rng = random.Random(1)
        while not stop.is_set():
            if not turns.acquire(timeout=0.1):
                continue
            for _ in range(rng.randint(1, 300)):
                size = 70_000 if rng.random() < 0.01 else rng.randint(0, 300)
                w.append({"kind": "step", "step": "s", "pos": 0, "output": "o" * size}, sync=False)
            a.index()

    t = threading.Thread(target=indexer)
    t.start()
    rng = random.Random(2)
    checks = 0
    try:
        while checks < 3000 and t.is_alive():
            n = b._segs[0].lines.n if b._segs else 0  # b reads what the shared index counted (the UI between swaps)
            if not n:
                continue
            s = rng.randrange(n)
            e = b.get(s)
            assert isinstance(e, dict) and e["seq"] == s, (s, e)
            lo = rng.randrange(n)
            hi = min(n, lo + rng.randint(1, 200))
            assert [x["seq"] for x in b.get_range(lo, hi)] == list(range(lo, hi))  # type: ignore[index]
            checks += 1
            if checks % 10 == 0:
                turns.release()
    finally:
        stop.set()
        t.join()
        w.close()
    assert checks == 3000
