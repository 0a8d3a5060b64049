"""The append-only JSONL journal: a durable writer and a lazy indexed reader.

The journal of a run is one logical byte stream: the sealed segments
``journal.000001.jsonl``, ``journal.000002.jsonl``, ... in order, then the active
``journal.jsonl``. Rotation renames the active file, so the stream never changes
under a reader; only complete (newline-terminated) lines count.

Every reader reads through the one primitive in :mod:`.segments`
(:meth:`JournalFile.chunks`, :func:`read_stream`); ``tail`` reads backward with the
same committed end (:meth:`JournalFile.last_lines`). :func:`open_journal` is the one
open of a writer: lock, repair a torn tail, load.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import mmap
import operator
import os
import threading
import weakref
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import accumulate, compress, islice, repeat
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, NoReturn, Self, cast

if TYPE_CHECKING:
    import asyncio

import orjson

from ..errors import JournalError, JournalLockedError
from . import rundir
from .records import BadLine, Kind, LazyRecord, Record, normalize, parse_line
from .segments import (
    CHUNK,
    Chunk,
    JournalFile,
    StreamPos,
    committed_size,
    count_file,
    count_lines,
    read_stream,
    sealed_since,
    segment_paths,
)

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
_STEP_PREFIX = b'{"kind":"step",'
_BEGIN_PREFIX = b'{"kind":"begin",'
_LAZY_PREFIXES = (_STEP_PREFIX, _BEGIN_PREFIX)
# What may follow a begin line without the steps overlapping (history's _OVERLAP says the same with a regex).
_AFTER_BEGIN = (_STEP_PREFIX, b'{"kind":"start",', b'{"kind":"rollback",')

OVERLAPS: weakref.WeakKeyDictionary[mmap.mmap, bool] = weakref.WeakKeyDictionary()
"""Whether a file's map (the resume view's ``LazyRecord.src``) shows overlapping steps: a ``begin`` line followed
by a line other than a ``step``, ``start`` or ``rollback`` (the end of the file is fine). Filled by the resume
view's read when it has read every line of the map, told from the lines it splits anyway (a pass over the begin
lines' successors), so the fold need not walk every byte of the file with history's ``_OVERLAP`` regex; a map
not here (read otherwise, or longer than what was read) is searched by the regex as before."""

Entry = Record | BadLine
"""A journal line: a record, or a line that is not one. (Lazy loads hand out :class:`LazyRecord`
in place of some records; it answers the same reads.)"""


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

    __slots__ = ("end", "lock", "state", "error")

    def __init__(self, end: int) -> None:
        self.end = end
        self.lock = threading.Lock()
        self.lock.acquire()
        self.state = _WAITING
        self.error = ""


class _AsyncWaiter:
    """An :meth:`JournalWriter.aappend` parked until a sync covers its bytes: a future in its loop."""

    __slots__ = ("end", "loop", "fut")

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
    ) -> None:
        """``count`` gives the next seq from the repaired files: :func:`open_journal` passes the
        load it needs anyway, so the journal is read once, not twice."""
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
        self._lock_fd = rundir.open_run_file(run_dir / rundir.JOURNAL_LOCK, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise JournalLockedError(
                f"another process is writing the journal in {run_dir}; stop it first "
                "(two agents on one run directory would interleave their steps)"
            ) from None
        self.active = run_dir / rundir.JOURNAL
        self._id_prefix = os.urandom(4).hex()
        self._id_counter = 0
        self._broken = ""
        """Why the writer refuses to write (a failed write it could not cut back, a failed sync), or empty."""
        self._fd = -1
        try:
            self.repaired_bytes = repair_torn_tail(self.active)
            self.next_seq = count(run_dir)
            self._fd, self._size = self._open_active()
        except BaseException:
            os.close(self._lock_fd)  # a refused or unreadable journal leaves no lock held
            raise

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

    def write_line(self, line: bytes, *, sync: bool = True) -> None:
        """Append one already-serialised, newline-terminated line (thread-safe, as :meth:`append`)."""
        with self._lock:
            end = self._write_locked(line)
            if not sync or not self._durable or self._synced >= end:
                return
            waiter = _ThreadWaiter(end)
            self._queue.append(waiter)
            if not self._syncing and not self._rotating:
                self._handoff_locked()  # the lead goes to the first thread parked: this one
        self._park(waiter)

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
        """``rec``'s line with its ``seq`` (the next one), ``id`` and ``ts``; under the lock."""
        rec["seq"] = self.next_seq
        if "id" not in rec:
            self._id_counter = n = self._id_counter + 1  # _new_id, inlined: every line pays it
            rec["id"] = f"{self._id_prefix}{n:x}"
        if "ts" not in rec:
            rec["ts"] = _utc_now()
        try:
            line = _dumps(rec, option=_LINE_OPTS_STR)
        except TypeError:
            line = _dumps(rec, option=_LINE_OPTS)  # a key that is not a str (or no JSON: TypeError again)
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
        finally:
            self._rotating -= 1
            if not self._syncing and not self._rotating:
                self._handoff_locked()  # waiters parked meanwhile and not committed by it get a leader

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
) -> tuple[JournalWriter, list[Entry]]:
    """Lock the journal, repair a torn tail and load it: the writer and the entries, from one read.

    The load runs after the repair and under the lock, so the writer's next seq is the
    count of exactly the lines loaded (no other process can append in between).
    """
    reader = JournalReader(run_dir)
    loaded: list[list[Entry]] = []

    def load(_: Path) -> int:
        loaded.append(reader.load(lazy=lazy))
        return reader.end_seq

    writer = JournalWriter(run_dir, rotate_bytes=rotate_bytes, redact=redact, count=load)
    return writer, loaded[0]


# --------------------------------------------------------------------------- reader


def _parse(raw: bytes, seq: int, path: Path, line_no: int) -> Entry | None:
    if not raw.strip():
        return None
    try:
        rec = parse_line(raw)
    except ValueError as e:
        return BadLine(str(path), line_no, seq, str(e), raw[:200].decode("utf-8", "replace"))
    if rec.get("seq") != seq or "kind" not in rec or "ts" not in rec:
        normalize(rec, seq)
    return rec


ANCHOR = 64
"""The reader's index keeps where every ``ANCHOR``-th line of a file starts (an eighth of a byte a line),
not every line: ``get`` reads from the anchor before its line (some 16 kB of a 250-byte-a-record journal)."""

ANCHOR_BYTES = 64 * 1024
"""... and where each line starts that begins ``ANCHOR_BYTES`` or more after the anchor before it: a journal of
large records (a 2 MB tool output a line) is read a line at a time, not 64 of them (an anchor a line there)."""


class _Lines:
    """The line index of one file: the lines where reads start (anchors: every ``ANCHOR``-th line, and each line
    that starts ``ANCHOR_BYTES`` past the anchor before it) and their offsets, how many lines are indexed and
    where the last one ends. Shared by twin readers (``JournalReader.twin``): it only grows, and ``offsets``,
    then ``starts``, then ``end``, then ``n`` are written in that order, so a reader that takes ``n`` first finds
    the anchors and an end for every line it counted (a file rewritten in place gets a new one)."""

    __slots__ = ("end", "n", "offsets", "starts")

    def __init__(self) -> None:
        self.starts: array[int] = array("q")  # anchor lines (0-based, ascending; line 0 first)
        self.offsets: array[int] = array("q")  # where each starts
        self.end = 0
        self.n = 0

    def block(self, i: int) -> tuple[int, int, int]:
        """The anchor at or before line ``i``: its line, where it starts, and where the lines up to the next
        anchor end."""
        starts = self.starts
        n = len(starts)
        a = i // ANCHOR
        if a >= n or starts[a] != i - i % ANCHOR or (a + 1 < n and starts[a + 1] <= i):
            a = bisect_right(starts, i) - 1  # byte anchors before it: find it
        return starts[a], self.offsets[a], (self.offsets[a + 1] if a + 1 < n else self.end)

    def add(self, n: int, first: int, line_starts: list[int]) -> None:
        """Anchor the lines ``n``... of a chunk whose line starts (and end, last) are ``line_starts``; ``first``:
        the index of its first line that is an ``ANCHOR``-th line. In C unless the chunk has large records."""
        k = len(line_starts) - 1
        offsets, starts = self.offsets, self.starts
        picked = line_starts[first:k:ANCHOR]
        prev = offsets[-1] if offsets else line_starts[0]
        if line_starts[k] - prev <= ANCHOR_BYTES or max(map(operator.sub, [*picked[1:], line_starts[k]], [prev, *picked])) <= ANCHOR_BYTES:
            offsets.extend(picked)  # no anchor gap over ANCHOR_BYTES: every ANCHOR-th line only (the common case)
            starts.extend(range(n + first, n + k, ANCHOR))
            return
        for j in range(k):  # large records: a line at a time
            at = line_starts[j]
            if (n + j) % ANCHOR == 0 or at - prev >= ANCHOR_BYTES:
                offsets.append(at)
                starts.append(n + j)
                prev = at


@dataclass
class _Seg:
    path: Path
    ino: int
    first_seq: int = -1
    lines: _Lines = field(default_factory=_Lines)
    indexed: bool = False
    sealed: bool = False  # indexed to its end after it stopped being the last segment


_TAIL_BLOCK = 256 * 1024


class JournalReader:
    """Reads a run's journal lazily.

    ``tail(n)`` reads only the end of the files; ``index()`` records where every
    ``ANCHOR``-th line starts, without parsing (in chunks: memory stays small, and
    the index takes an eighth of a byte a line); ``get(seq)`` parses one
    record; ``load()`` parses everything as fast as orjson allows; ``read_new()``
    returns records committed since the last read. Bad lines are returned as
    ``BadLine`` entries (with their file and line number) and collected in
    ``problems``, never raised. Every read goes through :func:`read_stream` or
    :meth:`JournalFile.chunks`; ``chunk`` is their read size (tests make it tiny).
    """

    def __init__(self, source: Path, *, chunk: int = CHUNK) -> None:
        self.source = source
        self.chunk = chunk
        self.problems: list[BadLine] = []
        self._segs: list[_Seg] = []
        self._ov: tuple[Any, int, bool, bool] | None = None
        """The resume view's overlap check of the map being read (see :data:`OVERLAPS`): the map, where its next
        region must start, whether it overlaps so far, whether the last line read is a begin (``None``: unknown)."""
        self._cursor = StreamPos()  # where read_new() goes on; load() and seek_end() move it to the end

    # -- discovery
    def _refresh_segments(self) -> list[_Seg]:
        """The segments now, keeping what is known of each file by its inode: a rotation renames the
        active file, so its index stays valid under the sealed name."""
        known = {s.ino: s for s in self._segs}
        for _ in range(100):  # a rotation per try would be needed to go round again
            paths = segment_paths(self.source)
            segs = []
            for p in paths:
                try:
                    ino = os.stat(p).st_ino
                except FileNotFoundError:
                    continue  # renamed by a rotation after the listing: the next call sees it
                seg = known.get(ino)
                if seg is None:
                    seg = _Seg(p, ino)
                seg.path = p
                segs.append(seg)
            # a rotation between the listing and the stats: "journal.jsonl" was then the new active file,
            # and the segment sealed from the old one is missing from the listing; list again
            active = bool(paths) and paths[-1].name == rundir.JOURNAL and paths != [self.source]
            if not active or not sealed_since(self.source, paths):
                break
        self._segs = segs
        return segs

    def _open(self, seg: _Seg) -> JournalFile:
        """The file of an indexed segment, found by its inode if a rotation renamed it."""
        jf = JournalFile.open(seg.path)
        if jf is not None and jf.ino == seg.ino:
            return jf
        if jf is not None:
            jf.close()
        for p in segment_paths(self.source):
            jf = JournalFile.open(p)
            if jf is not None:
                if jf.ino == seg.ino:
                    seg.path = p
                    return jf
                jf.close()
        raise FileNotFoundError(f"{seg.path}: the journal file is gone")

    def _parse_lines(self, c: Chunk, out: list[Entry]) -> None:
        """Parse a region's lines into ``out``; bad lines also go to ``problems``."""
        r = c.region
        lines = c.lines()
        self._parse_some(lines, 0, len(lines), (r.first_seq, r.first_line, r.start, r.path), out)

    # -- bulk
    def iter_entries(self, *, lazy: bool = False) -> Iterator[Entry]:
        """Every committed entry in order, parsed chunk by chunk (bounded memory).

        ``lazy`` is the SDK's resume view: successful ``step`` lines written by this
        package come back unparsed, as :class:`LazyRecord`, and ``begin`` lines
        (which only say that a step started) are left out. After the last entry,
        ``read_new`` goes on from exactly where this read ended.
        """
        cursor = StreamPos()
        # the resume view keeps step lines as places in a read-only map of the file
        for c in read_stream(self.source, cursor, chunk=self.chunk, mapped=lazy):
            out: list[Entry] = []
            if lazy:
                self._lazy_entries(c, out, c.lines())
            else:
                self._parse_lines(c, out)
            yield from out
        self._cursor = cursor

    def _lazy_entries(self, c: Chunk, out: list[Entry], lines: list[bytes]) -> None:
        """One region for the resume view, with two C-speed passes instead of a Python step per line."""
        mapped = c.map
        assert mapped is not None  # a region has bytes, so its file is mapped
        seq0, line0, path, at = c.region.first_seq, c.region.first_line, c.region.path, c.region.start
        spath = str(path)
        starts = list(accumulate(map((1).__add__, map(len, lines)), initial=at))  # line k is starts[k]:starts[k+1]-1
        # Lines holding "error" (failed steps, rare): found by one scan of the region's bytes, not a scan per line.
        data, errors = c.data, []
        i = data.find(b'"error"')
        while i >= 0:
            k = bisect_right(starts, at + i) - 1
            errors.append(k)
            i = data.find(b'"error"', starts[k + 1] - at)
        # a step line without "error" is lazy; every other line but a begin without "error" is parsed
        # (telling the kinds by one byte of each line, checked by counting the two prefixes in the region, was
        # measured: 8% fewer instructions, but two more passes over the region's bytes, and no faster)
        lazy = list(map(bytes.startswith, lines, repeat(_STEP_PREFIX)))  # one C-level pass, no Python step per line
        for k in errors:
            lazy[k] = False
        lazy_idx = list(compress(range(len(lines)), lazy))
        begins = list(map(bytes.startswith, lines, repeat(_BEGIN_PREFIX)))
        self._check_overlap(c, lines, begins)
        other_idx = list(compress(range(len(lines)), map(operator.not_, map(operator.or_, lazy, begins))))
        if errors:
            other_idx = sorted(set(other_idx).union(errors))
        step = Kind.STEP.value  # looked up once, not per line (an enum member lookup costs ~100 ns)
        steps: list[Entry] = list(
            map(
                cast(Callable[..., Record], LazyRecord),  # a LazyRecord stands in for a step record
                repeat(step),
                repeat(mapped),
                compress(starts, lazy),
                map((-1).__add__, compress(islice(starts, 1, None), lazy)),
                map(seq0.__add__, lazy_idx),
                repeat(spath),
            )
        )
        if not other_idx:
            out.extend(steps)
            return
        j = 0
        for k in other_idx:  # few: start, checkpoint, rollback, note, failed steps, foreign lines
            i = bisect_left(lazy_idx, k, lo=j)
            out.extend(steps[j:i])
            j = i
            ent = _parse(lines[k], seq0 + k, path, line0 + k)
            if ent is None:
                continue
            if type(ent) is BadLine:
                ent = replace(ent, offset=starts[k])
                self.problems.append(ent)
            out.append(ent)
        out.extend(steps[j:])

    def _check_overlap(self, c: Chunk, lines: list[bytes], begins: list[bool]) -> None:
        """Go on with the overlap check of ``c``'s map (see :data:`OVERLAPS`) over its next region, at C speed."""
        m: Any = c.map
        region = c.region
        ov = self._ov
        if ov is None or ov[0] is not m:
            if region.start != 0:
                self._ov = None  # not read from the file's start: the regex decides
                return
            ov = (m, 0, False, False)
        src, at, overlap, after_begin = ov
        if region.start != at:
            self._ov = None
            return
        if not overlap:
            # a region's first line after the last one's begin; then each begin's next line in the region
            if after_begin and not lines[0].startswith(_AFTER_BEGIN):
                overlap = True
            elif not all(map(bytes.startswith, compress(islice(lines, 1, None), begins), repeat(_AFTER_BEGIN))):
                overlap = True
        if region.end == len(src):  # every line of the map read: a begin last is the end of the file, fine
            OVERLAPS[src] = overlap
            self._ov = None
            return
        self._ov = (src, region.end, overlap, begins[-1])

    @property
    def end_seq(self) -> int:
        """The seq after the last line read by ``load()``/``read_new()`` (the next seq a writer gives)."""
        return self._cursor.seq

    def load(self, *, lazy: bool = False) -> list[Entry]:
        """Parse the whole journal into memory and remember the end for ``read_new``."""
        self.problems = []
        enabled = gc.isenabled()
        gc.disable()  # a million small dicts: the cyclic GC would rescan them again and again
        try:
            # iter_entries' loop into one list (no generator step per entry: a million-step resume reads here)
            out: list[Entry] = []
            cursor = StreamPos()
            for c in read_stream(self.source, cursor, chunk=self.chunk, mapped=lazy):
                if lazy:
                    self._lazy_entries(c, out, c.lines())
                else:
                    self._parse_lines(c, out)
            self._cursor = cursor
            return out
        finally:
            if enabled:
                gc.enable()

    # -- tail
    def tail(self, n: int) -> list[Entry]:
        """The entries among the last ``n`` lines, reading only the end of the journal.

        The seq of the last line is taken from its ``seq`` field when it has one (this
        package's writer always writes it), else by counting lines; a line's number in
        its file from the file's first ``seq`` the same way.
        """
        if n <= 0:
            return []
        paths = segment_paths(self.source)
        parts: list[_TailPart] = []  # the files the lines come from, first file first
        got = 0
        for i in range(len(paths) - 1, -1, -1):
            if got >= n:
                break
            jf = JournalFile.open(paths[i])
            if jf is None:
                continue
            with jf:
                lines, whole = jf.last_lines(n - got, block=min(self.chunk, _TAIL_BLOCK))
                part = _TailPart(paths[i], lines, end=jf.end)
                if whole:
                    part.first_line = 1
                elif i == 0:
                    part.file_seq = 0  # the stream's first line is seq 0
                else:
                    part.file_seq = jf.first_seq_field()
            parts.insert(0, part)
            got += len(lines)
        raws = [raw for part in parts for raw in part.lines]
        last_seq: int | None = None
        for k in range(len(raws) - 1, -1, -1):
            try:
                rec = orjson.loads(raws[k])
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and type(rec.get("seq")) is int:
                last_seq = int(rec["seq"]) + (len(raws) - 1 - k)
            break
        if last_seq is None:
            last_seq = count_lines(self.source, chunk=self.chunk) - 1
        out: list[Entry] = []
        seq = last_seq - len(raws) + 1
        for part in parts:
            if part.first_line < 0:
                if part.file_seq is not None:
                    part.first_line = seq - part.file_seq + 1
                else:  # a file whose first line has no seq: count its lines
                    part.first_line = count_file(part.path, self.chunk) - len(part.lines) + 1
            for k, raw in enumerate(part.lines):
                ent = _parse(raw, seq + k, part.path, part.first_line + k)
                if ent is not None:
                    if type(ent) is BadLine:
                        ent = replace(ent, offset=part.end - sum(len(x) + 1 for x in part.lines[k:]))
                        self.problems.append(ent)
                    out.append(ent)
            seq += len(part.lines)
        return out

    # -- random access
    def index(self) -> int:
        """Record where lines start, every ``ANCHOR``-th (no parsing); return the number of lines."""
        seq = 0
        segs = self._refresh_segments()
        held: list[bytes] = []
        for seg in segs:
            seg.first_seq = seq
            # sealed segments never change; the last one grows, up to its rotation
            if not seg.sealed:
                # the last lines split stay alive until the next segment's first split: freeing them
                # first costs a page fault per page of the next chunk (measured: 6 % of the index time)
                held = self._index_segment(seg) or held
                seg.sealed = seg.indexed and seg is not segs[-1]
            seq += seg.lines.n
        return seq

    def _index_segment(self, seg: _Seg) -> list[bytes]:
        """Index the lines of ``seg`` not yet indexed; return the last lines split (see ``index``)."""
        lines: list[bytes] = []
        jf = JournalFile.open(seg.path)
        if jf is None:
            return lines
        with jf:
            if jf.ino != seg.ino:
                return lines  # renamed by a rotation since the listing: the next index() finds it by its new name
            idx = seg.lines
            if not jf.is_line_start(idx.end):
                idx = _Lines()  # rewritten in place: index it again (a twin keeps the old index)
            n = idx.n
            for c in jf.chunks(idx.end, seg.first_seq + n, n + 1, chunk=self.chunk):
                lines = c.lines()  # the previous list is freed after this split, not before
                k = len(lines)
                first = -n % ANCHOR  # the chunk's first line that is an anchor
                if first < k or c.region.end - (idx.offsets[-1] if idx.offsets else c.region.start) > ANCHOR_BYTES:
                    # line starts, all in C: region start + running sum of (len + 1); see _Lines.add
                    idx.add(n, first, list(accumulate(map((1).__add__, map(len, lines)), initial=c.region.start)))
                n += k
                idx.end = c.region.end  # after the anchors, before the count (see _Lines)
                idx.n = n
        seg.lines = idx
        seg.indexed = True
        return lines

    def __len__(self) -> int:
        return sum(s.lines.n for s in self._segs if s.indexed)

    def get(self, seq: int) -> Entry | None:
        """Parse the line at ``seq`` (after ``index()``); ``None`` for a blank line.

        One read from the anchor before the line to the next anchor (indexed lines are committed), split
        in C only as far as the line."""
        for seg in self._segs:
            if seg.first_seq <= seq < seg.first_seq + seg.lines.n:
                i = seq - seg.first_seq
                line, at, stop = seg.lines.block(i)
                with self._open(seg) as jf:
                    data = os.pread(jf.fd, stop - at, at)
                if len(data) < stop - at:
                    raise JournalError(f"{seg.path} shrank while being read (committed lines are never removed)")
                k = i - line
                parts = data.split(b"\n", k + 1)  # split in C, only as far as the line
                ent = _parse(parts[k], seq, seg.path, i + 1)
                if type(ent) is BadLine:
                    return replace(ent, offset=at + sum(len(x) + 1 for x in parts[:k]))
                return ent
        raise IndexError(seq)

    def get_range(self, start: int, stop: int) -> list[Entry]:
        """Parse lines ``start`` to ``stop`` (exclusive) after ``index()``, from the anchor before ``start``."""
        out: list[Entry] = []
        for seg in self._segs:
            idx = seg.lines
            n = idx.n  # first: the anchors and the end are there for every line counted (see _Lines)
            lo = max(start, seg.first_seq)
            hi = min(stop, seg.first_seq + n)
            if lo >= hi:
                continue
            a, b = lo - seg.first_seq, hi - seg.first_seq  # the file's lines a..b-1 (0-based)
            first, at, _ = idx.block(a)  # the anchor's line, where it starts
            end = idx.block(b - 1)[2]
            with self._open(seg) as jf:
                if end - at <= self.chunk:  # a screen's worth: one read, no chunk probes (indexed lines are committed)
                    data = os.pread(jf.fd, end - at, at)
                    if len(data) < end - at:
                        raise JournalError(f"{seg.path} shrank while being read (committed lines are never removed)")
                    lines = data.split(b"\n", b - first)  # split in C, only as far as the last line
                    self._parse_some(lines, a - first, b - first, (lo - (a - first), first + 1, at, seg.path), out)
                    continue
                for c in jf.chunks(at, seg.first_seq + first, first + 1, stop=end, chunk=self.chunk):
                    lines = c.lines()
                    k0 = c.region.first_line - 1  # the file's line of lines[0]
                    if k0 + len(lines) > a:
                        r = c.region
                        self._parse_some(lines, max(a - k0, 0), min(b - k0, len(lines)), (r.first_seq, r.first_line, r.start, r.path), out)
                    if k0 + len(lines) >= b:
                        break
        return out

    def _parse_some(
        self, lines: list[bytes], i: int, j: int, where: tuple[int, int, int, Path], out: list[Entry]
    ) -> None:
        """Parse ``lines[i:j]`` into ``out``; bad lines also go to ``problems``. ``where``: the seq, line
        number and byte offset of ``lines[0]``, and its file."""
        seq, line, at, path = where
        for k in range(i, j):
            ent = _parse(lines[k], seq + k, path, line + k)
            if ent is None:
                continue
            if type(ent) is BadLine:
                ent = replace(ent, offset=at + sum(len(x) + 1 for x in lines[:k]))  # rare: no running sum
                self.problems.append(ent)
            out.append(ent)

    # -- following
    def read_new(self) -> list[Entry]:
        """Entries committed since the last ``load()``/``read_new()``/``seek_end()`` (the first call reads all)."""
        out: list[Entry] = []
        for c in read_stream(self.source, self._cursor, chunk=self.chunk):
            self._parse_lines(c, out)
        return out

    def seek_end(self) -> int:
        """Start ``read_new`` from the current end (after a ``tail``); return the number of committed lines."""
        cursor = StreamPos()
        for _ in read_stream(self.source, cursor, chunk=self.chunk):
            pass
        self._cursor = cursor
        return cursor.seq

    def twin(self) -> JournalReader:
        """A reader for another thread that shares this one's line index and nothing else.

        A file's index (:class:`_Lines`) only grows (``index()`` appends; a file
        rewritten in place gets a new one), so one twin may index while the other
        reads lines it has counted (each array operation is atomic under the GIL).
        Each keeps its own segment list, files, position and problems. The TUI's
        reading worker indexes one twin while the UI thread reads the other: the
        index is held once.
        """
        twin = JournalReader(self.source, chunk=self.chunk)
        twin._segs = [replace(s) for s in self._segs]  # a new _Seg each, the same ``lines`` index
        return twin


@dataclass
class _TailPart:
    """The last lines of one file, for ``tail``, and what places them: their first line number, or
    the seq of the file's first line."""

    path: Path
    lines: list[bytes]
    first_line: int = -1
    file_seq: int | None = None
    end: int = 0
    """The file's committed end: where the last line's newline ends."""


def read_json_lines(path: Path, *, chunk: int = CHUNK) -> list[dict[str, Any]]:
    """A small JSONL file (e.g. ``supervisor.jsonl``) as a list; bad and torn lines are skipped."""
    jf = JournalFile.open(path)
    if jf is None:
        return []
    out = []
    with jf:
        for c in jf.chunks(chunk=chunk):
            for raw in c.lines():
                if raw.strip():
                    try:
                        obj = parse_line(raw)
                    except ValueError:
                        continue  # an event file's reader wants the events; the damaged line stays in the file
                    out.append(obj)
    return out
