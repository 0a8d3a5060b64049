"""The append-only JSONL journal: a durable writer and a lazy indexed reader.

The journal of a run is one logical byte stream: the sealed segments
``journal.000001.jsonl``, ``journal.000002.jsonl``, ... in order, then the active
``journal.jsonl``. Rotation renames the active file, so the stream never changes
under a reader; only complete (newline-terminated) lines count.
"""

from __future__ import annotations

import fcntl
import gc
import mmap
import os
import re
import secrets
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, cast

import orjson

from ..errors import JournalError, JournalLockedError
from . import rundir
from .records import BadLine, LazyRecord, Record, normalize, parse_line

DEFAULT_ROTATE_BYTES = 64 * 1024 * 1024
TORN_SUFFIX = ".torn"
_SEGMENT_RE = re.compile(r"^journal\.(\d{6,})\.jsonl$")
_CHUNK = 8 * 1024 * 1024
_STEP_PREFIX = b'{"kind":"step",'
_LAZY_PREFIXES = (_STEP_PREFIX, b'{"kind":"begin",')

Entry = Record | BadLine
"""A journal line: a record, or a line that is not one. (Lazy loads hand out :class:`LazyRecord`
in place of some records; it answers the same reads.)"""


# --------------------------------------------------------------------------- segments


def segment_paths(source: Path) -> list[Path]:
    """The journal's files in stream order. ``source`` is a run directory or a bare ``.jsonl`` file."""
    if source.is_file():
        return [source]
    sealed: list[tuple[int, Path]] = []
    try:
        names = os.listdir(source)
    except FileNotFoundError:
        return []
    for name in names:
        m = _SEGMENT_RE.match(name)
        if m:
            sealed.append((int(m.group(1)), source / name))
    sealed.sort()
    paths = [p for _, p in sealed]
    active = source / rundir.JOURNAL
    if active.exists():
        paths.append(active)
    return paths


def _committed_size(fd: int, size: int) -> int:
    """Bytes of the file up to and including its last newline (a torn tail is not committed)."""
    if size == 0:
        return 0
    pos = size
    block = 64 * 1024
    while pos > 0:
        start = max(0, pos - block)
        chunk = os.pread(fd, pos - start, start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def repair_torn_tail(path: Path) -> int:
    """Move a partial last line of ``path`` to ``path.torn`` and truncate; return the bytes moved.

    A line is committed only with its newline. The torn bytes are appended to the
    ``.torn`` file, followed by a newline that separates them from later repairs,
    and made durable before the journal is truncated, so not one byte is lost.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        keep = _committed_size(fd, size)
        if keep == size:
            return 0
        torn = os.pread(fd, size - keep, keep)
        tfd = os.open(str(path) + TORN_SUFFIX, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, rundir.FILE_MODE)
        try:
            rundir.write_all(tfd, torn + b"\n")
            os.fsync(tfd)
        finally:
            os.close(tfd)
        os.ftruncate(fd, keep)
        os.fsync(fd)
        return len(torn)
    finally:
        os.close(fd)


def count_lines(source: Path) -> int:
    """Committed lines across all segments (the next seq a writer gives)."""
    total = 0
    for p in segment_paths(source):
        with open(p, "rb") as f:
            fd = f.fileno()
            end = _committed_size(fd, os.fstat(fd).st_size)
            left = end
            while left > 0:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    break
                total += chunk.count(b"\n")
                left -= len(chunk)
    return total


def journal_locked(run_dir: Path) -> bool:
    """Whether a process holds the journal lock of ``run_dir`` (an agent writing it) right now.

    A shared, non-blocking probe of the writer's exclusive ``flock``: it never waits
    and takes nothing a writer would need (released before returning).
    """
    try:
        fd = os.open(run_dir / rundir.JOURNAL_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


# --------------------------------------------------------------------------- writer


class JournalWriter:
    """Appends records to a run's journal; one writer per run directory (enforced by a lock).

    ``append(rec, sync=True)`` returns after the line and its newline are on disk
    (``fdatasync``). ``sync=False`` writes through to the kernel only: the record
    survives a crash of the process, not of the machine (used for ``begin``).
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
        self._lock_fd = os.open(run_dir / rundir.JOURNAL_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, rundir.FILE_MODE)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise JournalLockedError(
                f"another process is writing the journal in {run_dir}; stop it first "
                "(two agents on one run directory would interleave their steps)"
            ) from None
        self.active = run_dir / rundir.JOURNAL
        self.repaired_bytes = repair_torn_tail(self.active)
        try:
            self.next_seq = count(run_dir)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._id_prefix = secrets.token_hex(4)
        self._id_counter = 0
        self._fd = -1
        self._open_active()

    def _open_active(self) -> None:
        try:
            self._fd = os.open(self.active, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, rundir.FILE_MODE)
        except PermissionError as e:
            raise JournalError(f"cannot write {self.active}: permission denied") from e
        self._size = os.fstat(self._fd).st_size

    def new_id(self) -> str:
        """A record id unique across processes: a random per-writer prefix and a counter."""
        self._id_counter += 1
        return f"{self._id_prefix}{self._id_counter:x}"

    def append(self, rec: Record, *, sync: bool = True) -> Record:
        """Give ``rec`` its ``seq`` (and ``id``/``ts`` if missing), write it, and return it."""
        rec["seq"] = self.next_seq
        if "id" not in rec:
            rec["id"] = self.new_id()
        if "ts" not in rec:
            rec["ts"] = rundir.utc_now()
        line = orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        if self._redact is not None:
            line = self._redact(line)
        self.write_line(line + b"\n", sync=sync)
        return rec

    def write_line(self, line: bytes, *, sync: bool = True) -> None:
        """Append one already-serialised, newline-terminated line."""
        try:
            rundir.write_all(self._fd, line)
            if sync and self._durable:
                os.fdatasync(self._fd)
        except OSError as e:
            raise JournalError(f"cannot append to {self.active}: {e.strerror}") from e
        self.next_seq += 1
        self._size += len(line)
        if self._size >= self.rotate_bytes:
            self.rotate()

    def rotate(self) -> Path:
        """Seal the active file as the next numbered segment and start a new one."""
        sealed = rundir.next_sealed(self.run_dir, "journal", ".jsonl")
        os.fsync(self._fd)
        os.close(self._fd)
        os.rename(self.active, sealed)
        self._open_active()
        rundir.fsync_dir(self.run_dir)
        return sealed

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


@dataclass
class _Seg:
    path: Path
    first_seq: int = -1
    starts: array[int] = field(default_factory=lambda: array("q"))  # line start offsets, plus end
    indexed: bool = False


class JournalReader:
    """Reads a run's journal lazily.

    ``tail(n)`` reads only the end of the files; ``index()`` records line offsets
    without parsing (in chunks, so memory stays small); ``get(seq)`` parses one
    record; ``load()`` parses everything as fast as orjson allows; ``read_new()``
    returns records committed since the last read. Bad lines are returned as
    ``BadLine`` entries and collected in ``problems``, never raised.
    """

    def __init__(self, source: Path) -> None:
        self.source = source
        self.problems: list[BadLine] = []
        self._segs: list[_Seg] = []
        self._consumed = 0  # logical stream offset read by load()/read_new()
        self._consumed_seq = 0
        self._end_seq = 0
        self._end_bytes = 0

    # -- discovery
    def _refresh_segments(self) -> list[_Seg]:
        paths = segment_paths(self.source)
        known = {s.path: s for s in self._segs}
        segs = []
        for p in paths:
            segs.append(known.get(p) or _Seg(p))
        # a rotation renamed the active file: its index is no longer valid for the new one
        if self._segs and segs and self._segs[-1].path == segs[-1].path and len(segs) != len(self._segs):
            segs[-1] = _Seg(segs[-1].path)
        self._segs = segs
        return segs

    # -- bulk
    def iter_entries(self, *, lazy: bool = False) -> Iterator[Entry]:
        """Every committed entry in order, parsed chunk by chunk (bounded memory).

        ``lazy`` is the SDK's resume view: successful ``step`` lines written by this
        package come back unparsed, as :class:`LazyRecord`, and ``begin`` lines
        (which only say that a step started) are left out.
        """
        seq = 0
        total_bytes = 0
        for seg in self._refresh_segments():
            line_no = 0
            try:
                f = open(seg.path, "rb")
            except FileNotFoundError:
                continue
            with f:
                end = _committed_size(f.fileno(), os.fstat(f.fileno()).st_size)
                total_bytes += end
                # the resume view keeps step lines as places in a read-only map of the file
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if lazy and end else None
                left = end
                carry = b""
                at = 0  # file offset of data[0]
                while left > 0:
                    chunk = f.read(min(_CHUNK, left))
                    if not chunk:
                        break
                    left -= len(chunk)
                    data = carry + chunk
                    cut = data.rfind(b"\n") + 1
                    carry = data[cut:]
                    lines = data[:cut].split(b"\n")
                    lines.pop()
                    if mapped is not None:
                        yield from self._lazy_entries(lines, seq, line_no, seg.path, mapped, at)
                    else:
                        for k, raw in enumerate(lines):
                            ent = _parse(raw, seq + k, seg.path, line_no + k + 1)
                            if ent is None:
                                continue
                            if type(ent) is BadLine:
                                self.problems.append(ent)
                            yield ent
                    seq += len(lines)
                    line_no += len(lines)
                    at += cut
        self._end_seq = seq
        self._end_bytes = total_bytes

    def _lazy_entries(
        self, lines: list[bytes], seq0: int, line0: int, path: Path, mapped: mmap.mmap, at: int
    ) -> list[Entry]:
        """One chunk for the resume view, with two C-speed passes instead of a Python step per line."""
        spath = str(path)
        lazy_idx = [k for k, raw in enumerate(lines) if raw.startswith(_STEP_PREFIX) and b'"error"' not in raw]
        other_idx = [k for k, raw in enumerate(lines) if not raw.startswith(_LAZY_PREFIXES) or b'"error"' in raw]
        starts = list(accumulate(map((1).__add__, map(len, lines)), initial=at))  # line k is starts[k]:starts[k+1]-1
        steps: list[Entry] = [
            cast(Record, LazyRecord("step", mapped, starts[k], starts[k + 1] - 1, seq0 + k, spath)) for k in lazy_idx
        ]
        if not other_idx:
            return steps
        out: list[Entry] = []
        j = 0
        for k in other_idx:  # few: start, checkpoint, rollback, note, failed steps, foreign lines
            i = bisect_left(lazy_idx, k, lo=j)
            out.extend(steps[j:i])
            j = i
            ent = _parse(lines[k], seq0 + k, path, line0 + k + 1)
            if ent is None:
                continue
            if type(ent) is BadLine:
                self.problems.append(ent)
            out.append(ent)
        out.extend(steps[j:])
        return out

    @property
    def end_seq(self) -> int:
        """The seq after the last line read by ``load()`` (the next seq a writer gives)."""
        return self._end_seq

    def load(self, *, lazy: bool = False) -> list[Entry]:
        """Parse the whole journal into memory and remember the end for ``read_new``."""
        self.problems = []
        enabled = gc.isenabled()
        gc.disable()  # a million small dicts: the cyclic GC would rescan them again and again
        try:
            out = list(self.iter_entries(lazy=lazy))
        finally:
            if enabled:
                gc.enable()
        # exactly what was read: a record committed meanwhile is read_new's first
        self._consumed = self._end_bytes
        self._consumed_seq = self._end_seq
        return out

    def _committed_sizes(self) -> list[int]:
        sizes = []
        for seg in self._segs:
            try:
                with open(seg.path, "rb") as f:
                    sizes.append(_committed_size(f.fileno(), os.fstat(f.fileno()).st_size))
            except FileNotFoundError:
                sizes.append(0)
        return sizes

    # -- tail
    def tail(self, n: int) -> list[Entry]:
        """The last ``n`` entries, reading only the end of the journal.

        The position of the last line is taken from its ``seq`` field when it has
        one (this package's writer always writes it), else by counting lines.
        """
        segs = self._refresh_segments()
        raws: list[tuple[bytes, Path]] = []
        for seg in reversed(segs):
            if len(raws) > n:
                break
            try:
                fd = os.open(seg.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                pos = _committed_size(fd, os.fstat(fd).st_size)
                carry: list[bytes] = []  # blocks of a line whose start lies before pos, last block first
                got: list[bytes] = []
                first = True
                while pos > 0 and len(raws) + len(got) <= n:
                    start = max(0, pos - 256 * 1024)
                    block = os.pread(fd, pos - start, start)
                    if first:
                        block, first = block[:-1], False  # the final newline ends the last line
                    pos = start
                    carry.append(block)
                    if pos > 0 and b"\n" not in block:
                        continue  # inside a long line: read on, split once (no quadratic re-splitting)
                    parts = b"".join(reversed(carry)).split(b"\n")
                    carry = []
                    if pos > 0:
                        carry = [parts[0]]  # maybe partial: completed by the next block
                        parts = parts[1:]
                    got = parts + got
                raws = [(r, seg.path) for r in got] + raws
            finally:
                os.close(fd)
        raws = raws[-n:] if n else []
        last_seq: int | None = None
        for k in range(len(raws) - 1, -1, -1):
            try:
                rec = orjson.loads(raws[k][0])
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and type(rec.get("seq")) is int:
                last_seq = int(rec["seq"]) + (len(raws) - 1 - k)
            break
        if last_seq is None:
            last_seq = count_lines(self.source) - 1
        first_seq = last_seq - len(raws) + 1
        out: list[Entry] = []
        for k, (raw, path) in enumerate(raws):
            ent = _parse(raw, first_seq + k, path, 0)
            if ent is not None:
                out.append(ent)
        return out

    # -- random access
    def index(self) -> int:
        """Record the offset of every line (no parsing); return the number of lines."""
        seq = 0
        for seg in self._refresh_segments():
            seg.first_seq = seq
            if not seg.indexed or seg.path.name == rundir.JOURNAL:
                self._index_segment(seg)
            seq += len(seg.starts) - 1
        return seq

    def _index_segment(self, seg: _Seg) -> None:
        starts = seg.starts if seg.starts else array("q", [0])
        read_at = starts[-1]  # the start of the first line not yet indexed
        try:
            f = open(seg.path, "rb")
        except FileNotFoundError:
            return
        with f:
            end = _committed_size(f.fileno(), os.fstat(f.fileno()).st_size)
            f.seek(read_at)
            while read_at < end:
                chunk = f.read(min(_CHUNK, end - read_at))
                if not chunk:
                    break
                parts = chunk.split(b"\n")
                parts.pop()  # the bytes after the chunk's last newline
                # line ends, all in C: read_at + running sum of (len + 1)
                ends = accumulate(map((1).__add__, map(len, parts)), initial=read_at)
                next(ends)
                starts.extend(ends)
                read_at += len(chunk)
        seg.starts = starts
        seg.indexed = True

    def __len__(self) -> int:
        return sum(len(s.starts) - 1 for s in self._segs if s.indexed)

    def get(self, seq: int) -> Entry | None:
        """Parse the line at ``seq`` (after ``index()``); ``None`` for a blank line."""
        for seg in self._segs:
            n = len(seg.starts) - 1
            if seg.first_seq <= seq < seg.first_seq + n:
                i = seq - seg.first_seq
                with open(seg.path, "rb") as f:
                    f.seek(seg.starts[i])
                    raw = f.read(seg.starts[i + 1] - seg.starts[i] - 1)
                return _parse(raw, seq, seg.path, i + 1)
        raise IndexError(seq)

    def get_range(self, start: int, stop: int) -> list[Entry]:
        """Parse lines ``start`` to ``stop`` (exclusive) after ``index()``, in one read per segment."""
        out: list[Entry] = []
        for seg in self._segs:
            n = len(seg.starts) - 1
            lo = max(start, seg.first_seq)
            hi = min(stop, seg.first_seq + n)
            if lo >= hi:
                continue
            a, b = lo - seg.first_seq, hi - seg.first_seq
            with open(seg.path, "rb") as f:
                f.seek(seg.starts[a])
                data = f.read(seg.starts[b] - seg.starts[a])
            for k, raw in enumerate(data.split(b"\n")[: b - a]):
                ent = _parse(raw, lo + k, seg.path, a + k + 1)
                if ent is not None:
                    if type(ent) is BadLine:
                        self.problems.append(ent)
                    out.append(ent)
        return out

    # -- following
    def read_new(self) -> list[Entry]:
        """Entries committed since the last ``load()``/``read_new()`` (the first call reads all)."""
        out: list[Entry] = []
        offset = 0
        for seg in self._refresh_segments():
            try:
                f = open(seg.path, "rb")
            except FileNotFoundError:
                continue  # renamed by a rotation between listing and opening: next call sees it
            with f:
                size = os.fstat(f.fileno()).st_size
                seg_end = offset + size
                if seg_end <= self._consumed:
                    offset = seg_end
                    continue
                local = self._consumed - offset
                f.seek(local)
                data = f.read(size - local)
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    break
                line_no = 0
                for raw in data[:cut].split(b"\n")[:-1]:
                    ent = _parse(raw, self._consumed_seq, seg.path, line_no)
                    self._consumed_seq += 1
                    if ent is not None:
                        if type(ent) is BadLine:
                            self.problems.append(ent)
                        out.append(ent)
                self._consumed += cut
                if cut < len(data):
                    break  # a line in progress: wait for its newline
                offset = seg_end
        return out

    def seek_end(self) -> None:
        """Start ``read_new`` from the current end (after a ``tail``)."""
        self._refresh_segments()
        self._consumed = sum(self._committed_sizes())
        self._consumed_seq = count_lines(self.source)


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """A small JSONL file (e.g. ``supervisor.jsonl``) as a list; bad and torn lines are skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for raw in data[: data.rfind(b"\n") + 1].split(b"\n"):
        if raw.strip():
            try:
                obj = parse_line(raw)
            except ValueError:
                continue
            out.append(obj)
    return out
