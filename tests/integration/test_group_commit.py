"""Group commit in the journal writer: threads and asyncio share syncs, each caller returns only
after a sync that covers its own bytes, rotation and failed syncs stay correct under concurrency.

Real files throughout. The sync functions are wrapped (``monkeypatch`` on ``os.fdatasync`` and
``os.fsync``, before the writer is created: it picks its sync function then) to count the syncs,
to log what each one covered, or to make one block or fail on cue.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import journal_writer, rundir
from supervisor.core.journal_reader import JournalReader
from supervisor.core.journal_writer import JournalWriter, open_journal
from supervisor.core.records import BadLine
from supervisor.core.segments import segment_paths
from supervisor.errors import JournalError

from ..conftest import ROOT, clean_env, wait_for

THREADS = 16


class SyncLog:
    """Wraps ``os.fdatasync`` and ``os.fsync``: counts the calls and logs what each successful one covered.

    A sync covers the bytes of its file written before it started, so the size is taken
    before the call; the tick after it returns orders it against the appends' returns.
    ``gate``: called before each datasync, with the call's number (from 1), to block or fail it.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ticks = itertools.count()
        self.tick_lock = threading.Lock()
        self.datasyncs = 0
        self.covered: list[tuple[int, int, int]] = []  # (inode, size before the sync, tick after it)
        self.gate: Callable[[int], None] | None = None
        real_datasync = os.fdatasync
        real_fsync = os.fsync

        def logged(real: Callable[[int], None]) -> Callable[[int], None]:
            def sync(fd: int) -> None:
                st = os.fstat(fd)
                real(fd)
                self.covered.append((st.st_ino, st.st_size, self.tick()))

            return sync

        def datasync(fd: int) -> None:
            with self.tick_lock:
                self.datasyncs += 1
                n = self.datasyncs
            if self.gate is not None:
                self.gate(n)
            logged(real_datasync)(fd)

        monkeypatch.setattr(os, "fdatasync", datasync)
        monkeypatch.setattr(os, "fsync", logged(real_fsync))

    def tick(self) -> int:
        with self.tick_lock:
            return next(self.ticks)


def rec(name: str, i: int) -> dict[str, Any]:
    return {"kind": "step", "step": name, "pos": i, "output": {"who": name, "i": i, "pad": "x" * 40}}


def stream_lines(run: Path) -> list[tuple[int, int, bytes]]:
    """Every line of the journal with the inode of its file and the offset of its end, in stream order."""
    out = []
    for path in segment_paths(run):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path.name} ends with a whole line"
        ino, end = path.stat().st_ino, 0
        for line in data.split(b"\n")[:-1]:
            end += len(line) + 1
            out.append((ino, end, line))
    return out


def check_journal(run: Path, returned: dict[int, tuple[str, int, int]], log: SyncLog | None = None) -> None:
    """Every line whole and parsed, seqs 0..N-1 in file order, each returned record at its seq; with
    ``log``: each append returned after a sync that covered its line (its file, up to its end)."""
    lines = stream_lines(run)
    recs = [orjson.loads(line) for _, _, line in lines]  # raises on a partial or fused line
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert len(recs) == len(returned)
    for seq, (name, i, tick) in returned.items():
        r = recs[seq]
        assert (r["step"], r["output"]["i"]) == (name, i)
        if log is not None:
            ino, end, _ = lines[seq]
            assert any(c_ino == ino and size >= end and t < tick for c_ino, size, t in log.covered), (
                f"seq {seq} returned before a sync covered it"
            )


def hammer(w: JournalWriter, threads: int, per: int, log: SyncLog | None = None) -> dict[int, tuple[str, int, int]]:
    """``threads`` threads each appending ``per`` records at once; the returned records by seq."""
    returned: dict[int, tuple[str, int, int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(k: int) -> None:
        try:
            start.wait()
            for i in range(per):
                r = w.append(rec(f"t{k}", i))
                returned[r["seq"]] = (f"t{k}", i, log.tick() if log else 0)
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errors, errors
    return returned


# --------------------------------------------------------------------------- threads


def test_threads_appending_at_once_share_syncs_and_each_returns_after_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    with JournalWriter(run) as w:
        returned = hammer(w, THREADS, 100, log)
    n = THREADS * 100
    check_journal(run, returned, log)
    # one sync per append would be 1600: while a leader syncs, the others write and park
    assert log.datasyncs <= n // 2, f"{log.datasyncs} syncs for {n} appends: no batching"


def test_a_sync_under_way_is_shared_by_every_thread_that_parks_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first sync is held until the other 15 threads have written and parked: the next leader's
    one sync covers all 15 (exactly 2 syncs for 16 appends)."""
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    w = JournalWriter(run)

    def hold_first(n: int) -> None:
        if n == 1:
            wait_for(lambda: w.waiting == THREADS - 1, timeout=20, what="15 parked threads")

    log.gate = hold_first
    returned = hammer(w, THREADS, 1, log)
    w.close()
    assert log.datasyncs == 2
    check_journal(run, returned, log)


def test_one_thread_pays_one_sync_per_durable_append_and_none_for_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    with JournalWriter(run) as w:
        for i in range(5):
            w.append(rec("begin", i), sync=False)
            w.append(rec("step", i))
        w.append({"kind": "note", "ts": "2026-11-30T00:00:00.000Z"})
        assert log.datasyncs == 6
    assert len(stream_lines(run)) == 11


def test_without_fdatasync_the_writer_falls_back_to_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no os.fdatasync: the writer, created after it is gone, commits with os.fsync."""
    log = SyncLog(monkeypatch)
    monkeypatch.delattr(os, "fdatasync")
    assert rundir.datasync_function() is os.fsync
    run = tmp_path / "run"
    with JournalWriter(run) as w:
        returned = hammer(w, 4, 10, log)
        assert asyncio.run(w.aappend(rec("async", 0)))["seq"] == 40
        returned[40] = ("async", 0, log.tick())
    check_journal(run, returned, log)
    assert log.datasyncs == 0 and len(log.covered) >= 2


# --------------------------------------------------------------------------- asyncio


def test_64_aappends_in_flight_share_syncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    returned: dict[int, tuple[str, int, int]] = {}

    async def one(w: JournalWriter, k: int) -> None:
        for i in range(5):
            await asyncio.sleep(0)  # the tasks interleave
            r = await w.aappend(rec(f"a{k}", i))
            returned[r["seq"]] = (f"a{k}", i, log.tick())

    async def main(w: JournalWriter) -> None:
        await asyncio.gather(*(one(w, k) for k in range(64)))

    with JournalWriter(run) as w:
        asyncio.run(main(w))
    check_journal(run, returned, log)
    assert log.datasyncs <= 320 // 4, f"{log.datasyncs} syncs for 320 appends: no batching"


def test_steps_that_finish_in_one_turn_of_the_loop_share_one_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """16 aappend started together: the flusher gets the lead only after all 16 lines are written (a
    callback queued behind the ready tasks), so one sync commits them all; then 16 more, one more sync."""
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"

    async def main(w: JournalWriter) -> None:
        for batch in range(2):
            got = await asyncio.gather(*(w.aappend(rec(f"b{batch}", k)) for k in range(THREADS)))
            assert [r["seq"] for r in got] == list(range(batch * THREADS, (batch + 1) * THREADS))
            assert log.datasyncs == batch + 1

    with JournalWriter(run) as w:
        asyncio.run(main(w))
    assert len(stream_lines(run)) == 2 * THREADS


def test_a_loop_stopped_before_the_flusher_got_the_lead_is_committed_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    w = JournalWriter(run)
    loop = asyncio.new_event_loop()
    try:
        tasks = []

        async def start() -> None:
            tasks.append(asyncio.ensure_future(w.aappend(rec("stopped", 0))))

        loop.run_until_complete(start())  # the loop stops in the turn where the task writes its line
        assert w.unsynced > 0 and log.datasyncs == 0  # written, its sync left to the loop's next turn
        w.close()  # the flusher syncs it
        assert log.datasyncs == 1
        assert loop.run_until_complete(tasks[0])["seq"] == 0  # and the waiter hears of it
    finally:
        loop.close()
    check_journal(run, {0: ("stopped", 0, log.tick())}, log)


def test_threads_and_asyncio_append_to_one_writer_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    returned: dict[int, tuple[str, int, int]] = {}

    async def one(w: JournalWriter, k: int) -> None:
        for i in range(20):
            r = await w.aappend(rec(f"a{k}", i))
            returned[r["seq"]] = (f"a{k}", i, log.tick())

    async def main(w: JournalWriter) -> None:
        await asyncio.gather(*(one(w, k) for k in range(8)))

    with JournalWriter(run) as w:
        t = threading.Thread(target=lambda: returned.update(hammer(w, 8, 20, log)))
        t.start()
        asyncio.run(main(w))
        t.join(30)
    check_journal(run, returned, log)


def test_a_cancelled_aappend_is_committed_all_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The awaiting task is cancelled while its sync is held: the task sees CancelledError, the line
    is written, the held sync covers it, and the writer goes on and closes without waiting forever."""
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    release = threading.Event()
    log.gate = lambda n: None if n > 1 else (release.wait(20) or None)
    w = JournalWriter(run)
    # a slow disk: the flusher thread syncs (inline, the held sync would block this loop)
    monkeypatch.setattr(journal_writer, "INLINE_SYNC_MAX", -1.0)

    async def main() -> None:
        task = asyncio.create_task(w.aappend(rec("cancelled", 0)))
        await asyncio.sleep(0)  # the task runs up to its await: the line is written, the flusher syncs it
        assert w.unsynced > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        r = await w.aappend(rec("after", 1))
        assert r["seq"] == 1

    asyncio.run(main())
    wait_for(lambda: w.unsynced == 0, timeout=20, what="the cancelled record's sync")
    w.close()
    lines = stream_lines(run)
    assert [orjson.loads(line)["step"] for _, _, line in lines] == ["cancelled", "after"]
    ino, end, _ = lines[0]
    assert any(c_ino == ino and size >= end for c_ino, size, _ in log.covered)


# --------------------------------------------------------------------------- rotation


def test_rotation_while_threads_append_seals_only_synced_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotation every ~2 kB while 8 threads append: one stream, seqs in order, every caller covered
    by a sync of the file its line went to (the sealing fsync counts), every segment whole."""
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    with JournalWriter(run, rotate_bytes=2000) as w:
        returned = hammer(w, 8, 60, log)
    assert len(segment_paths(run)) > 10
    check_journal(run, returned, log)
    entries = JournalReader(run).load()
    assert not any(isinstance(e, BadLine) for e in entries) and len(entries) == 480


def test_rotation_while_asyncio_and_threads_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    returned: dict[int, tuple[str, int, int]] = {}

    async def one(w: JournalWriter, k: int) -> None:
        for i in range(30):
            r = await w.aappend(rec(f"a{k}", i))
            returned[r["seq"]] = (f"a{k}", i, log.tick())

    async def main(w: JournalWriter) -> None:
        await asyncio.gather(*(one(w, k) for k in range(8)))

    with JournalWriter(run, rotate_bytes=1500) as w:
        t = threading.Thread(target=lambda: returned.update(hammer(w, 4, 30, log)))
        t.start()
        asyncio.run(main(w))
        t.join(30)
        w.rotate()  # the public rotation takes the lock too
    assert len(segment_paths(run)) > 10
    check_journal(run, returned, log)


# --------------------------------------------------------------------------- failed syncs


def test_a_failed_sync_fails_every_waiter_it_covered_and_breaks_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sync 1 (one thread's line) succeeds once 7 more threads have parked; sync 2, led for those 7,
    fails with EIO: each of the 7 raises, the first returns; later writes are refused and no sync
    runs again (a retried sync could report success for pages the kernel dropped)."""
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"
    w = JournalWriter(run)

    def gate(n: int) -> None:
        if n == 1:
            wait_for(lambda: w.waiting == 7, timeout=20, what="7 parked threads")
        else:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    log.gate = gate
    outcomes: dict[int, str] = {}
    start = threading.Barrier(8)

    def work(k: int) -> None:
        start.wait()
        try:
            r = w.append(rec(f"t{k}", 0))
            outcomes[r["seq"]] = "ok"
        except JournalError as e:
            outcomes[-k - 1] = str(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert list(outcomes.values()).count("ok") == 1
    failures = [o for o in outcomes.values() if o != "ok"]
    assert len(failures) == 7 and all("cannot sync" in f and "Input/output error" in f for f in failures), failures
    assert log.datasyncs == 2
    with pytest.raises(JournalError, match="refuses further writes"):
        w.append(rec("later", 0))
    with pytest.raises(JournalError, match="refuses further writes"):
        asyncio.run(w.aappend(rec("later", 0)))
    with pytest.raises(JournalError, match="refuses further writes"):
        w.append(rec("later", 0), sync=False)
    assert log.datasyncs == 2, "no sync after the failed one"
    w.close()
    # the lines are whole; their callers were told they are not committed
    assert len(stream_lines(run)) == 8


def test_a_failed_sync_fails_the_asyncio_waiters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SyncLog(monkeypatch)
    run = tmp_path / "run"

    def fail(n: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    log.gate = fail
    w = JournalWriter(run)

    async def main() -> list[BaseException | dict[str, Any]]:
        return await asyncio.gather(*(w.aappend(rec(f"a{k}", 0)) for k in range(16)), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, JournalError) and "cannot sync" in str(r) for r in results), results
    assert log.datasyncs == 1
    with pytest.raises(JournalError, match="refuses further writes"):
        w.append(rec("later", 0))
    w.close()


def test_a_failed_fsync_before_sealing_fails_the_waiters_and_breaks_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    w = JournalWriter(run, rotate_bytes=10_000, durable=False)
    w.append(rec("a", 0))

    def fail(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fail)
    w.rotate_bytes = 1
    with pytest.raises(JournalError, match=r"cannot sync .* before sealing"):
        w.append(rec("b", 1))
    monkeypatch.undo()
    with pytest.raises(JournalError, match="refuses further writes"):
        w.append(rec("c", 2))
    w.close()
    assert segment_paths(run) == [run / "journal.jsonl"], "nothing was sealed"


# --------------------------------------------------------------------------- a real crash

CRASH_AGENT = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from supervisor.core.journal_writer import JournalWriter

    w = JournalWriter(Path(sys.argv[1]), rotate_bytes=4000)
    out_lock = threading.Lock()

    def work(k):
        for i in range(10_000):
            r = w.append({"kind": "step", "step": f"t{k}", "pos": i, "output": {"i": i}})
            with out_lock:
                sys.stdout.write(f"{r['seq']} t{k} {i}\\n")
                sys.stdout.flush()

    for k in range(16):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    threading.Event().wait()
    """
)


@pytest.mark.timeout(60)
def test_a_process_killed_while_16_threads_append_keeps_every_returned_record(tmp_path: Path) -> None:
    """SIGKILL mid-stream: every record whose append returned (printed by the child) is in the journal at
    its seq, every line is whole after the next open (a torn tail is moved aside), and the next writer
    continues the seqs."""
    script = tmp_path / "crash.py"
    script.write_text(CRASH_AGENT)
    run = tmp_path / "run"
    printed = []
    with subprocess.Popen(
        [sys.executable, str(script), str(run)], stdout=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT
    ) as p:
        assert p.stdout is not None
        for line in p.stdout:
            printed.append(line.split())
            if len(printed) >= 600:
                break
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        # each line was one write of a few bytes to a pipe (atomic): none is cut
        printed += [line.split() for line in p.stdout.read().splitlines()]
    assert len(printed) >= 600
    w, (entries, _) = open_journal(run, lazy=False)
    try:
        assert not any(isinstance(e, BadLine) for e in entries)
        by_seq = {int(e["seq"]): e for e in entries}
        assert sorted(by_seq) == list(range(len(entries)))
        for seq, name, i in printed:
            e = by_seq[int(seq)]
            assert (e["step"], e["pos"]) == (name, int(i))
        assert w.append(rec("next", 0))["seq"] == len(entries)
    finally:
        w.close()


def test_write_then_wait_synced_outside_a_lock_shares_syncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's thread steps with a state patch: the line is written under the caller's own lock (in its order),
    the sync is waited for outside it, so the threads that finish meanwhile share it."""
    log = SyncLog(monkeypatch)
    gate = threading.Event()
    log.gate = lambda n: gate.wait(10) if n == 1 else None  # the first sync blocks until all have written
    w = JournalWriter(tmp_path / "run")
    order = threading.Lock()  # the caller's lock (the SDK's): lines in its order
    returned: dict[int, tuple[str, int, int]] = {}
    wrote = threading.Semaphore(0)

    def work(k: int) -> None:
        r = rec(f"t{k}", k)
        with order:
            end = w.write(r)
        wrote.release()
        w.wait_synced(end)
        returned[r["seq"]] = (r["step"], k, log.tick())

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for _ in range(THREADS):
        assert wrote.acquire(timeout=10)
    gate.set()
    for t in threads:
        t.join(10)
    w.close()
    check_journal(tmp_path / "run", returned, log)
    assert log.datasyncs <= 2, log.datasyncs  # the blocked first one, then one for every line written meanwhile


def test_wait_synced_after_a_failed_sync_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SyncLog(monkeypatch)
    w = JournalWriter(tmp_path / "run")
    end = w.write(rec("a", 0))

    def fail(n: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    log.gate = fail
    with pytest.raises(JournalError, match="cannot sync"):
        w.wait_synced(end)
    log.gate = None
    with pytest.raises(JournalError, match="cannot sync"):
        w.wait_synced(end)  # never proved by a later sync
    w.close()


def test_append_last_is_synced_and_refuses_every_later_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SyncLog(monkeypatch)
    w = JournalWriter(tmp_path / "run")
    w.append(rec("a", 0), sync=False)
    w.append_last({"kind": "rollback", "checkpoint": None, "reason": "test"})
    ino, end, _ = stream_lines(tmp_path / "run")[-1]
    assert any(c_ino == ino and size >= end for c_ino, size, _ in log.covered)
    for write in (lambda: w.append(rec("b", 1)), lambda: w.write(rec("b", 1)), lambda: w.append(rec("b", 1), sync=False)):
        with pytest.raises(JournalError, match="closed"):
            write()
    w.close()
    assert [r["kind"] for r in JournalReader(tmp_path / "run").load()] == ["step", "rollback"]


def test_the_loop_leads_fast_syncs_itself_and_a_slow_disk_goes_to_the_flusher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which thread syncs for asyncio waiters: the loop's own while syncs are fast (no thread hand-off), the flusher
    once a sync took longer than INLINE_SYNC_MAX (the loop is not blocked on a slow disk)."""
    from supervisor.core import journal_writer as journal

    monkeypatch.setattr(journal, "INLINE_SYNC_MAX", 0.05)  # far above a no-op's time, even on a loaded machine
    who: list[str] = []
    slow = threading.Event()

    def datasync(fd: int) -> None:  # no real sync: only who calls it, and how long it takes, matter here
        who.append(threading.current_thread().name)
        if slow.is_set():
            threading.Event().wait(0.15)

    monkeypatch.setattr(os, "fdatasync", datasync)
    w = JournalWriter(tmp_path / "run")

    async def batch(k: int) -> None:
        await asyncio.gather(*(w.aappend(rec(f"b{k}", i)) for i in range(THREADS)))

    async def main() -> None:
        await batch(0)
        slow.set()
        await batch(1)  # led by the loop (the last sync was fast), and slow
        await batch(2)  # so this one goes to the flusher
        await batch(3)

    asyncio.run(main())
    w.close()
    loop_thread = threading.current_thread().name
    assert who[:2] == [loop_thread, loop_thread], who
    assert who[2:] and all(n == "journal-flusher" for n in who[2:]), who
    assert len(JournalReader(tmp_path / "run").load()) == 4 * THREADS
