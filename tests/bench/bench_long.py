"""Benchmark of the headless commands on a long journal, each beside its floor measured in the same run.

    .venv/bin/python tests/bench/bench_long.py [--records 1000000] [--keep DIR] [--foreign]

Builds once, in a temporary directory, a journal of ``--records`` SDK-shaped records
(a start, then begin/step pairs of about 300 bytes, a checkpoint with its snapshot
every 10,000 records, a rollback and a second attempt near the end), then runs
each command as a child process (output to /dev/null) and reads its peak RSS from
``os.wait4`` with its CPU time (the journal is built in another child: a forked
child's peak counts its parent's memory at the fork). Ratios are given for wall
and CPU time; on a shared machine the CPU ratio is the steadier one, and the
verdict uses it (the floors are run before and after the rows, the lower kept). Rows (issue 15's table, the headless part):

- ``log RUN --json`` and ``log RUN`` against a read + ``orjson.loads`` + ``orjson.dumps``
  loop over the same lines (the floor; target <= 1.0x, <= 100 MB; with ``--foreign``, <= 1.5x: issue 28
  item 15, the run-directory contract's promise for a journal another writer wrote);
- ``log RUN --tail 50`` (target: well under a second);
- ``state RUN`` (the end) and ``diff RUN A B`` against ``status RUN`` (target <= 1 s, <= 150 MB).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

PY = sys.executable
ORJSON_LOOP = """
import sys, orjson
from pathlib import Path
out = open("/dev/null", "wb")
buf = []
for name in sys.argv[1:]:
    with open(name, "rb") as f:
        for line in f:
            buf.append(orjson.dumps(orjson.loads(line)))
            if len(buf) >= 4096:
                buf.append(b"")
                out.write(b"\\n".join(buf))
                buf.clear()
buf.append(b"")
out.write(b"\\n".join(buf))
"""


def make_journal(run: Path, n: int, foreign: bool = False) -> int:
    """Write ``n`` records as the SDK writes them (``foreign``: with their keys sorted, as a journal written by
    another language or by hand: no line in the writer's form); return the bytes written."""
    opt = orjson.OPT_SORT_KEYS if foreign else 0
    run.mkdir(mode=0o700, parents=True)
    (run / "checkpoints").mkdir(mode=0o700)
    size = 0
    lines: list[bytes] = []
    seq = 0
    pos = 0
    attempt = 1
    cps: list[tuple[int, str, int]] = []  # (seq, name, pos)

    def ts() -> str:
        return f"2026-11-29T{10 + seq // 3_600_000:02d}:{(seq // 60_000) % 60:02d}:{(seq // 1000) % 60:02d}.{seq % 1000:03d}Z"

    def add(rec: dict[str, object]) -> None:
        nonlocal seq
        rec.update({"seq": seq, "id": f"b{seq:x}", "ts": ts()})
        lines.append(orjson.dumps(rec, option=opt))
        seq += 1

    with open(run / "journal.jsonl", "wb") as f:
        add({"kind": "start", "attempt": 1, "pid": 1, "resume": False, "replayable_steps": 0, "argv": ["bench.py"]})
        rolled = False
        while seq < n:
            if seq % 10_000 >= 9_999 - 1 and seq + 1 < n:
                name = f"cp-{seq}"
                fname = f"{len(cps) + 1:04d}-{name}.json"
                state = {"done": pos - 1, "notes": [f"note {k}" for k in range(20)]}
                (run / "checkpoints" / fname).write_bytes(
                    orjson.dumps({"name": name, "seq": seq, "pos": pos, "ts": ts(), "format": 1, "state": state}))
                cps.append((seq, name, pos))
                rec: dict[str, object] = {"kind": "checkpoint", "name": name, "pos": pos, "file": fname}
                rec.update({"ts": ts(), "seq": seq, "id": f"b{seq:x}"})
                lines.append(orjson.dumps(rec, option=opt))
                seq += 1
            elif not rolled and seq >= n - n // 50 and len(cps) >= 2:
                # a rollback to the checkpoint before the last one, and a resumed attempt
                cseq, cname, cpos = cps[-2]
                add({"kind": "rollback", "checkpoint": cname, "checkpoint_seq": cseq, "reason": "bench", "by": "cli"})
                attempt += 1
                add({"kind": "start", "attempt": attempt, "pid": attempt, "resume": True, "replayable_steps": cpos, "argv": ["bench.py"]})
                pos = cpos
                rolled = True
            else:
                inputs = {"args": [f"work:{pos}", pos]}
                add({"kind": "begin", "step": f"work:{pos}", "pos": pos, "attempt": attempt, "inputs": inputs})
                if seq < n:
                    patch = [{"op": "add" if pos == 0 else "replace", "path": "/done", "value": pos}]
                    add({"kind": "step", "step": f"work:{pos}", "pos": pos, "attempt": attempt, "inputs": inputs,
                         "inputs_hash": "94b266eb06179852", "output": f"result {pos} xxxx", "dur_ms": 0.113,
                         "key": f"bench:{pos}", "state_patch": patch})
                    pos += 1
            if len(lines) >= 10_000:
                data = b"".join(x + b"\n" for x in lines)
                f.write(data)
                size += len(data)
                lines.clear()
        data = b"".join(x + b"\n" for x in lines)
        f.write(data)
        size += len(data)
    (run / "run.json").write_bytes(orjson.dumps({"id": run.name, "format": 1, "status": "running", "command": ["bench"]}))
    return size


def measure(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[float, float, float, int]:
    """Run ``argv`` with stdout to /dev/null: (wall seconds, CPU seconds (user + system), peak RSS in MB, exit status)."""
    with open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=null, stderr=subprocess.PIPE, cwd=cwd, env=env)
        assert p.stderr is not None
        err = p.stderr.read()
        _, status, usage = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.stderr.write(err.decode(errors="replace"))
    return dt, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, p.returncode


def cli(*args: str) -> list[str]:
    return [PY, "-m", "supervisor", *args]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="build the journal here (kept; reused if present)")
    ap.add_argument("--repeat", type=int, default=1, help="best of N runs of each command")
    ap.add_argument("--before", type=Path, metavar="TREE", help="also run log/state with the package from this work "
                    "tree (e.g. `git worktree add /tmp/wt_before e9ad7a4`: the code before streaming)")
    ap.add_argument("--only", action="append", metavar="NAME", help="only the rows whose command contains NAME "
                    "(repeatable; e.g. --only '(text)'); the floors are measured as always")
    ap.add_argument("--pairs", type=int, default=0, metavar="N", help="also run each chosen row against the orjson "
                    "loop interleaved (loop, row, loop, row...) N times: best and median of the CPU and wall ratios")
    ap.add_argument("--foreign", action="store_true", help="a foreign journal: the same records with their keys "
                    "sorted (none in the writer's form: the run-directory contract's journals from other writers)")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.build_only:  # in a child: a child forked from a parent that built it would count its memory
        size = make_journal(a.keep, a.records, a.foreign)
        print(f"{size}")
        return 0
    tmp = None
    if a.keep is not None:
        run = a.keep
    else:
        tmp = Path(tempfile.mkdtemp(prefix="bench_long_"))
        run = tmp / "run"
    try:
        if not (run / "journal.jsonl").exists():
            t0 = time.perf_counter()
            build = [PY, __file__, "--build-only", "--keep", str(run), "--records", str(a.records)]
            build += ["--foreign"] if a.foreign else []
            size = int(subprocess.run(build, check=True, capture_output=True, text=True).stdout)
            print(f"built {a.records:,} records, {size / 1e6:.0f} MB, in {time.perf_counter() - t0:.1f} s")
        files = [str(run / "journal.jsonl")]

        def best(argv: list[str]) -> tuple[float, float, float]:
            runs = [measure(argv) for _ in range(a.repeat)]
            bad = [r for r in runs if r[3] != 0]
            if bad:
                raise SystemExit(f"{' '.join(argv)} failed (exit {bad[0][3]})")
            return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)

        loop = [PY, "-c", ORJSON_LOOP, *files]
        floor_w, floor_c, floor_m = best(loop)
        status_w, status_c, status_m = best(cli("status", str(run)))
        x = 1.5 if a.foreign else 1.0  # against the loop
        rows = [
            ("log RUN --json", cli("log", str(run), "--json"), "loop", x, 100),
            ("log RUN (text)", cli("log", str(run)), "loop", x, 100),
            ("log RUN --all --json", cli("log", str(run), "--all", "--json"), "loop", x, 100),
            ("log RUN --kind rollback", cli("log", str(run), "--kind", "rollback"), "loop", x, 100),
            ("log RUN --tail 50", cli("log", str(run), "--tail", "50"), "status", None, 100),
            ("state RUN (the end)", cli("state", str(run)), "status", None, 150),
            ("diff RUN 5000 end", cli("diff", str(run), "5000", "end"), "status", None, 150),
        ]
        if a.only:
            rows = [row for row in rows if any(o in row[0] for o in a.only)]
        results = [(row, best(row[1])) for row in rows]
        # the floors again after the rows (the machine's load changes): the lower of the two
        w2, c2, _ = best(loop)
        floor_w, floor_c = min(floor_w, w2), min(floor_c, c2)
        w2, c2, _ = best(cli("status", str(run)))
        status_w, status_c = min(status_w, w2), min(status_c, c2)
        print(f"floors (the better of a run before and one after the rows): orjson read+loads+dumps loop "
              f"{floor_w:.2f} s wall, {floor_c:.2f} s CPU, {floor_m:.0f} MB; "
              f"status {status_w:.2f} s wall, {status_c:.2f} s CPU, {status_m:.0f} MB")
        print(f"{'command':24} {'wall':>7} {'CPU':>7} {'peak':>6}  {'vs':6} {'wall x':>6} {'CPU x':>6}  target")
        ok = True
        for (name, _, against, limit, mb), (w, c, m) in results:
            fw, fc = (floor_w, floor_c) if against == "loop" else (status_w, status_c)
            target = (f"<= {limit:.1f}x" if limit else "<= 1 s" if mb == 150 else "well under 1 s") + f", <= {mb} MB"
            # under a shared machine's load the CPU time is the steadier figure: the verdict takes it
            met = (c / fc <= limit if limit else c <= 1.0) and m <= mb
            ok &= met
            print(f"{name:24} {w:6.2f}s {c:6.2f}s {m:4.0f}MB  {against:6} {w / fw:5.2f}x {c / fc:5.2f}x  "
                  f"{target}{'' if met else '  (missed)'}")
        if a.pairs:
            print(f"interleaved with the loop, {a.pairs} pairs each (ratios per pair: best / median):")
            for name, argv, against, _, _ in rows:
                if against != "loop":
                    continue
                cpu, wall = [], []
                for _ in range(a.pairs):
                    fw, fc, _, _ = measure(loop)
                    w, c, _, rc = measure(argv)
                    if rc != 0:
                        raise SystemExit(f"{' '.join(argv)} failed (exit {rc})")
                    cpu.append(c / fc)
                    wall.append(w / fw)
                print(f"{name:24} CPU x {min(cpu):.2f} / {statistics.median(cpu):.2f}   "
                      f"wall x {min(wall):.2f} / {statistics.median(wall):.2f}"
                      f"   (all CPU x: {' '.join(f'{r:.2f}' for r in cpu)})")
        if a.before is not None:
            env = {**os.environ, "PYTHONPATH": str(a.before)}
            print(f"before (the package at {a.before}), once each:")
            for name, argv in [("log RUN --json", cli("log", str(run), "--json")), ("log RUN (text)", cli("log", str(run))),
                               ("state RUN (the end)", cli("state", str(run)))]:
                w, c, m, rc = measure(argv, cwd=Path(tempfile.gettempdir()), env=env)  # not the repo: -m finds ./supervisor first
                print(f"{name:24} {w:6.2f}s {c:6.2f}s {m:4.0f}MB{'' if rc == 0 else f'  (exit {rc})'}")
        return 0 if ok else 1
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
