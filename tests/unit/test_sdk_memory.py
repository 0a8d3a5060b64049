"""The SDK's memory stays flat over a long run: live steps and a long resume, in real processes.

Each agent runs in a child process on a tmpfs (``/dev/shm``), so 100,000 durable
steps take seconds, and reports its resident set size (``VmRSS``) as it goes. The
old SDK kept every record it wrote (159 MiB after 100,000 trivial steps) and, on
resume, every journal page it had replayed.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from ..conftest import ROOT, clean_env

MiB = 1024 * 1024
STEPS = 100_000

RSS = """
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
"""

LIVE_AGENT = RSS + """
import sys
from supervisor import Run
n, distinct = int(sys.argv[2]), sys.argv[3] == "distinct"
with Run.open(sys.argv[1]) as run:
    for i in range(n):
        run.step(f"fetch:{i:09d}/a-longer-name" if distinct else "tick", lambda: None)
        if i + 1 in (20_000, n):
            print(i + 1, rss(), flush=True)
    assert len(run.executed) == n
"""

RESUME_AGENT = RSS + """
import sys
from supervisor import Run
n, more = int(sys.argv[2]), int(sys.argv[3])
with Run.open(sys.argv[1]) as run:
    print("open", rss(), flush=True)
    for i in range(n):
        out = run.step(f"search:q{i}", lambda q: None, f"query number {i}")
        assert out == {"title": f"result for query {i}", "score": i % 97}
    print("replayed", rss(), flush=True)
    for i in range(more):
        run.step("new", lambda: None)
    print("live", rss(), flush=True)
    assert len(run.replayed) == n and len(run.executed) == more
"""


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    """A scratch directory on tmpfs (fdatasync costs next to nothing there), else the usual temp dir."""
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    d = Path(tempfile.mkdtemp(prefix="sdk-memory-", dir=base))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_child(script: str, *args: object, timeout: float = 60.0) -> dict[str, int]:
    r = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=clean_env(), cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return {k: int(v) for k, v in (line.split() for line in r.stdout.splitlines())}


def write_journal(run_dir: Path, steps: int) -> None:
    """A journal as the SDK writes it (a begin and a step record per step), written directly: fast."""
    run_dir.mkdir()
    (run_dir / "run.json").write_bytes(orjson.dumps({"id": run_dir.name, "format": 1}))
    lines = []
    for i in range(steps):
        name, ts, inputs = f"search:q{i}", "2026-11-29T18:30:12.000Z", {"args": [f"query number {i}"]}
        common = {"seq": 2 * i, "id": f"a1b2{2 * i:x}", "ts": ts, "step": name, "pos": i, "attempt": 1, "inputs": inputs}
        lines.append(orjson.dumps({"kind": "begin", **common}))
        common.update(seq=2 * i + 1, id=f"a1b2{2 * i + 1:x}")
        out = {"title": f"result for query {i}", "score": i % 97}
        lines.append(orjson.dumps({"kind": "step", **common, "output": out, "dur_ms": 1.5, "key": f"r:{i}"}))
    (run_dir / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("names", ["one", "distinct"])
def test_memory_stays_flat_over_100000_live_steps(fast_dir: Path, names: str) -> None:
    rss = run_child(LIVE_AGENT, fast_dir / "run", STEPS, names)
    growth = rss[str(STEPS)] - rss["20000"]
    # the old SDK grew by about 0.8 KiB a step here: 65 MiB between these two points; with a name per step,
    # its count of calls per name grew by about 100 bytes a step (+8.2 MiB)
    assert growth < 1 * MiB, f"RSS grew by {growth / MiB:.1f} MiB from step 20,000 to {STEPS:,}"
    assert (fast_dir / "run" / "journal.jsonl").read_bytes().count(b"\n") == 1 + 2 * STEPS  # start, begin + step each


@pytest.mark.timeout(90)
def test_a_long_resume_holds_neither_the_replayed_journal_nor_its_records(fast_dir: Path) -> None:
    run_dir = fast_dir / "run"
    write_journal(run_dir, STEPS)
    journal = (run_dir / "journal.jsonl").stat().st_size  # about 33 MB
    rss = run_child(RESUME_AGENT, run_dir, STEPS, 20_000)
    # served steps are read through a map of the journal: the pages replayed are given back as it goes
    replay_growth = rss["replayed"] - rss["open"]
    assert replay_growth < journal / 4, f"RSS grew by {replay_growth / MiB:.1f} MiB over the replay ({journal / MiB:.0f} MiB journal)"
    # once live, the resume view (a record per step) is let go: less than at open, though 20,000 steps ran since
    assert rss["live"] < rss["open"], rss


# --------------------------------------------------------------------------- what the SDK keeps instead, in process


def test_step_names_count_every_step_and_keep_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    from supervisor.sdk import StepNames

    monkeypatch.setattr(StepNames, "KEEP", 3)
    names = StepNames()
    for n in "ab":
        names.append(n)
    assert names == ["a", "b"] and repr(names) == "['a', 'b']" and names[0] == "a" and names[-1] == "b"
    for n in "cde":
        names.append(n)
    assert len(names) == 5 and list(names) == ["c", "d", "e"] and names[-1] == "e" and names[2] == "c"
    assert names != ["a", "b", "c", "d", "e"] and repr(names) == "[<2 older names not kept>, 'c', 'd', 'e']"
    with pytest.raises(IndexError, match="not kept"):
        names[1]


def _count(counts: Any, seen: dict[str, int], n: str) -> None:
    """One call of ``n``, as ``Steps._enter`` numbers it, checked against a plain dict of the same calls."""
    k = counts.get(n)
    if k is None:
        k = counts.new(n)
    counts[n] = k + 1
    assert k == seen.get(n, 0), n
    seen[n] = k + 1


def test_name_counts_are_exact_past_the_names_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calls per name stay exact once the older names move to the temporary file, and come back from it."""
    from supervisor.sdk.names import NameCounts

    monkeypatch.setattr(NameCounts, "KEEP", 4)
    counts, seen = NameCounts(), {}  # the same calls counted in a plain dict
    names = ["a", "b", "lone \udc80 surrogate", "c", "a", "d", "e", "f", "a", "b", "g", "lone \udc80 surrogate", "b"]
    for n in names * 3:
        _count(counts, seen, n)
        assert len(counts) <= 4
    counts.give_back("g")  # moved out by the later names: given back through the file
    seen["g"] -= 1
    for n in sorted(seen):
        assert (counts.get(n) or counts.new(n)) == seen[n], n
    counts.close()


def test_names_called_once_are_never_indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name moved out is only appended to the temporary file: nothing is indexed in the SQLite file until a
    name moved out is called again; then its count comes back exact, and so do the later batches'."""
    from supervisor.sdk.names import NameCounts

    monkeypatch.setattr(NameCounts, "KEEP", 16)
    counts, seen = NameCounts(), {}
    for i in range(2000):  # every name new: about 125 batches moved out
        _count(counts, seen, f"url:{i}")
        assert len(counts) <= 16
    assert counts._db.execute("SELECT count(*) FROM c").fetchone() == (0,) and counts._end > 0  # appended only
    _count(counts, seen, "url:7")  # moved out long ago: indexed now, its count exact
    assert counts._db.execute("SELECT count(*) FROM c").fetchone()[0] > 1900 and counts._end == 0
    for i in range(2000, 2100):  # later batches, appended again; then a name of one of them
        _count(counts, seen, f"url:{i}")
    _count(counts, seen, "url:2003")
    for n in ("url:0", "url:7", "url:1999", "url:2099", "never called"):
        assert (counts.get(n) or counts.new(n)) == seen.get(n, 0), n
    counts.close()


def test_name_counts_stay_exact_when_the_filter_says_maybe_for_every_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter of 8 bits (every new name a false positive): each lookup finds nothing and the count is 0."""
    from supervisor.sdk import names
    from supervisor.sdk.names import NameCounts

    monkeypatch.setattr(names, "_MASK", 7)
    monkeypatch.setattr(NameCounts, "KEEP", 4)
    counts, seen = NameCounts(), {}
    for n in [f"n{i}" for i in range(40)] + ["n3", "n39", "n0", "n41", "n3"]:
        _count(counts, seen, n)
    counts.close()


@pytest.mark.parametrize("broken", ["sqlite", "tempfile", "insert"])
def test_name_counts_come_back_into_memory_where_no_file_can_be_made(
    monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """No SQLite file or no temporary file (nothing moves out), or the SQLite file refusing rows once names moved
    out (a full disk: every count comes back into the dict, for good): the counts stay exact."""
    import sqlite3
    import tempfile as tempfile_mod

    from supervisor.sdk.names import NameCounts

    def refuse(*_: Any, **__: Any) -> Any:
        if broken == "sqlite":
            raise sqlite3.OperationalError("unable to open database file")
        raise OSError(30, "Read-only file system")

    class Full:  # a connection whose file fills up at the first row
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db
            self.in_transaction = False

        def execute(self, sql: str, *args: Any) -> Any:
            self.in_transaction = self.in_transaction or sql == "BEGIN"
            return self.db.execute(sql, *args)

        def executemany(self, *_: Any) -> Any:
            raise sqlite3.OperationalError("database or disk is full")

        def close(self) -> None:
            self.db.close()

    if broken == "sqlite":
        monkeypatch.setattr(sqlite3, "connect", refuse)
    elif broken == "tempfile":
        monkeypatch.setattr(tempfile_mod, "TemporaryFile", refuse)
    monkeypatch.setattr(NameCounts, "KEEP", 4)
    counts, seen = NameCounts(), {}
    names = [f"n{i}" for i in range(30)] + ["n1", "lone \udc80", "n29", "n1", "lone \udc80", "n5"]
    for i, n in enumerate(names):
        if broken == "insert" and i == 12:
            assert counts._db is not None and counts._end > 0  # names moved out, none indexed yet
            counts._db = Full(counts._db)
        _count(counts, seen, n)
    assert counts._db is None and counts._pending is None and counts._keep > 1 << 40
    for n in sorted(seen):
        assert (counts.get(n) or counts.new(n)) == seen[n], n
    counts.close()


def test_a_live_call_after_a_resume_of_many_names_takes_the_next_k(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served in order past the names kept (moved out, never indexed), a name called again live gets the next
    ``k``: the journal's new line says so, and a second resume serves it."""
    from supervisor import Run
    from supervisor.sdk.names import NameCounts

    monkeypatch.setattr(NameCounts, "KEEP", 8)
    calls: list[str] = []

    def step(run: Run, name: str) -> Any:
        return run.step(name, lambda: calls.append(name) or name)

    names = [f"n{i}" for i in range(100)] + ["n5", "n50"]
    with Run.open(tmp_path / "run") as run:
        for n in names:
            step(run, n)
    with Run.open(tmp_path / "run") as run:
        assert [step(run, n) for n in names] == names and len(run.replayed) == 102
        step(run, "n7")  # live: its second call
        step(run, "n5")  # live: its third
    assert calls == [*names, "n7", "n5"]
    last = [orjson.loads(line) for line in (tmp_path / "run" / "journal.jsonl").read_bytes().splitlines()][-4:]
    assert [(r["kind"], r["step"], r.get("k", 0)) for r in last] == [
        ("begin", "n7", 1), ("step", "n7", 1), ("begin", "n5", 2), ("step", "n5", 2)]
    calls.clear()
    with Run.open(tmp_path / "run") as run:
        for n in [*names, "n7", "n5"]:
            step(run, n)
        assert len(run.replayed) == 104
    assert calls == []


def test_a_resume_serves_every_step_of_a_run_with_more_names_than_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps of many names, repeated and overlapping in threads (served by their ``(name, k)`` identity), past
    the names kept in memory: the resume serves each one, none runs again."""
    from concurrent.futures import ThreadPoolExecutor

    from supervisor import Run
    from supervisor.sdk.names import NameCounts

    monkeypatch.setattr(NameCounts, "KEEP", 8)
    calls: list[str] = []

    def agent(run: Run) -> list[Any]:
        def one(i: int) -> Any:
            return run.step(f"name{i % 40}", lambda i=i: calls.append(f"{i}") or i)

        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(one, range(200)))

    with Run.open(tmp_path / "run") as run:
        first = agent(run)
    assert len(calls) == 200
    calls.clear()
    with Run.open(tmp_path / "run") as run:
        again = agent(run)
        assert len(run.replayed) == 200
    assert calls == [] and sorted(again) == sorted(first) == list(range(200))


def test_failures_in_a_row_are_counted_without_the_records(tmp_path: Path) -> None:
    """Live, the SDK keeps no records: the failure policy counts failures of the step itself (transient tries
    and failures before a success do not count) and still rolls back to the latest checkpoint."""
    from supervisor import EXIT_ROLLBACK, Run
    from supervisor.core.history import load

    class Flaky(Exception):
        pass

    def boom() -> None:
        raise ZeroDivisionError("always")

    def flaky() -> None:
        raise Flaky("once")

    with Run.open(tmp_path / "run", max_failures=3, retries=1, transient=(Flaky,), backoff=0.001) as run:
        with pytest.raises(ZeroDivisionError):
            run.step("early", boom)  # a failure before a success of the same position: reset by the success
        run.step("early", lambda: 0)
        for i in range(50):
            run.step(f"s{i}", lambda: None)
        run.checkpoint("cp")
        run.step("after", lambda: None)
        for _ in range(2):
            with pytest.raises(ZeroDivisionError):
                run.step("bad", boom)
        assert not run.history.rollbacks
        with pytest.raises(SystemExit) as ex:
            run.step("bad", flaky)  # a transient try (not counted), then past its retries: counted, the third
        assert ex.value.code == EXIT_ROLLBACK
    h = load(tmp_path / "run")
    assert [r["checkpoint"] for r in h.rollbacks] == ["cp"] and "3 consecutive failures" in h.rollbacks[0]["reason"]
    assert h.effective[-1]["kind"] == "rollback"


def test_a_record_not_written_after_a_resume_with_a_rollback_leaves_the_shadow_as_the_journal_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live, the shadow is rebuilt from the files along the run's rollbacks when a record fails to be written."""
    from supervisor import Run
    from supervisor.core.history import load, state_at
    from supervisor.errors import JournalError

    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        run.state["n"] = 1
        run.step("a", lambda: 1)
        run.checkpoint("cp")
        run.state["n"] = 2
        run.state["lost"] = "abandoned"
        run.step("b", lambda: 2)
    from supervisor.core.history import rollback_record
    from supervisor.core.journal_writer import JournalWriter

    with JournalWriter(run_dir) as w:
        w.append(rollback_record(load(run_dir).checkpoints[-1], "test", by="test"))
    with Run.open(run_dir) as run:
        run.step("a", lambda: 0)
        run.checkpoint("cp")
        assert run.state == {"n": 1}
        run.state["n"] = 3
        run.step("c", lambda: 3)  # live from here: the resume view is let go
        assert run.history.steps[-1]["step"] == "c"  # read anew from the journal
        run.state["n"] = 4
        import errno
        import os

        from supervisor.core import journal_writer as journal

        real = os.write

        def fail_once(fd: int, data: Any) -> int:  # the begin line of "d" cannot be written (disk full)
            if b'"step":"d"' in bytes(data):
                monkeypatch.setattr(journal.os, "write", real)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data)

        monkeypatch.setattr(journal.os, "write", fail_once)
        with pytest.raises(JournalError):
            run.step("d", lambda: 4)
        h = load(run_dir)
        assert state_at(run_dir, h, h.effective[-1]["seq"]) == {"n": 3}
        run.step("d", lambda: 4)
        h = load(run_dir)  # d's patch was made against the state the journal has: it gives the state in memory
        assert h.effective[-1]["step"] == "d" and state_at(run_dir, h, h.effective[-1]["seq"]) == {"n": 4}
    with Run.open(run_dir) as run:
        for name in "acd":
            run.step(name, lambda: None)
        assert run.state == {"n": 4} and len(run.replayed) == 3


def test_a_resume_that_goes_live_lets_go_of_the_journal_map(tmp_path: Path) -> None:
    """Once live, the resume view is let go with its read-only map of the journal (and the map's descriptor):
    nothing keeps the journal mapped for the rest of the run (a later rotation's segment with it)."""
    from supervisor import Run

    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        for i in range(20):
            run.step(f"s{i % 3}", lambda i=i: i)

    def journal_maps() -> list[str]:
        with open("/proc/self/maps") as f:
            return [ln for ln in f if str(run_dir / "journal.jsonl") in ln]

    def journal_fds() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                n += os.readlink(f"/proc/self/fd/{fd}") == str(run_dir / "journal.jsonl")
        return n

    with Run.open(run_dir) as run:
        for i in range(20):
            run.step(f"s{i % 3}", lambda i=i: i)
        assert journal_maps()  # served through the map
        run.step("live", lambda: None)
        gc.collect()
        assert journal_maps() == [] and journal_fds() == 1  # the writer's only
        assert len(run.replayed) == 20
