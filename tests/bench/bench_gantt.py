"""Benchmark of the Gantt view's model on a long attempt: what ``g`` costs on a million-record journal.

    .venv/bin/python tests/bench/bench_gantt.py [--records 1000000] [--repeat 3]

Figures (against a floor measured in the same run): the worker's read of one window (``gantt.WINDOW`` records
around a seq in the middle: index, parse, feed the bars) against the parse alone (``get_range`` of the same
records, the least any view of them costs); one frame's rows (50 bars drawn at 200 columns) in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from supervisor.core.journal_reader import JournalReader
from supervisor.views import gantt as gm


def make_journal(run: Path, n: int) -> None:
    """One attempt of ``n`` records: steps 8 at a time (a gather), every 50th failing once and retried."""
    run.mkdir(mode=0o700, parents=True)
    out, seq, pos = [orjson.dumps({"kind": "start", "attempt": 1, "seq": 0, "id": "s", "ts": "2026-11-30T10:00:00.000Z"})], 1, 0
    t = 0.0
    while seq < n:
        batch = list(range(pos, pos + 8))
        for p in batch:
            out.append(orjson.dumps({"kind": "begin", "step": f"search:{p}", "pos": p, "attempt": 1, "seq": seq,
                                     "id": f"i{seq}", "ts": _ts(t)}))
            seq += 1
        for p in reversed(batch):
            t += 0.01
            if p % 50 == 0:
                out.append(orjson.dumps({"kind": "step", "step": f"search:{p}", "pos": p, "attempt": 1,
                                         "error": {"type": "ConnectionError", "message": "reset"}, "dur_ms": 5.0,
                                         "transient": True, "seq": seq, "id": f"i{seq}", "ts": _ts(t)}))
                seq += 1
                t += 0.01
            out.append(orjson.dumps({"kind": "step", "step": f"search:{p}", "pos": p, "attempt": 1, "output": "r" * 200,
                                     "dur_ms": 10.0, "seq": seq, "id": f"i{seq}", "ts": _ts(t)}))
            seq += 1
        pos += 8
    (run / "journal.jsonl").write_bytes(b"\n".join(out[:n]) + b"\n")


def _ts(t: float) -> str:
    h, rest = divmod(t, 3600)
    m, s = divmod(rest, 60)
    return f"2026-11-30T{10 + int(h):02d}:{int(m):02d}:{s:06.3f}Z"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        make_journal(run, args.records)
        reader = JournalReader(run)
        t0 = time.perf_counter()
        count = reader.index()
        print(f"index of {count:,} records: {time.perf_counter() - t0:.3f} s (the dashboard's scan has done it)")
        lo, hi = gm.window(0, count, count // 2)
        floors, reads, frames = [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            recs = reader.get_range(lo, hi)
            floors.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            g = gm.Gantt(1)
            g.add_all(reader.get_range(lo, hi))
            reads.append(time.perf_counter() - t0)
            span = g.span()
            rows = g.rows()
            t0 = time.perf_counter()
            for i in rows[:50]:
                gm.bar_cells(g.bars[i], *span, 118)  # the bar area at 200 columns
            frames.append(time.perf_counter() - t0)
        floor, read = statistics.median(floors), statistics.median(reads)
        print(f"window of {hi - lo:,} records ({len(recs):,} parsed, {len(g.bars):,} bars, "
              f"{g.summary()['retried']} retried): parse floor {floor * 1000:.0f} ms, "
              f"parse + bars {read * 1000:.0f} ms ({read / floor:.2f}x the floor)")
        print(f"one frame's 50 rows at 200 columns: {statistics.median(frames) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
