"""The timeline keeps nothing per record that grows with the journal: a live load's memory stays flat (in process)."""

from __future__ import annotations

import bisect
import gc
import random
import tracemalloc
from pathlib import Path

import orjson
import pytest

from supervisor.core.history import Marker
from supervisor.core.records import Kind
from supervisor.views.filters import new_pass, parse_filter
from supervisor.views.scan import SeqBits, scan_journal
from supervisor.views.timeline import TimelineModel


def _steps(f: object, seq: int, pos: int, n: int) -> tuple[int, int]:
    """``n`` SDK-shaped steps (a begin and its step each), appended raw; return the next seq and pos."""
    buf = []
    for p in range(pos, pos + n):
        head = b'"step":"work:%d","pos":%d,"attempt":1,' % (p % 50, p)
        buf.append(b'{"kind":"begin",' + head + b'"inputs":{"args":[%d]},"seq":%d,"ts":"2026-11-30T12:00:00Z"}\n' % (p, seq))
        buf.append(b'{"kind":"step",' + head + b'"output":{"i":%d},"dur_ms":0.03,"seq":%d,"ts":"2026-11-30T12:00:00Z"}\n' % (p, seq + 1))
        seq += 2
    f.write(b"".join(buf))  # type: ignore[attr-defined]
    f.flush()  # type: ignore[attr-defined]
    return seq, pos + n


def test_a_live_load_adds_well_under_a_byte_a_record(tmp_path: Path) -> None:
    """60,000 records read live as the dashboard reads them (scan, index, one row per step, the last screen
    parsed; a filter every record but the start passes, fed by its pass) keep under a byte each once the
    parsed-record cache is set aside; offsets, folded begins and abandoned flags kept per record (13 bytes
    a record before, 16 more with the filter's seqs) would fail this. (Measured: 0.37 bytes a record
    without the filter, 0.70 with it; the bitmaps are a quarter of a byte, the index an eighth.)"""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    with open(run / "journal.jsonl", "ab") as f:
        f.write(orjson.dumps({"kind": "start", "attempt": 1, "seq": 0, "ts": "2026-11-30T12:00:00Z"}) + b"\n")
        seq, pos = _steps(f, 1, 0, 1_000)
        m = TimelineModel(run)
        m.open()
        m.adopt(scan_journal(run))
        flt = parse_filter("step:work:*")
        fpass = new_pass(flt, run)
        m.set_filter(flt, fpass.advance()[0])

        def load(steps: int) -> None:
            nonlocal seq, pos
            for _ in range(steps // 1000):
                seq, pos = _steps(f, seq, pos, 1000)
                m.poll()
                m.add_filtered(fpass.advance()[0])
                m.fetch(m.count - 40, m.count)

        load(5_000)
        m.cache.clear()  # bounded (CACHE_MAX), but how full it is depends on where the trim cycle stands
        gc.collect()
        tracemalloc.start()
        try:
            before, count = tracemalloc.get_traced_memory()[0], m.count
            load(30_000)
            m.cache.clear()
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    added = m.count - count
    assert added == 60_000 and m.rows == pos  # one row per step (the start does not pass)
    assert m.row_item(m.rows - 1) == ("rec", m.count - 1)
    assert grown < added, f"{grown / added:.2f} bytes a record"


def test_abandoned_ranges_and_folded_begins_match_a_plain_oracle() -> None:
    """Rollbacks' ranges (merged, overlapping, nested) and folded begins against per-record oracles."""
    rng = random.Random(11)
    for _ in range(60):
        n = rng.randint(1, 2000)
        m = TimelineModel(Path("/nonexistent/journal.jsonl"))
        m.count = n
        flags = bytearray(n)
        for _ in range(rng.randint(0, 8)):
            target, at = sorted(rng.sample(range(-1, n), 2))
            m._mark_abandoned(Marker(at, Kind.ROLLBACK, target_seq=target))
            flags[target + 1 : at] = b"\x01" * (at - target - 1)
        assert [s for s in range(n) if m.is_abandoned(s)] == [s for s in range(n) if flags[s]]
        for _ in range(20):
            a, b = sorted(rng.sample(range(n + 1), 2)) if n > 1 else (0, n)
            assert m.abandoned_count(a, b) == flags.count(1, a, b)
        hidden = sorted(rng.sample(range(n), rng.randint(0, n)))
        m.hidden = hidden
        assert isinstance(m.hidden, SeqBits) and list(m.hidden) == hidden and len(m.hidden) == len(hidden)
        hs = set(hidden)
        visible = [s for s in range(n + 50) if s not in hs]
        for i in rng.sample(range(len(visible)), min(len(visible), 50)):
            assert m.seq_at(i) == visible[i]
            assert m.visible_index(visible[i]) == i
        for s in rng.sample(range(n), min(n, 50)):
            assert m.visible_index(s) == s - bisect.bisect_left(hidden, s)
            assert m.is_hidden(s) == (s in hs)


def test_seqbits_rank_select_and_set_operations_match_a_sorted_list() -> None:
    rng = random.Random(2)
    for _ in range(30):
        n = rng.choice([10, 100, 5000, 20000])
        mem = set(rng.sample(range(n), rng.randint(0, n)))
        sb = SeqBits(mem)
        gone = rng.sample(range(n + 100), rng.randint(0, min(300, n)))
        assert sb.discard_many(gone) == len(mem & set(gone))
        mem -= set(gone)
        other = set(rng.sample(range(n + 5000), rng.randint(0, n)))
        assert list(sb.difference(SeqBits(other))) == sorted(mem - other)
        ml = sorted(mem)
        assert sb.tolist() == ml and len(sb) == len(ml) and sb.last() == (ml[-1] if ml else -1)
        for i in range(0, len(ml), max(1, len(ml) // 50)):
            assert sb.select(i) == ml[i]
        for _ in range(20):
            a, b = sorted(rng.sample(range(n + 50), 2))
            assert list(sb.iter_from(a, b)) == [s for s in ml if a <= s < b]
            assert sb.rank(a) == bisect.bisect_left(ml, a)
        for bad in (-1, len(ml)):
            with pytest.raises(IndexError):
                sb.select(bad)
        with pytest.raises(IndexError):
            SeqBits(mem).select_free(-1)  # fresh hints too (they once answered 1)
        c = sb.copy()
        c.add_many([n + 7])
        assert n + 7 not in sb and n + 7 in c
        # consecutive selects (a screen's rows) go on from the last answer, forgotten when the set changes
        free = [s for s in range(n + 20) if s not in mem]
        for _ in range(2):
            i0 = rng.randrange(max(len(ml) - 30, 1))
            assert [sb.select(i) for i in range(i0, min(i0 + 30, len(ml)))] == ml[i0 : i0 + 30]
            i0 = rng.randrange(max(len(free) - 30, 1))
            assert [sb.select_free(i) for i in range(i0, min(i0 + 30, len(free)))] == free[i0 : i0 + 30]
            if free[i0 + 1] < n:
                sb.add_many([free[i0 + 1]])
                mem.add(free[i0 + 1])
                ml = sorted(mem)
                free.remove(free[i0 + 1])
                assert sb.select_free(i0 + 1) == free[i0 + 1] and sb.select(len(ml) - 1) == ml[-1]
