"""Readers of a journal with concurrent steps: begins and steps paired by ``pos``, not by adjacency.

The journals are written in the public format, as the SDK writes them (writer
form: ``kind``, ``step``, ``pos``, ``attempt`` first; ``seq``, ``id``, ``ts`` last),
with ``step`` records committed in another order than their ``pos`` and other
records between a ``begin`` and its ``step``.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from supervisor.core.history import Fold, fold, load, state_at
from supervisor.core.journal_reader import JournalReader
from supervisor.core.records import LazyRecord


class J:
    """A journal written line by line in the writer's form."""

    def __init__(self, run: Path) -> None:
        self.run = run
        run.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.recs: list[dict[str, Any]] = []
        self.attempt = 1

    def add(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec = dict(rec)
        rec["seq"] = len(self.recs)
        rec["id"] = f"r{rec['seq']}"
        rec["ts"] = f"2026-11-30T10:00:{rec['seq'] % 60:02d}.000Z"
        self.recs.append(rec)
        return rec

    def begin(self, name: str, pos: int) -> None:
        self.add({"kind": "begin", "step": name, "pos": pos, "attempt": self.attempt, "inputs": {"args": [pos]}})

    def step(self, name: str, pos: int, *, error: bool = False, transient: bool = False, patch: bool = True) -> None:
        rec: dict[str, Any] = {"kind": "step", "step": name, "pos": pos, "attempt": self.attempt, "inputs": {"args": [pos]}}
        if error:
            rec["error"] = {"type": "Boom", "message": f"failed {pos}"}
            if transient:
                rec["transient"] = True
        else:
            rec["output"] = f"out-{name}-{pos}"
            if patch:
                rec["state_patch"] = [{"op": "add", "path": f"/s{pos}", "value": pos}]
        self.add(rec)

    def start(self) -> None:
        self.attempt += 1
        self.add({"kind": "start", "attempt": self.attempt, "pid": 1, "resume": True})

    def write(self) -> None:
        (self.run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in self.recs))


def gather_journal(run: Path) -> J:
    """plan (0), then a gather of 4 searches (1..4) finishing out of order, then summarize (5)."""
    j = J(run)
    j.begin("plan", 0)
    j.step("plan", 0)
    for p in range(1, 5):
        j.begin(f"search:{p}", p)
    j.step("search:3", 3)
    j.step("search:1", 1)
    j.step("search:4", 4)
    j.step("search:2", 2)
    j.begin("summarize", 5)
    j.step("summarize", 5)
    j.write()
    return j


def test_fold_orders_concurrent_steps_by_pos(tmp_path: Path) -> None:
    gather_journal(tmp_path)
    for h in (load(tmp_path), fold(JournalReader(tmp_path).load())):
        assert [r["pos"] for r in h.steps] == [0, 1, 2, 3, 4, 5]
        assert [r["step"] for r in h.steps] == ["plan", "search:1", "search:2", "search:3", "search:4", "summarize"]
        assert h.concurrent
        assert h.in_flight_steps() == [] and h.in_flight() is None
        assert {int(r["pos"]): r for r in h.steps}[3]["output"] == "out-search:3-3"
        assert h.next_pos == 6
        pairing = h.pairing()
        assert pairing.paired == {0: 1, 2: 7, 3: 9, 4: 6, 5: 8, 10: 11}


def test_lazy_resume_view_orders_by_pos_too(tmp_path: Path) -> None:
    """The SDK's lazy view (begin lines left out, step lines unparsed) gets the same order."""
    gather_journal(tmp_path)
    f = Fold()
    f.extend(JournalReader(tmp_path).load(lazy=True))
    h = f.history
    assert all(isinstance(r, LazyRecord) for r in h.steps)
    assert [r["pos"] for r in h.steps] == [0, 1, 2, 3, 4, 5]
    assert [r.record()["step"] for r in h.steps] == ["plan", "search:1", "search:2", "search:3", "search:4", "summarize"]
    assert [r.record()["pos"] for r in h.steps] == [0, 1, 2, 3, 4, 5]  # the parsed record keeps its pos
    assert f.step_count == 6


def test_lazy_view_of_a_sequential_journal_with_a_skipped_position(tmp_path: Path) -> None:
    """No overlap, but a position without a successful step (a call that failed for good): the pos is read."""
    j = J(tmp_path)
    j.begin("a", 0)
    j.step("a", 0)
    j.begin("b", 1)
    j.step("b", 1, error=True)
    j.begin("c", 2)
    j.step("c", 2)
    j.write()
    f = Fold()
    f.extend(JournalReader(tmp_path).load(lazy=True))
    assert [r["pos"] for r in f.history.steps] == [0, 2]
    assert [r["pos"] for r in load(tmp_path).steps] == [0, 2]


def test_sequential_journal_is_not_concurrent_and_keeps_its_positions(tmp_path: Path) -> None:
    j = J(tmp_path)
    for p in range(5):
        j.begin(f"s{p}", p)
        j.step(f"s{p}", p)
    j.begin("s5", 5)  # a crash in step 5
    j.start()
    j.begin("s5", 5)
    j.step("s5", 5)
    j.begin("s6", 6)  # in flight now
    j.write()
    h = load(tmp_path)
    assert not h.concurrent
    assert [r["pos"] for r in h.steps] == list(range(6))
    assert [r["seq"] for r in h.in_flight_steps()] == [14]
    assert h.pairing().interrupted == {10}
    f = Fold()
    f.extend(JournalReader(tmp_path).load(lazy=True))
    assert not f._exact  # the fast path: no step line's pos read from its bytes
    assert [r["pos"] for r in f.history.steps] == list(range(6))


def test_in_flight_is_a_set_and_a_start_interrupts_all(tmp_path: Path) -> None:
    j = J(tmp_path)
    for p in range(4):
        j.begin(f"t{p}", p)
    j.step("t2", 2)
    j.step("t0", 0, error=True, transient=True)  # a failed try: still in flight (retried)
    j.write()
    h = load(tmp_path)
    assert [r["pos"] for r in h.in_flight_steps()] == [0, 1, 3]
    assert h.in_flight()["pos"] == 0  # type: ignore[index]
    j.start()
    j.write()
    h = load(tmp_path)
    assert h.in_flight_steps() == []
    assert h.pairing().interrupted == {0, 1, 3}


def test_rollback_cuts_unordered_steps_by_file_position(tmp_path: Path) -> None:
    """Steps committed out of pos order, a checkpoint between them, then a rollback to it."""
    j = J(tmp_path)
    j.begin("a", 0)
    j.begin("b", 1)
    j.step("b", 1)
    j.add({"kind": "checkpoint", "name": "cp", "pos": 2})
    j.step("a", 0)
    j.begin("c", 2)
    j.step("c", 2)
    j.add({"kind": "rollback", "checkpoint": "cp", "checkpoint_seq": 3, "reason": "test"})
    j.begin("a", 0)
    j.step("a", 0)
    j.write()
    h = load(tmp_path)
    assert [(r["step"], r["pos"], r["seq"]) for r in h.steps] == [("a", 0, 9), ("b", 1, 2)]
    f = Fold()
    f.extend(JournalReader(tmp_path).load(lazy=True))
    assert [(r["pos"], r["seq"]) for r in f.history.steps] == [(0, 9), (1, 2)]


def test_consecutive_failures_of_a_concurrent_step(tmp_path: Path) -> None:
    j = J(tmp_path)
    j.begin("a", 0)
    j.begin("b", 1)
    j.step("b", 1, error=True)
    j.step("a", 0)  # another step's success does not reset b's failures
    j.start()
    j.begin("b", 1)
    j.step("b", 1, error=True)
    j.write()
    h = load(tmp_path)
    assert h.consecutive_failures(1) == 2
    assert h.consecutive_failures() == 2  # next_pos is 1: b never succeeded


def test_state_at_a_begin_is_its_own_steps_result(tmp_path: Path) -> None:
    """'state at' a begin looks for the step of the same pos, not the next step in the file."""
    j = gather_journal(tmp_path)
    h = load(tmp_path)
    by_seq = {r["seq"]: r for r in j.recs}
    for seq, rec in by_seq.items():
        if rec["kind"] != "begin":
            continue
        step_seq = next(s for s, r in by_seq.items() if r["kind"] == "step" and r["pos"] == rec["pos"])
        # as for sequential code: the state at a begin is the state after its own step record
        assert state_at(tmp_path, h, seq, after_result=True) == state_at(tmp_path, h, step_seq), seq
    # a step's own state: its patch and the next record that saves the state (another step's)
    st = state_at(tmp_path, h, 6, after_result=True)  # search:3, then search:1 is the next to save
    assert st == {"s0": 0, "s3": 3, "s1": 1}


def test_random_interleavings_fold_like_the_call_order(tmp_path: Path) -> None:
    """Many gathers of random width finishing in random order: every reader gives the call order."""
    rng = random.Random(7)
    for trial in range(30):
        run = tmp_path / f"r{trial}"
        j = J(run)
        pos = 0
        expect: list[int] = []
        for _ in range(rng.randint(1, 6)):
            width = rng.randint(1, 8)
            batch = list(range(pos, pos + width))
            pos += width
            pending = list(batch)
            order: list[tuple[str, int]] = []
            started: list[int] = []
            while pending or started:
                if pending and (not started or rng.random() < 0.5):
                    p = pending.pop(0)
                    order.append(("begin", p))
                    started.append(p)
                else:
                    p = started.pop(rng.randrange(len(started)))
                    order.append(("step", p))
            for kind, p in order:
                name = f"n{p % 3}"
                if kind == "begin":
                    j.begin(name, p)
                else:
                    failed = rng.random() < 0.15
                    j.step(name, p, error=failed)
                    if not failed:
                        expect.append(p)
        j.write()
        expect.sort()
        assert [r["pos"] for r in load(run).steps] == expect, trial
        f = Fold()
        f.extend(JournalReader(run).load(lazy=True))
        assert [r["pos"] for r in f.history.steps] == expect, trial
        assert [r.record()["pos"] for r in f.history.steps] == expect, trial


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True, text=True, timeout=60)


def test_log_shows_pos_for_overlapping_steps_and_marks_unfinished_begins(tmp_path: Path) -> None:
    j = gather_journal(tmp_path)
    j.begin("write", 6)  # in flight at the end
    j.add({"kind": "note", "message": "changed inputs", "step": "search:2", "pos": 2})
    j.write()
    r = run_cli("log", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(j.recs)  # one line a record
    assert "begin      search:3 #3" in lines[4] and "step       search:3 #3  -> out-search:3-3" in lines[6]
    assert lines[12].endswith("write #6  (in flight: no step record yet)")
    assert "CHANGED INPUTS: step 'search:2' #2" in lines[13]
    js = run_cli("log", "--json", str(tmp_path))
    recs = [orjson.loads(x) for x in js.stdout.splitlines()]
    assert [x["seq"] for x in recs] == list(range(len(j.recs)))
    assert [x["pos"] for x in recs if x["kind"] == "step"] == [0, 3, 1, 4, 2, 5]  # as written, in file order
    assert set(recs[6]) == set(j.recs[6]) | {"pos"}  # the shape of a record: as written


def test_log_of_a_sequential_journal_shows_no_pos_and_marks_an_interrupted_begin(tmp_path: Path) -> None:
    j = J(tmp_path)
    j.begin("a", 0)
    j.step("a", 0)
    j.begin("b", 1)
    j.start()
    j.begin("b", 1)
    j.step("b", 1)
    j.write()
    out = run_cli("log", str(tmp_path)).stdout.splitlines()
    assert out[0].endswith("begin      a") and "#" not in out[1]
    assert out[2].endswith("b  (interrupted: no step record in its attempt)")
    assert out[4].endswith("begin      b")


AGENT = '''
import asyncio, sys
from supervisor import Run

async def search(q):
    await asyncio.sleep(0.001 * (int(q[1:]) * 7 % 5))  # finish out of call order
    return "r-" + q

async def main(run_dir):
    with Run.open(run_dir) as run:
        await run.astep("plan", search, "p0")
        await asyncio.gather(*(run.astep("search:" + str(i), search, "q" + str(i)) for i in range(16)))
        await run.astep("summarize", search, "s0")

asyncio.run(main(sys.argv[1]))
'''


def test_a_journal_the_sdk_wrote_with_16_steps_in_flight(tmp_path: Path) -> None:
    """The real SDK's gather: every reader pairs by pos (the fold, its lazy view, the TUI scan, log)."""
    from supervisor.views.scan import scan_journal

    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    run = tmp_path / "run"
    p = subprocess.run([sys.executable, str(script), str(run)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    h = load(run)
    names = ["plan", *(f"search:{i}" for i in range(16)), "summarize"]
    assert [r["step"] for r in h.steps] == names
    assert h.concurrent and h.in_flight_steps() == []
    committed = [r["pos"] for r in h.effective if r.get("kind") == "step"]
    assert committed != sorted(committed)  # they did finish out of call order
    f = Fold()
    f.extend(JournalReader(run).load(lazy=True))
    assert [r.record()["step"] for r in f.history.steps] == names
    scan = scan_journal(run, index=False)
    assert sorted(scan.pairs.hidden) == sorted(h.pairing().paired) and len(scan.pairs.hidden) == 18
    out = run_cli("log", str(run)).stdout
    assert "search:15 #16" in out


def test_lazy_view_knows_overlap_from_the_bytes_and_counts_failures(tmp_path: Path) -> None:
    """The resume view has no begins: ``concurrent`` comes from the files; failures of a step in a gather
    count across attempts past the other steps' successes."""
    j = J(tmp_path)
    j.begin("a", 0)
    j.begin("b", 1)
    j.step("b", 1, error=True)
    j.step("a", 0)
    j.start()
    j.begin("b", 1)
    j.step("b", 1, error=True)
    j.write()
    f = Fold()
    f.extend(JournalReader(tmp_path).load(lazy=True))
    assert f.history.concurrent and f.history.consecutive_failures() == 2
    seq = J(tmp_path / "seq")
    seq.begin("a", 0)
    seq.step("a", 0, error=True)
    seq.begin("a", 0)
    seq.step("a", 0)
    seq.begin("b", 1)
    seq.step("b", 1)
    seq.write()
    f = Fold()
    f.extend(JournalReader(tmp_path / "seq").load(lazy=True))
    assert not f.history.concurrent and f.history.consecutive_failures(0) == 0
