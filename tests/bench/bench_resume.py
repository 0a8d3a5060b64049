"""Benchmark of resume (not a test: prints figures, asserts nothing): issue 15's SDK rows, each beside its floor.

    .venv/bin/python tests/bench/bench_resume.py [--big 1000000] [--rounds 3] [--skip-big]

- crash -> first new step: a fresh agent process (interpreter start, imports, ``Run.open``, every
  journaled step served, then one new step committed), timed from the parent's spawn to the new
  step's line on stdout (the copied journal synced first, as a crashed agent left it), with 1, 10,000
  and 100,000 steps journaled (targets: 100,000 <= 0.5 s; 10,000 <= 1.5x the 1-step figure). Its floor:
  the same process with 1 step journaled.
- resume of ``--big`` steps (default 1,000,000) to the first new step, against an orjson scan of the
  same journal (read every file, ``orjson.loads`` every line; target <= 1.0x), with the agent's peak RSS.

- ``--breakdown N``: where the 100,000-step figure goes, in-process (process CPU time, best and median of N
  rounds, each a fresh process on a fresh copy): the interpreter and ``from supervisor import Run``, ``Run.open``,
  serving every step, beside two floors measured in the same process: the agent's own loop (the same f-strings
  and lambda, calling a method that returns a list element: what any ``run.step`` costs at least) and one
  ``orjson.loads`` of each served step line (what serving a step from the journal costs at least), and the
  ``--toy`` resume's loop over the same journal (``Run.open`` + serving against it, per served step: issue 28
  item 21's target, <= 2x). Whether
  Python writes bytecode caches is printed: without them (``PYTHONDONTWRITEBYTECODE``, set in the sessions
  these figures were measured in) every agent start compiles the package, ~60 ms of the 1-step figure.
- ``--toy``: a floor for the resume rows: a toy resume in a fresh process (imports only orjson; per call it finds the
  next step line with ``mmap.find``, ``orjson.loads`` it, checks its pos, name and inputs, returns its output: no lock,
  no state, no begin or damaged-line handling), timed as the agent is. The least any per-step resume written in Python
  does; if it is over a target, that target is out of reach of a resume that parses each step it serves. Timed at 1
  and 100,000 steps: the agent's cost per served step (its 100,000-step figure less its 1-step one) against the toy's.
- A streaming resume was measured too (session 21, kept out of main): for a journal of only this SDK's begin, step
  and start lines (proved by a C-speed count of line prefixes), serve each step straight from the file, parsing
  that line only, handing over to the resume view on anything else. 100,000 steps 0.58-1.07 s (main 0.77-1.34 s,
  interleaved), 1,000,000 steps 4.8-6.2 s and 124 MiB (main 6.6-7.9 s, 371 MiB): no target met, for a second
  serving path of ~700 lines beside the first, taken only by journals without a checkpoint, note, failed step or
  rollback (the demo agent's is not one). Decided: not worth its risk on the path that must never run a model
  call twice.
- Issue 28 item 21 (<= 2x the toy per served step), measured on 2 shared cores, per step of the 100,000-step
  resume: ``Run.open`` 1.9 us (the resume view's read: pread 0.2, line split 0.4, the ``"error"`` search 0.2, line
  starts 0.3, the two prefix maps 0.35, a ``LazyRecord`` each 0.35, the fold 0.1), serving 3.6 us (the agent's loop
  0.35, slice and ``orjson.loads`` 0.85, ``Run.step`` with ``Steps.call``/``_enter`` 1.2, ``Server.serve`` 1.2 in
  some 25 lookups of 20-120 ns each, none over 0.15 us), against the toy's 2.1 us: 2.6x. The read up front alone is
  0.9x the toy, which finds each line when asked: 2x is out of reach of a resume view built before the first step.
  Measured again after issue 28 item 13 (session r21, 2 shared cores, ``--breakdown 7 --toy``, best / median):
  4.44-4.56x / 4.96-5.19x, serving 8.1-8.5 us a step, of which 4.3 us is ``NameCounts`` (every name of this journal
  is new: past 4,096 names each costs a SQLite INSERT at its spill, 1.5 us, and a SELECT that misses, 2.0 us; a dict
  costs 0.25). With a dict in its place: 2.65x / 2.90x; with a dict and a fused in-order branch at the top of
  ``Steps.call`` (prototype: one frame, the checks of serve and _served for a lazy top-level step without a patch):
  2.40x / 2.74x. A read of writer-only regions proved by C-speed counts (split at the step heads, no per-line
  prefix maps or overlap walk; prototype, same entries on every sample journal at four chunk sizes) takes
  ``Run.open`` from 2.35 to 2.2 us a step: the LazyRecord per step and the C-level maps over 100,000 of anything
  cost ~1.5 us whatever they split. 2x needs the counts near a dict's cost *and* no per-step object at open.
  Then a bitmap of the names moved out went in front of the SELECT (one probe: a Python loop setting three bits
  cost 1.3 us a name, one 0.47): ``NameCounts`` 2.5 us a step in isolation (the row in the file at its spill, its
  bit), serving 6.6-7.9 us against 3.9-4.0 with a dict in the same session, 3.1-3.7x best (dict 1.8-2.45x).
  A journal whose names repeat (most agents: ``llm:plan``, ``tool:search``) never spills: a dict's cost.
  Then the names moved out were only appended to a temporary file (a pickle a batch) and indexed in SQLite once
  one of them is called again, behind a three-probe filter: ``NameCounts`` 1.0 us a name in isolation (1.8 with
  every batch indexed, a dict 0.22); ``--breakdown 7 --toy``, every name new: serving 4.01 us a step (5.38 before,
  same session), 3.19x best, 3.26x median (3.81x / 3.91x before); with 8 names, 2.49x / 2.53x, unchanged. The three
  probes inlined where they are tested, not computed by one function for both sides, measured 3.08-3.11x: under 5%.
- ``--index``: the sidecar-index question, measured both ways on the ``--big`` journal, each in a fresh
  process: the resume view's open as it is (``JournalReader.load(lazy=True)``: the scan), and the same
  entries from a prototype index (per file: inode, size, mtime, a hash of its last line, and the offsets
  and seqs of its step lines as arrays; the other lines parsed from their offsets), validated and mapped.
  The prototype lives only here: it bounds what an index could take off the resume. Measured (2 shared
  cores, 1,000,000 steps): scan 3.0-4.0 s, prototype index 0.5-0.75 s, of a 9-11 s resume: an index takes
  about a quarter off, never helps the first resume after a crash (the crashed agent wrote none) nor a
  journal of one segment (100,000 steps), and the rest (a Python call and one ``orjson.loads`` of the
  step line per served step, ~5 us) stays. Decided: no index (run.step serves from the scan).

The journals are written as the SDK writes them (a ``begin`` and a ``step`` record per step, the
``start`` record of the attempt first; sealed every 64 MiB). The median of ``--rounds`` is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent.parent

AGENT = """
import sys
from supervisor import Run
n = int(sys.argv[2])
with Run.open(sys.argv[1]) as run:
    for i in range(n):
        run.step(f"search:q{i}", lambda q: None, f"query number {i}")
    run.step("new", lambda: "first new step")
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    print("first new step", len(run.replayed), hwm // 1024, flush=True)
"""

ORJSON_SCAN = """
import glob, sys, time, orjson
t0 = time.perf_counter()
n = 0
for path in sorted(glob.glob(sys.argv[1] + "/journal.0*.jsonl")) + [sys.argv[1] + "/journal.jsonl"]:
    with open(path, "rb") as f:
        for line in f:
            orjson.loads(line)
            n += 1
print(time.perf_counter() - t0, n)
"""


TOY_CLASS = """
import glob, mmap, os, orjson
loads = orjson.loads
class Toy:  # the least a per-step resume does: find the step line, parse it, check it is this call's, return its output
    def __init__(self, paths):
        self.maps = []
        for p in paths:
            fd = os.open(p, os.O_RDONLY); self.maps.append(mmap.mmap(fd, 0, access=mmap.ACCESS_READ)); os.close(fd)
        self.m = self.maps.pop(0); self.off = 0; self.pos = 0
    def step(self, name, fn, /, *args, **kwargs):
        i = self.m.find(b'{"kind":"step",', self.off)
        while i < 0:
            self.m = self.maps.pop(0); self.off = 0; i = self.m.find(b'{"kind":"step",')
        j = self.m.find(b"\\n", i)
        rec = loads(self.m[i:j]); self.off = j
        if rec.get("pos") != self.pos or rec.get("step") != name or rec.get("inputs") != {"args": [*args]}:
            raise SystemExit("not this call's step")
        self.pos += 1
        return rec.get("output")
"""

TOY = TOY_CLASS + """
import sys
n = int(sys.argv[2])
run = Toy(sorted(glob.glob(sys.argv[1] + "/journal.0*.jsonl")) + [sys.argv[1] + "/journal.jsonl"])
for i in range(n):
    run.step(f"search:q{i}", lambda q: None, f"query number {i}")
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print("first new step", run.pos, hwm // 1024, flush=True)
"""

INDEX_BUILD = """
import hashlib, os, sys, orjson
from array import array
from pathlib import Path
from supervisor.core.journal_reader import JournalReader
from supervisor.core.records import LazyRecord
run = Path(sys.argv[1])
ents = JournalReader(run).load(lazy=True)
files = {}
for e in ents:
    if type(e) is LazyRecord:
        f = files.setdefault(e.path, ([], [], [], [], []))
        f[0].append(e.start); f[1].append(e.end); f[2].append(e.seq)
    else:  # parsed: the start record here; its offset found by its seq field in the files below
        files.setdefault(str(run / "journal.000001.jsonl"), ([], [], [], [], []))[3].append(e["seq"])
head, blobs = [], []
for path, (st, en, sq, other, _) in sorted(files.items()):
    s = os.stat(path)
    with open(path, "rb") as fh:
        fh.seek(max(s.st_size - 4096, 0)); tail = fh.read()
    last = tail[tail.rfind(b"\\n", 0, len(tail) - 1) + 1 :]
    head.append({"path": path, "ino": s.st_ino, "size": s.st_size, "mtime_ns": s.st_mtime_ns,
                 "last": hashlib.blake2b(last, digest_size=16).hexdigest(), "n": len(st), "other": other})
    blobs += [array("q", st).tobytes(), array("q", en).tobytes(), array("q", sq).tobytes()]
with open(run / "journal.index", "wb") as out:
    h = orjson.dumps(head)
    out.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))
"""

INDEX_LOAD = """
import gc, hashlib, mmap, os, sys, time, orjson
t0 = time.perf_counter()
gc.disable()  # as JournalReader.load does
from array import array
from pathlib import Path
from supervisor.core.records import LazyRecord
run = Path(sys.argv[1])
data = open(run / "journal.index", "rb").read()
n = int.from_bytes(data[:8], "little"); head = orjson.loads(data[8 : 8 + n]); at = 8 + n
out = []
for f in head:
    s = os.stat(f["path"])
    assert (s.st_ino, s.st_size, s.st_mtime_ns) == (f["ino"], f["size"], f["mtime_ns"]), "stale"
    fd = os.open(f["path"], os.O_RDONLY)
    m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ); os.close(fd)
    last = m[m.rfind(b"\\n", 0, len(m) - 1) + 1 :]
    assert hashlib.blake2b(last, digest_size=16).hexdigest() == f["last"], "stale"
    k = f["n"] * 8
    st, en, sq = (array("q", data[at + i * k : at + (i + 1) * k]) for i in range(3)); at += 3 * k
    out.extend(map(LazyRecord, [\"step\"] * f["n"], [m] * f["n"], st, en, sq, [f["path"]] * f["n"]))
print(time.perf_counter() - t0, len(out))
"""

SCAN_LOAD = """
import sys, time
t0 = time.perf_counter()
from pathlib import Path
from supervisor.core.journal_reader import JournalReader
out = JournalReader(Path(sys.argv[1])).load(lazy=True)
print(time.perf_counter() - t0, len(out))
"""


BREAKDOWN = TOY_CLASS + """
import os, sys, time
t0 = time.process_time()
from supervisor import Run
t1 = time.process_time()
import orjson
n = int(sys.argv[2])
toy = Toy(sorted(glob.glob(sys.argv[1] + "/journal.0*.jsonl")) + [sys.argv[1] + "/journal.jsonl"])
a = time.process_time()
for i in range(n):
    toy.step(f"search:q{i}", lambda q: None, f"query number {i}")
toy_s = time.process_time() - a
del toy
from supervisor.sdk.names import NameCounts  # what Steps._enter does per call for the k of its (name, k)
names = [f"search:q{i}" for i in range(n)]
nc = NameCounts()
a = time.process_time()
for name in names:
    k = nc.get(name)
    if k is None:
        k = nc.new(name)
    nc[name] = k + 1
counts_s = time.process_time() - a
nc.close()
del names, nc
class Floor:
    def __init__(self): self.outs = [None] * n; self.i = 0
    def step(self, name, fn, /, *args, **kwargs):
        i = self.i; self.i = i + 1; return self.outs[i]
f = Floor()
a = time.process_time()
for i in range(n):
    f.step(f"search:q{i}", lambda q: None, f"query number {i}")
floor = time.process_time() - a
steps = [l for l in open(sys.argv[1] + "/journal.jsonl", "rb") if l.startswith(b'{"kind":"step",')]
a = time.process_time()
for l in steps:
    orjson.loads(l)
parse = time.process_time() - a
del steps
a = time.process_time()
run = Run.open(sys.argv[1])
b = time.process_time()
for i in range(n):
    run.step(f"search:q{i}", lambda q: None, f"query number {i}")
c = time.process_time()
assert len(run.replayed) == n
print(t1 - t0, b - a, c - b, floor, parse, int(sys.flags.dont_write_bytecode), toy_s, counts_s)
os._exit(0)
"""


def breakdown(base: Path, steps: int, rounds: int) -> None:
    """``--breakdown``: the in-process split of the resume of ``steps`` steps, beside its two floors."""
    rows = []
    for _ in range(rounds):
        run_dir = base / f"copy-{steps}"
        shutil.copytree(base / f"run-{steps}", run_dir)
        _sync_dir(run_dir)
        try:
            out = subprocess.run([sys.executable, "-c", BREAKDOWN, str(run_dir), str(steps)], capture_output=True, text=True,
                                 cwd=ROOT, check=True)
            rows.append([float(x) for x in out.stdout.split()])
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(f"in-process split of the resume of {steps:,} steps (process CPU s, best / median of {rounds}; "
          f"bytecode caches {'NOT written (PYTHONDONTWRITEBYTECODE): imports compile' if rows[0][5] else 'written'}):")
    names = {0: "import (supervisor, after the interpreter)", 1: "Run.open", 2: "serving every step",
             3: "floor: the agent's loop alone", 4: "floor: one orjson.loads a step line",
             6: "floor: the toy resume (same process)",
             7: "of serving: the calls per name (NameCounts)"}
    for k, name in names.items():
        xs = [r[k] for r in rows]
        per_step = f"  ({min(xs) / steps * 1e6:.2f} us a step)" if k else ""
        print(f"  {name:44} {min(xs):.3f} / {median(xs):.3f}{per_step}")
    per = [(r[1] + r[2]) / (r[3] + r[4]) for r in rows]
    print(f"  Run.open + serving, against the two floors together: {min(per):.2f}x best, {median(per):.2f}x median")
    toy = [(r[1] + r[2]) / r[6] for r in rows]  # the same round's toy: the machine's load is shared
    print(f"  Run.open + serving, against the toy resume: {min(toy):.2f}x best, {median(toy):.2f}x median (target <= 2x)")
    rest = [(r[1] + r[2] - r[7]) / r[6] for r in rows]  # every name new: each call counts one the dict has not
    print(f"  the same less the calls per name (NameCounts, item 13's flat memory): {min(rest):.2f}x best, "
          f"{median(rest):.2f}x median")


NAMES = 0
"""``--names``: how many step names the agents cycle through (0: a name of its own for every step)."""


def with_names(script: str) -> str:
    """An agent (or toy) script whose step names cycle through :data:`NAMES` names."""
    return script.replace('f"search:q{i}"', f'f"search:q{{i % {NAMES}}}"') if NAMES else script


def make_journal(run_dir: Path, steps: int) -> None:
    """``steps`` steps as the SDK writes them, fast: a start record, then a begin and a step record each (named
    as :data:`NAMES` says, with the ``k`` the SDK gives a name's later calls)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_bytes(orjson.dumps({"id": run_dir.name, "format": 1}))
    seq, segment = 0, 0
    f = open(run_dir / "journal.jsonl", "wb")
    buf = [orjson.dumps({"kind": "start", "seq": 0, "id": "a1b2c3d40", "ts": "2026-11-29T18:30:12.000Z", "attempt": 1,
                         "pid": 1, "resume": False, "replayable_steps": 0, "numbering": "name-k", "argv": ["agent.py"]})]
    seq = 1
    for i in range(steps):
        name, k = (f"search:q{i % NAMES}", i // NAMES) if NAMES else (f"search:q{i}", 0)
        ts = f"2026-11-29T18:30:12.{i % 1000:03d}Z"
        inputs = {"args": [f"query number {i}"]}
        head: dict[str, object] = {"step": name, "pos": i, "attempt": 1}
        if k:
            head["k"] = k
        buf.append(orjson.dumps({"kind": "begin", **head, "inputs": inputs, "seq": seq, "id": f"a1b2c3d4{seq:x}", "ts": ts}))
        seq += 1
        buf.append(orjson.dumps({
            "kind": "step", **head, "inputs": inputs, "inputs_hash": "0" * 16,
            "output": None, "dur_ms": 0.004, "key": f"{run_dir.name}:{i}", "seq": seq, "id": f"a1b2c3d4{seq:x}", "ts": ts,
        }))
        seq += 1
        if len(buf) >= 50_000:
            f.write(b"\n".join(buf) + b"\n")
            buf = []
            if f.tell() >= 64 << 20:
                f.close()
                segment += 1
                os.rename(run_dir / "journal.jsonl", run_dir / f"journal.{segment:06d}.jsonl")
                f = open(run_dir / "journal.jsonl", "wb")
    if buf:
        f.write(b"\n".join(buf) + b"\n")
    f.close()


def first_new_step(base: Path, steps: int, script: str | None = None) -> tuple[float, int]:
    """Seconds from spawn to the first new step of an agent resuming ``steps`` steps (``script``: the agent, by
    default :data:`AGENT` as ``--names`` made it), and its peak RSS in MiB."""
    script = AGENT if script is None else script
    run_dir = base / f"copy-{steps}"
    shutil.copytree(base / f"run-{steps}", run_dir)  # a resume appends: each round starts from the same journal
    _sync_dir(run_dir)
    try:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", script, str(run_dir), str(steps)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert p.stdout is not None
        line = p.stdout.readline()
        t = time.perf_counter() - t0
        p.wait()
        words = line.split()
        assert words[:3] == ["first", "new", "step"] and int(words[3]) == steps, line
        return t, int(words[4])
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _sync_dir(run_dir: Path) -> None:
    """Put a copied journal on disk before the clock starts, as a crashed agent's journal is (it synced every step).

    Without it the agent's first ``fdatasync`` (of its ``start`` record) writes the whole fresh copy back: 25 ms
    of a 100,000-step copy (41 MB) measured, against 0.6 ms on the synced copy, none of it the resume's."""
    for p in [*run_dir.iterdir(), run_dir]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--breakdown", type=int, default=0, metavar="N", help="only the in-process split of the 100,000-step resume, N rounds")
    ap.add_argument("--toy", action="store_true", help="also time a toy resume: the least any per-step resume in Python does")
    ap.add_argument("--index", action="store_true", help="also measure the resume view's open with a prototype sidecar index")
    ap.add_argument("--names", type=int, default=0, metavar="N",
                    help="step names cycle through N names (default: every step a name of its own, as an agent naming "
                         "steps by URL or id; most agents repeat a few: llm:plan, tool:search)")
    args = ap.parse_args()
    global NAMES, AGENT, TOY, BREAKDOWN
    if args.names:
        NAMES = args.names
        AGENT, TOY, BREAKDOWN = with_names(AGENT), with_names(TOY), with_names(BREAKDOWN)
    tmp = Path(tempfile.mkdtemp(prefix="bench-resume-", dir=os.environ.get("BENCH_DIR")))
    try:
        if args.breakdown:
            make_journal(tmp / "run-100000", 100_000)
            breakdown(tmp, 100_000, args.breakdown)
            return
        sizes = [1, 10_000, 100_000]
        for n in sizes:
            make_journal(tmp / f"run-{n}", n)
        times: dict[int, list[float]] = {n: [] for n in sizes}
        rss: dict[int, int] = {}
        for _ in range(args.rounds):  # interleaved: the machine is shared and noisy
            for n in sizes:
                t, mb = first_new_step(tmp, n)
                times[n].append(t)
                rss[n] = mb
        one = median(times[1])
        print(f"crash -> first new step (a fresh agent process; median of {args.rounds} interleaved rounds):")
        print(f"  1 step journaled        {one:.3f} s  peak RSS {rss[1]} MiB  (the floor: interpreter, imports, Run.open)")
        t10 = median(times[10_000])
        print(f"  10,000 steps journaled  {t10:.3f} s  peak RSS {rss[10_000]} MiB  {t10 / one:.2f}x the 1-step figure (target <= 1.5x)")
        t100 = median(times[100_000])
        print(f"  100,000 steps journaled {t100:.3f} s  peak RSS {rss[100_000]} MiB  (target <= 0.5 s)")
        if args.toy:
            toys: dict[int, list[float]] = {1: [], 100_000: []}
            for _ in range(args.rounds):
                for n in toys:
                    toys[n].append(first_new_step(tmp, n, TOY)[0])
            toy1, toy = median(toys[1]), median(toys[100_000])
            print(f"  floor: a toy resume of the 100,000 steps (--toy; no SDK, no checks but name, pos and inputs) {toy:.3f} s"
                  f" (1 step: {toy1:.3f} s)")
            agent_us, toy_us = (t100 - one) / 100_000 * 1e6, (toy - toy1) / 100_000 * 1e6
            print(f"  per served step (the 100,000-step figure less the 1-step one): agent {agent_us:.2f} us, toy "
                  f"{toy_us:.2f} us: {agent_us / toy_us:.2f}x (target <= 2x)")
        if not args.skip_big:
            big = args.big
            make_journal(tmp / f"run-{big}", big)
            size = sum(p.stat().st_size for p in (tmp / f"run-{big}").glob("journal*.jsonl"))
            t, mb = first_new_step(tmp, big)
            out = subprocess.run([sys.executable, "-c", ORJSON_SCAN, str(tmp / f"run-{big}")], capture_output=True, text=True, check=True)
            scan = float(out.stdout.split()[0])
            print(f"resume {big:,} steps ({2 * big + 1:,} records, {size / 1e6:.0f} MB) to the first new step:")
            print(f"  agent process {t:.2f} s, peak RSS {mb} MiB; "
                  f"orjson scan of the same files {scan:.2f} s: {t / scan:.2f}x (target <= 1.0x)")
            if args.toy:
                toy = first_new_step(tmp, big, TOY)[0]
                print(f"  floor: a toy resume of the same steps (--toy) {toy:.2f} s: {toy / scan:.2f}x the scan")
            if args.index:
                run = str(tmp / f"run-{big}")
                py = lambda code: float(  # noqa: E731
                    subprocess.run(
                        [sys.executable, "-c", code, run], capture_output=True, text=True, check=True, cwd=ROOT
                    ).stdout.split()[0]
                )
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", INDEX_BUILD, run], check=True, cwd=ROOT)
                build = time.perf_counter() - t0
                isize = (tmp / f"run-{big}" / "journal.index").stat().st_size
                scans, maps = [], []
                for _ in range(args.rounds):
                    scans.append(py(SCAN_LOAD))
                    maps.append(py(INDEX_LOAD))
                s_, m_ = median(scans), median(maps)
                print(f"  the resume view's open (imports and load; the part a sidecar index could replace): scan {s_:.2f} s, "
                      f"prototype index {m_:.2f} s ({isize / 1e6:.0f} MB, built in {build:.1f} s): {s_ - m_:.2f} s of the "
                      f"{t:.2f} s resume ({(s_ - m_) / t:.0%})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
