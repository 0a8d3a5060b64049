"""Benchmark of redaction (not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_redact.py [--mb 8]

CPU time (``time.process_time``, best of several rounds: the machine may be shared).

- per journal line (the SDK redacts every record it writes: the step path's share),
  against ``line.find(b"\\n")`` on the same line;
- agent output, MB/s of ``Redactor.redact_stream`` per 64 KiB chunk and of
  ``AgentLog.feed`` end to end (redaction, line split, prefix, file write), against a
  raw scan floor (a ``data.find(b"\\n")`` loop over the same chunks), for output
  without secrets, with a token every 100 lines, and JSON-ish lines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from supervisor.core.redact import Redactor, StreamState
from supervisor.supervise.agentlog import AgentLog

CHUNK = 64 * 1024


def best_of(fn: Callable[[], object], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def floor_scan(chunks: list[bytes]) -> None:
    for data in chunks:
        i = 0
        while True:
            j = data.find(b"\n", i)
            if j < 0:
                break
            i = j + 1


def output(kind: str, size: int) -> bytes:
    if kind == "plain text":
        line = b"2026-11-30 12:00:01 INFO worker 3 processed item 12345 in 0.031 s, queue depth 17\n"
        return (line * (size // len(line) + 1))[:size]
    if kind == "a token every 100 lines":
        line = b"2026-11-30 12:00:01 INFO worker 3 processed item 12345 in 0.031 s, queue depth 17\n"
        block = line * 99 + b"calling the API with sk-proj-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzd now\n"
        return (block * (size // len(block) + 1))[:size]
    line = b'{"step": "search:q2", "status": "ok", "results": ["alpha beta", "gamma"], "took_ms": 31, "cache_key": "a1b2"}\n'
    return (line * (size // len(line) + 1))[:size]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=8)
    args = ap.parse_args()
    size = args.mb * 1024 * 1024
    r = Redactor(["registered-secret-42", "correct horse battery staple"], from_env=False)

    line = (b'{"seq":1234,"id":"a1b2c3d41f","ts":"2026-11-29T19:20:00.123Z","kind":"step","name":"search:q2",'
            b'"status":"ok","output":{"results":["alpha beta gamma delta","epsilon zeta"],"score":0.75},'
            b'"patch":[{"op":"replace","path":"/n","value":3}]}\n')
    n = 20000
    per_line = best_of(lambda: [r(line) for _ in range(n)]) / n
    per_find = best_of(lambda: [line.find(b"\n") for _ in range(n)]) / n
    print(f"journal line ({len(line)} B, no secret): Redactor {per_line * 1e9:.0f} ns/line; "
          f"line.find floor {per_find * 1e9:.0f} ns/line (a durable step costs ~1,000,000 ns)")

    print(f"agent output in {CHUNK // 1024} KiB chunks, {args.mb} MB each:")
    for kind in ("plain text", "a token every 100 lines", "JSON lines"):
        data = output(kind, size)
        chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
        floor = best_of(lambda: floor_scan(chunks), 3)

        def redact_chunks() -> None:
            st = StreamState()
            for c in chunks:
                r.redact_stream(c, st)

        red = best_of(redact_chunks, 3)
        with tempfile.TemporaryDirectory() as tmp:

            def feed() -> None:
                log = AgentLog(Path(tmp), redact=r, tee=False, max_bytes=1 << 40)
                for c in chunks:
                    log.feed("stdout", c)
                log.close()

            fed = best_of(feed, 3)
        mb = size / 1e6
        print(f"  {kind:24s} redact {mb / red:7.0f} MB/s   AgentLog.feed {mb / fed:6.0f} MB/s   "
              f"floor find-loop {mb / floor:6.0f} MB/s   (redact = {red / floor:.1f}x the floor)")


if __name__ == "__main__":
    main()
