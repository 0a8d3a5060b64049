"""The append-only JSONL journal's durable writer: one lock, group commit, rotation, torn-tail repair.

The journal of a run is one logical byte stream: the sealed segments
``journal.000001.jsonl``, ``journal.000002.jsonl``, ... in order, then the active
``journal.jsonl``. Rotation renames the active file, so the stream never changes
under a reader; only complete (newline-terminated) lines count. :func:`open_journal`
is the one open of a writer: lock, repair a torn tail, load (with :mod:`.journal_reader`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, NoReturn, Self

if TYPE_CHECKING:
    import asyncio

import orjson

from ..errors import JournalError, JournalLockedError
from . import rundir, wire
from .journal_reader import JournalReader, ResumeView
from .records import Record, surrogates_escaped
from .segments import committed_size, count_lines

DEFAULT_ROTATE_BYTES = 64 * 1024 * 1024
INLINE_SYNC_MAX = 0.001
_LINE_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
# Tried first: the same bytes for a record whose keys are all str (nearly all), at about half the cost per line
# (orjson's non-str-keys path is slower even on str keys); a record with other keys is encoded again with _LINE_OPTS.
_LINE_OPTS_STR = orjson.OPT_SERIALIZE_NUMPY
_dumps = orjson.dumps
_utc_now = rundir.utc_now
"""An event loop leads a sync in its own thread while the last sync took at most this long (seconds)."""
TORN_SUFFIX = ".torn"



def _line_bytes(rec: Record) -> bytes:
    """``rec``'s JSON with the full options; a lone surrogate (``"\\ud800"``, not UTF-8) in its free text (an
    error's message, a note, a rollback's reason, the command line) written as the six characters ``\\ud800``,
    so that the record is journaled; ``TypeError`` for anything else JSON cannot hold."""
    try:
        return _dumps(rec, option=_LINE_OPTS)
    except TypeError as e:
        if "surrogates" not in str(e):
            raise
        err = e
    try:
        escaped = surrogates_escaped(rec)
    except RecursionError:
        raise err from None
    return _dumps(escaped, option=_LINE_OPTS)


def repair_torn_tail(path: Path) -> int:
    """Move a partial last line of ``path`` to ``path.torn`` and truncate; return the bytes moved.

    A line is committed only with its newline. The torn bytes are appended to the
    ``.torn`` file, followed by a newline that separates them from later repairs,
    and made durable before the journal is truncated, so not one byte is lost.
    Neither file is opened through a symbolic link (the link's target is never cut).
    """
    try:
        fd = rundir.open_run_file(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        keep = committed_size(fd, size)
        if keep == size:
            return 0
        torn = os.pread(fd, size - keep, keep)
        move_torn(fd, path, torn, keep)
        return len(torn)
    finally:
        os.close(fd)


def move_torn(fd: int, path: Path, torn: bytes, keep: int) -> None:
    """Append ``torn`` (the bytes of ``path`` from ``keep`` on) to ``path.torn`` with a newline, durably, then cut
    ``path`` (open as ``fd``) back to ``keep``: the bytes are on disk in the ``.torn`` file before they leave the file."""
    tfd = rundir.open_run_file(str(path) + TORN_SUFFIX, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        rundir.write_all(tfd, torn + b"\n")
        os.fsync(tfd)
    finally:
        os.close(tfd)
    os.ftruncate(fd, keep)
    os.fsync(fd)


def journal_locked(run_dir: Path) -> bool:
    """Whether a process holds the journal lock of ``run_dir`` (an agent writing it) right now."""
    return rundir.flock_held(run_dir / rundir.JOURNAL_LOCK)


# --------------------------------------------------------------------------- writer


class _ThreadWaiter:
    """A thread parked until a sync covers its bytes: woken once, by the lock it blocks on."""

    __slots__ = ("end", "error", "lock", "state")

    def __init__(self, end: int) -> None:
        self.end = end
        self.lock = threading.Lock()
        self.lock.acquire()
        self.state = _WAITING
        self.error = ""


class _AsyncWaiter:
    """An :meth:`JournalWriter.aappend` parked until a sync covers its bytes: a future in its loop."""

    __slots__ = ("end", "fut", "loop")

    def __init__(self, end: int, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
        self.end = end
        self.loop = loop
        self.fut = fut


_WAITING, _DONE, _LEAD, _FAILED = range(4)
_Waiter = _ThreadWaiter | _AsyncWaiter


class JournalWriter:
    """Appends records to a run's journal; one writer per run directory (enforced by a lock).

    ``append(rec, sync=True)`` returns after the line and its newline are on disk
    (``fdatasync``; ``fsync`` where the platform has no ``fdatasync``). ``sync=False``
    writes through to the kernel only: the record survives a crash of the process,
    not of the machine (used for ``begin``).

    **Group commit.** The writer is thread-safe, and concurrent appends share their
    syncs. A record gets its ``seq`` and is written under one lock, so file order is
    seq order. Then, with the lock released, one caller at a time is the commit
    leader: it syncs everything written so far; the others park until a sync covers
    their bytes. When the leader's sync returns, it wakes every waiter it covered and
    hands the lead to one still parked (whose sync then takes every line written
    meanwhile), and returns. One thread alone pays one sync per durable append, as
    before. :meth:`aappend` is the same for asyncio: the line is written at once, in
    the event loop's thread, and a flusher thread of this writer leads the syncs
    that only asyncio waiters need, from the end of the loop's turn: the tasks that
    were ready together have all written their lines by then, and share one sync.

    **Failures.** A failed or short write is cut back to the end of the last whole
    line (see :meth:`_write_locked`). A failed sync breaks the writer: every waiter
    whose bytes it covered gets a :class:`JournalError`, and the writer refuses every
    later write. Retrying is not safe: after a failed ``fsync`` the kernel may have
    marked the unwritten pages clean, so the next sync would report success for bytes
    that never reached the disk (PostgreSQL, 2018). The lines stay in the file,
    whole; whether they survive a machine crash is unknown, so their callers are told
    they are not committed, and a restart serves those that survived.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        rotate_bytes: int = DEFAULT_ROTATE_BYTES,
        redact: Callable[[bytes], bytes] | None = None,
        durable: bool = True,
        count: Callable[[Path], int] = count_lines,
        file: str = rundir.JOURNAL,
    ) -> None:
        """``count`` gives the next seq from the repaired files: :func:`open_journal` passes the
        load it needs anyway, so the journal is read once, not twice.

        ``file``: another append-only file of the run directory than the journal, with the same line rules
        and its own lock (``<stem>.lock``), never rotated: the model-call proxy's ``llm.jsonl``."""
        self.run_dir = rundir.ensure_dir(run_dir)
        self.rotate_bytes = rotate_bytes
        self._redact = redact
        self._durable = durable
        self._datasync = rundir.datasync_function()  # chosen here, not at import (macOS: fsync)
        self._lock = threading.Lock()
        """Held to give a seq, write, rotate, and to read or change the commit state below."""
        self._written = 0
        """Bytes this writer appended, counted across rotations (a position in the stream it wrote)."""
        self._synced = 0
        """How much of ``_written`` a successful sync covers."""
        self._syncing = False
        """Someone holds the lead: a leader syncs (outside the lock) or is about to; no other sync starts."""
        self._queue: deque[_Waiter] = deque()
        """The parked waiters, in write order (so their ``end`` increases)."""
        self._rotating = 0
        """Rotations waiting for the lead to end: it is not handed on meanwhile."""
        self._idle = threading.Condition(self._lock)
        """Notified when the lead ends (``_syncing`` becomes false), for rotations and ``close``."""
        self._idle_waiting = 0
        self._work = threading.Condition(self._lock)
        """Notified when the flusher is given the lead, or the writer closes."""
        self._flusher_go = False
        self._flusher: threading.Thread | None = None
        self._kick_loop: asyncio.AbstractEventLoop | None = None
        self._last_sync = 0.0
        """How long the last sync a leader made took, in seconds (see :meth:`_kick`)."""
        """The loop where a :meth:`_kick` is pending (one per turn of the loop, not one per waiter)."""
        self._closing = False
        other = file != rundir.JOURNAL
        if other:
            self.rotate_bytes = 1 << 62  # only the journal is rotated
        lock_name = f"{file.removesuffix('.jsonl')}.lock" if other else rundir.JOURNAL_LOCK
        self._lock_fd = rundir.open_run_file(run_dir / lock_name, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise JournalLockedError(
                f"another process is writing {file} in {run_dir}; stop it first "
                "(two writers on one file would interleave their records)"
            ) from None
        self.active = run_dir / file
        self._id_prefix = os.urandom(4).hex()
        self._id_counter = 0
        self._broken = ""
        """Why the writer refuses to write (a failed write it could not cut back, a failed sync), or empty."""
        self._fd = -1
        try:
            self.repaired_bytes = repair_torn_tail(self.active)
            self.next_seq = count(self.active if other else run_dir)
            self._fd, self._size = self._open_active()
        except BaseException:
            os.close(self._lock_fd)  # a refused or unreadable journal leaves no lock held
            raise

    @property
    def waiting(self) -> int:
        """Callers parked until a sync covers their lines (threads and asyncio futures)."""
        return len(self._queue)

    @property
    def unsynced(self) -> int:
        """Bytes written that no sync covers yet (0: every line written is on disk)."""
        return self._written - self._synced

    def _open_active(self) -> tuple[int, int]:
        try:
            fd = rundir.open_run_file(self.active, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except PermissionError as e:
            raise JournalError(f"cannot write {self.active}: permission denied") from e
        return fd, os.fstat(fd).st_size

    def new_id(self) -> str:
        """A record id unique across processes: a random per-writer prefix and a counter."""
        with self._lock:
            return self._new_id()

    def _new_id(self) -> str:
        self._id_counter += 1
        return f"{self._id_prefix}{self._id_counter:x}"

    # -- appending

    def append(self, rec: Record, *, sync: bool = True, alone: bool = False) -> Record:
        """Give ``rec`` its ``seq`` (and ``id``/``ts`` if missing), write it, and return it.

        Thread-safe. With ``sync`` (and a durable writer) it returns only after a sync that
        covers the line; concurrent callers share syncs (see the class). A value JSON cannot
        hold raises ``TypeError`` and writes nothing.

        ``alone``: the caller knows no other append is coming meanwhile (the SDK's sequential
        step): with no sync under way, the line is synced holding the lock, without the lead's
        hand-off (one lock, no waiter); otherwise it takes its turn as any append.
        """
        with self._lock:
            end = self._write_locked(self._line(rec))
            if not sync or not self._durable or self._synced >= end:
                return rec
            if self._syncing or self._rotating:
                parked = _ThreadWaiter(end)
                self._queue.append(parked)
                waiter: _ThreadWaiter | None = parked
            elif alone:
                self._sync_locked()
                return rec
            else:
                waiter = None
                self._syncing = True
                fd, target = self._fd, self._written
        if waiter is None:
            self._lead(fd, target)
        else:
            self._park(waiter)
        return rec

    def append_last(self, rec: Record) -> Record:
        """Append ``rec`` as the writer's last record: synced, and every later write refused.

        Nothing can be written after it, not even by a thread that was about to: the line is
        written once no sync is under way and synced holding the lock (the run ends with it:
        a rollback). The writer is then closed for writing; :meth:`close` frees its files.
        """
        with self._lock:
            while self._syncing or self._rotating:
                self._idle_wait()
            self._write_locked(self._line(rec))
            if self._durable:
                self._sync_locked()
            self._broken = f"the journal writer of {self.run_dir} is closed (its last record is written)"
            self._fail_queue_locked()  # none: the sync covered every line written
        return rec

    def write(self, rec: Record) -> int:
        """Give ``rec`` its ``seq`` (and ``id``/``ts``), write it without waiting for a sync, and return
        its end in the stream, for :meth:`wait_synced`: a caller that must write in an order (under its
        own lock) then waits outside that lock, sharing the sync with the others."""
        with self._lock:
            return self._write_locked(self._line(rec))

    def wait_synced(self, end: int) -> None:
        """Return once a sync covers the stream up to ``end`` (from :meth:`write`), leading one or
        sharing another's as :meth:`append` does. Raises :class:`JournalError` if the writer broke
        (a failed sync, a close) before its bytes were synced."""
        with self._lock:
            if not self._durable or self._synced >= end:
                return
            if self._broken:
                raise JournalError(self._broken)  # a sync now would not prove bytes an earlier one failed on
            if self._syncing or self._rotating:
                waiter = _ThreadWaiter(end)
                self._queue.append(waiter)
            else:
                self._syncing = True
                fd, target = self._fd, self._written
                waiter = None
        if waiter is None:
            self._lead(fd, target)
        else:
            self._park(waiter)

    def _sync_locked(self) -> None:
        """Sync everything written so far while holding the lock (:meth:`append` with ``alone``)."""
        target = self._written
        try:
            self._datasync(self._fd)
        except OSError as e:
            if not self._broken:
                self._broken = self._sync_failed(e)
            self._fail_queue_locked()
            raise JournalError(self._broken) from e
        self._synced = target
        if self._queue:  # asyncio waiters whose flusher was not kicked yet: covered by this sync
            self._wake_synced_locked()

    def _sync_failed(self, err: OSError) -> str:
        return (
            f"cannot sync {self.active}: {err.strerror or err}; the records written since the last sync "
            "may not be on disk, and no later sync could prove them (after a failed sync the kernel may "
            "have dropped the pages): this writer refuses further writes; restart the agent (the steps "
            "whose records survived are served)"
        )

    async def aappend(self, rec: Record) -> Record:
        """:meth:`append` with ``sync=True`` for asyncio: write now, await the sync off the loop.

        The line is written at once, in the calling (event loop) thread, under the same lock
        as :meth:`append`, so its ``seq`` is the order of the calls. The sync runs on another
        thread (a leading ``append`` or this writer's flusher); the waiters parked when it
        starts share it, and each is woken in its own loop when a sync covers its bytes (a
        failed sync raises :class:`JournalError` in every waiter it covered).

        Cancelling the awaiting task does not take the record back: its bytes are written,
        and it is committed when the next sync covers them, as if it had been awaited; the
        cancelled caller is only not told when. The loop thread blocks only for the write,
        and, once per ``rotate_bytes``, for the rotation (which waits for a sync under way).
        """
        loop = _running_loop()
        with self._lock:
            end = self._write_locked(self._line(rec))
            fut = self._future_locked(end, loop)
        if fut is not None:
            await fut
        return rec

    def synced_future(self, end: int) -> asyncio.Future[None] | None:
        """For asyncio, :meth:`wait_synced` as a future of the running loop to await (``None``: synced already).

        The lead is taken as for :meth:`aappend`. Raises :class:`JournalError` if the writer broke before
        the bytes up to ``end`` (from :meth:`write`) were synced.
        """
        loop = _running_loop()
        with self._lock:
            if self._durable and self._synced < end and self._broken:
                raise JournalError(self._broken)
            return self._future_locked(end, loop)

    def _future_locked(self, end: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None] | None:
        if not self._durable or self._synced >= end:
            return None
        fut: asyncio.Future[None] = loop.create_future()
        self._queue.append(_AsyncWaiter(end, loop, fut))
        if not self._syncing and not self._rotating and self._kick_loop is not loop:
            # the lead is taken once the tasks ready in this turn of the loop have written their
            # lines too: the steps that finish together share one sync
            self._kick_loop = loop
            loop.call_soon(self._kick, loop)
        return fut

    def _kick(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the loop, after the tasks that were ready with the first waiter: lead the sync.

        While syncs are fast (the last one took at most :data:`INLINE_SYNC_MAX` seconds) the loop's thread
        syncs itself and resolves the waiters' futures at once: no hand-off to another thread, whose wake-up
        costs more than the sync on a fast disk. On a slower disk the flusher thread takes the lead, so the
        loop is not blocked for a whole sync.
        """
        with self._lock:
            if self._kick_loop is loop:
                self._kick_loop = None
            if self._syncing or self._rotating or not self._queue:
                return
            if self._last_sync > INLINE_SYNC_MAX:
                self._handoff_locked()
                return
            self._syncing = True
            fd, target = self._fd, self._written
        try:
            self._lead(fd, target)
        except JournalError:
            pass  # every waiter it covered was told

    def _line(self, rec: Record) -> bytes:
        """``rec``'s line with its ``seq`` (the next one), ``id`` and ``ts``; under the lock. A ``step``
        record holds exactly one of ``output`` and ``error`` (:class:`wire.StepRecord`): else ``ValueError``."""
        if rec.get("kind") == wire.STEP and ("output" in rec) is ("error" in rec):
            raise ValueError(
                f"a step record holds exactly one of 'output' and 'error'; step {rec.get('step')!r} "
                f"has {'both' if 'output' in rec else 'neither'} (nothing was written)"
            )
        rec["seq"] = self.next_seq
        if "id" not in rec:
            self._id_counter = n = self._id_counter + 1  # _new_id, inlined: every line pays it
            rec["id"] = f"{self._id_prefix}{n:x}"
        if "ts" not in rec:
            rec["ts"] = _utc_now()
        try:
            line = _dumps(rec, option=_LINE_OPTS_STR)
        except TypeError:
            line = _line_bytes(rec)  # a key that is not a str, a lone surrogate (or no JSON: TypeError again)
        redact = self._redact
        if redact is not None:
            line = redact(line)
        return line + b"\n"

    def _write_locked(self, line: bytes) -> int:
        """Write one line at the end of the active file; return the stream position after it (under the lock).

        All or nothing: a write that fails or stops short (disk full, file size limit,
        I/O error) is cut back to where the line began before the error is raised, so
        the next line never fuses with a partial one. If even that cut fails, the
        writer is broken and refuses every later write: a committed line is always whole.
        """
        if self._broken:
            raise JournalError(self._broken)
        at = self._size  # the file's end: the one writer (under the lock) appends only here
        size = len(line)
        try:
            n = os.write(self._fd, line)
            if n < size:
                rundir.write_all(self._fd, line[n:])
        except OSError as e:
            self._cut_back(at, e)
        self.next_seq += 1
        self._size = size = at + size
        self._written = end = self._written + len(line)
        if size >= self.rotate_bytes:
            try:
                self._rotate_locked(size)
            except JournalError:
                if self._broken:
                    raise
                # the line is written (and synced by the rotation, or by its own sync); tried again after the next line
        return end

    def _cut_back(self, at: int, e: OSError) -> NoReturn:
        """Truncate the active file to ``at`` after a failed append and raise a clear error."""
        what = f"cannot append to {self.active}: {e.strerror or e}"
        try:
            os.ftruncate(self._fd, at)
            os.fsync(self._fd)
        except OSError as cut:
            self._break(
                f"{what}, and the partial line could not be cut back ({cut.strerror or cut}); "
                "this writer refuses further writes: free space or fix the disk, then restart the agent "
                "(the next start moves the partial line aside to journal.jsonl.torn)"
            )
            raise JournalError(self._broken) from e
        if e.errno == errno.EIO:
            # after an I/O error the kernel may have dropped written pages: later syncs could lie
            self._break(f"{what}; after an I/O error this writer refuses further writes: restart the agent")
            raise JournalError(self._broken) from e
        raise JournalError(f"{what} (the record was not written; the journal is unchanged)") from e

    # -- group commit

    def _park(self, w: _ThreadWaiter) -> None:
        """Block until a sync covers ``w``'s bytes, or until ``w`` is given the lead; raise if it failed."""
        try:
            w.lock.acquire()
        except BaseException:  # KeyboardInterrupt in the main thread: the others must not wait on this one
            with self._lock:
                if w.state == _WAITING:
                    self._queue.remove(w)
                elif w.state == _LEAD:
                    self._handoff_locked()
            raise
        if w.state == _LEAD:
            self._lead()
        elif w.state == _FAILED:
            raise JournalError(w.error)

    def _lead(self, fd: int = -1, target: int = 0) -> None:
        """Sync as the commit leader (the lead is ours), wake the waiters covered, hand the lead on.

        ``fd``/``target``: what to sync, read under the lock when the lead was taken; a leader
        that was handed the lead reads them now (every line written until now is in it).
        Raises :class:`JournalError` if the sync failed: the writer is then broken, and every
        waiter not covered by an earlier sync fails with it.
        """
        if fd < 0:
            with self._lock:
                fd, target = self._fd, self._written
        err: OSError | None = None
        t0 = perf_counter()
        try:
            self._datasync(fd)  # the lock is free: the others go on writing (and parking) meanwhile
        except OSError as e:
            err = e
        except BaseException:
            with self._lock:
                self._handoff_locked()
            raise
        with self._lock:
            self._last_sync = perf_counter() - t0
            if err is None:
                if target > self._synced:
                    self._synced = target
            elif not self._broken:
                self._broken = self._sync_failed(err)
            self._wake_synced_locked()
            self._handoff_locked()
        if err is not None:
            raise JournalError(self._broken) from err

    def _wake_synced_locked(self) -> None:
        """Wake the parked waiters that ``_synced`` covers (the asyncio ones with one call per loop)."""
        q, synced = self._queue, self._synced
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] | None = None
        while q and q[0].end <= synced:
            w = q.popleft()
            if type(w) is _ThreadWaiter:
                w.state = _DONE
                w.lock.release()
            else:
                assert isinstance(w, _AsyncWaiter)
                if by_loop is None:
                    by_loop = {}
                by_loop.setdefault(w.loop, []).append(w.fut)
        if by_loop:
            for loop, futs in by_loop.items():
                _call_in(loop, _resolve, futs, None)

    def _fail_queue_locked(self) -> None:
        """The writer is broken: every parked waiter fails with its reason."""
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        while self._queue:
            w = self._queue.popleft()
            if type(w) is _ThreadWaiter:
                w.state, w.error = _FAILED, self._broken
                w.lock.release()
            else:
                assert isinstance(w, _AsyncWaiter)
                by_loop.setdefault(w.loop, []).append(w.fut)
        for loop, futs in by_loop.items():
            _call_in(loop, _resolve, futs, self._broken)

    def _handoff_locked(self) -> None:
        """The lead is free (under the lock): give it to a parked thread, else to the flusher for the
        asyncio waiters, else let it go. A broken writer fails the parked waiters instead; a waiting
        rotation gets the file to itself."""
        if self._broken:
            self._fail_queue_locked()
        q = self._queue
        if not q or self._rotating:
            self._syncing = False
            if self._idle_waiting:
                self._idle.notify_all()
            return
        self._syncing = True
        for i, w in enumerate(q):
            if type(w) is _ThreadWaiter:
                del q[i]
                w.state = _LEAD
                w.lock.release()
                return
        self._flusher_go = True
        if self._flusher is None or not self._flusher.is_alive():  # not alive: after a fork
            self._flusher = threading.Thread(target=self._flush_loop, name="journal-flusher", daemon=True)
            self._flusher.start()
        self._work.notify()

    def _idle_wait(self) -> None:
        self._idle_waiting += 1
        try:
            self._idle.wait()
        finally:
            self._idle_waiting -= 1

    def _flush_loop(self) -> None:
        """The flusher thread: leads the syncs that only asyncio waiters need, until :meth:`close`."""
        with self._lock:
            while True:
                while not self._flusher_go and not self._closing:
                    self._work.wait()
                if not self._flusher_go:
                    return
                self._flusher_go = False
                fd, target = self._fd, self._written
                self._lock.release()
                try:
                    self._lead(fd, target)
                except JournalError:
                    pass  # its waiters were told
                finally:
                    self._lock.acquire()

    def _break(self, why: str) -> None:
        """Refuse every later write (under the lock). The parked waiters fail now, or, if a sync is
        under way, when it ends (those it covers are committed)."""
        self._broken = why
        if not self._syncing:
            self._fail_queue_locked()

    # -- rotation

    def rotate(self) -> Path:
        """Seal the active file as the next numbered segment and start a new one (thread-safe).

        Until the rename, a failure leaves everything as it was; after it, a new active
        file that cannot be opened leaves the writer broken (it never appends to a sealed file).
        """
        with self._lock:
            sealed = self._rotate_locked(None)
            assert sealed is not None
            return sealed

    def _rotate_locked(self, size: int | None) -> Path | None:
        """Rotate (under the lock); with ``size``, only if the active file still is the one that reached it.

        The lead is waited for and held back meanwhile (a leader syncs the active file's fd
        outside the lock, and it is closed here). The file is fsynced before it is sealed:
        every line written to it is then on disk, so every parked waiter is committed by that
        sync; if the rotation stops before it, the lead goes to a parked waiter again.
        """
        self._rotating += 1
        try:
            while self._syncing:
                self._idle_wait()
            if self._broken:
                raise JournalError(self._broken)
            if size is not None and self._size < size:
                return None  # another thread rotated while this one waited
            return self._seal()
        finally:
            self._rotating -= 1
            if not self._syncing and not self._rotating:
                self._handoff_locked()  # waiters parked meanwhile and not committed by it get a leader

    def _seal(self) -> Path:
        """Sync the active file, seal it as the next segment and open a new one (under the lock, no lead)."""
        try:
            sealed = rundir.next_sealed(self.run_dir, "journal", ".jsonl")
        except OSError as e:
            raise JournalError(f"cannot rotate {self.active}: {e.strerror or e}") from e
        try:
            os.fsync(self._fd)
        except OSError as e:
            self._break(
                f"cannot sync {self.active} before sealing it: {e.strerror or e}; the records written since the "
                "last sync may not be on disk: this writer refuses further writes; restart the agent"
            )
            raise JournalError(self._broken) from e
        self._synced = self._written
        self._wake_synced_locked()
        try:
            os.rename(self.active, sealed)
        except OSError as e:
            raise JournalError(f"cannot rotate {self.active}: {e.strerror or e}") from e
        try:
            fd, size_now = self._open_active()
        except (OSError, JournalError) as e:
            self._break(f"cannot start a new {self.active} after sealing {sealed.name}: {e}; restart the agent")
            raise JournalError(self._broken) from e
        os.close(self._fd)
        self._fd, self._size = fd, size_now
        try:
            rundir.fsync_dir(self.run_dir)
        except OSError as e:
            raise JournalError(f"cannot sync {self.run_dir} after a rotation: {e.strerror or e}") from e
        return sealed

    def close(self) -> None:
        """Let the parked waiters' syncs finish, then close the files and free the lock.

        Later writes are refused (:class:`JournalError`). Call it once the appends are done.
        """
        with self._lock:
            if self._queue and not self._syncing and not self._rotating:
                self._handoff_locked()  # asyncio waiters whose loop stopped before its kick
            while self._syncing or self._queue:
                self._idle_wait()
            if not self._broken:
                self._broken = f"the journal writer of {self.run_dir} is closed"
            self._closing = True
            self._work.notify_all()
            flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _running_loop() -> asyncio.AbstractEventLoop:
    from asyncio import get_running_loop  # called from a coroutine: imported (not at this module's import)

    return get_running_loop()


def _call_in(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    from asyncio.events import _get_running_loop  # asyncio waiters exist: it is imported

    if _get_running_loop() is loop:
        fn(*args)  # in the loop's own thread (it led the sync): settled now, the tasks resume in its next turn
        return
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass  # the loop is closed: nobody awaits these any more (their records are synced, or failed, all the same)


def _resolve(futs: list[asyncio.Future[None]], error: str | None) -> None:
    """In the waiters' loop: settle each future still awaited (a cancelled one is done already)."""
    for fut in futs:
        if fut.done():
            continue  # cancelled: the record is committed all the same (or failed with the others)
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(JournalError(error))


def open_journal(
    run_dir: Path,
    *,
    redact: Callable[[bytes], bytes] | None = None,
    rotate_bytes: int = DEFAULT_ROTATE_BYTES,
    lazy: bool = True,
) -> tuple[JournalWriter, ResumeView]:
    """Lock the journal, repair a torn tail and load it: the writer and the entries (``lazy``: the resume
    view, with its overlap verdicts), from one read.

    The load runs after the repair and under the lock, so the writer's next seq is the
    count of exactly the lines loaded (no other process can append in between).
    """
    reader = JournalReader(run_dir)
    loaded: list[ResumeView] = []

    def load(_: Path) -> int:
        loaded.append(reader.resume_view() if lazy else ResumeView(reader.load(), {}))
        return reader.end_seq

    writer = JournalWriter(run_dir, rotate_bytes=rotate_bytes, redact=redact, count=load)
    return writer, loaded[0]
