"""The dashboard's search and filter on a model-heavy journal, beside a raw byte count of the same text.

100,000 records, half of them model calls whose inputs repeat a 400-character conversation holding the word
searched for (the case issue 26 met: every call carries the history). Each query runs ``filters.filter_lines``
over the whole journal, as the filter worker does; the floor is ``bytes.lower().count`` of the word on the same
bytes, measured in the same run. Prints ms and the ratio to the floor; asserts nothing.

    .venv/bin/python tests/bench/bench_filter.py [--records 100000]
"""

from __future__ import annotations

import argparse
import time

import orjson

from supervisor.views.filters import filter_lines, parse_filter

QUERIES = ["word_count", "inputs:word_count", "output:word_count", "model:gpt", "attempt:2", "q777", "zzz_absent"]


def journal(n: int) -> bytes:
    hist = {"kwargs": {"messages": [{"role": "user", "content": "run word_count on notes.md " + "x" * 400}]}}
    lines = []
    for k in range(n):
        if k % 2 == 0:
            rec = {"kind": "step", "step": "model:gpt-4o", "pos": k, "attempt": 1 + k * 2 // n, "inputs": hist,
                   "call": {"kind": "model", "model": "gpt-4o"},
                   "output": {"content": "ok" if k % 20 else "word_count please"}, "seq": k}
        else:
            rec = {"kind": "step", "step": "tool:search", "pos": k, "attempt": 1, "inputs": {"kwargs": {"query": f"q{k}"}},
                   "call": {"kind": "tool", "tool": "search"}, "output": [f"r{k}"], "seq": k}
        lines.append(orjson.dumps(rec))
    return b"\n".join(lines) + b"\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    args = ap.parse_args()
    data = journal(args.records)
    t = time.perf_counter()
    hits = data.lower().count(b"word_count")
    floor = time.perf_counter() - t
    print(f"{args.records:,} records, {len(data) / 1e6:.0f} MB; floor: raw count of word_count "
          f"({hits:,} hits) {floor * 1000:.1f} ms")
    for q in QUERIES:
        f = parse_filter(q)
        out: list[int] = []
        t = time.perf_counter()
        filter_lines(f, data, 0, out)
        dt = time.perf_counter() - t
        print(f"{q:20} {len(out):8,} rows {dt * 1000:8.1f} ms  {dt / floor:6.1f}x the floor")


if __name__ == "__main__":
    main()
