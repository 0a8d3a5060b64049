"""Step names with flat memory: ``run.replayed`` and ``run.executed`` (the names of the steps served and run), and
the calls so far per name (the ``k`` of a call's ``(name, k)`` identity)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any


class StepNames(Sequence[str]):
    """Names of steps in the order they came: ``len`` counts every one, the last :attr:`KEEP` are kept.

    ``run.replayed`` and ``run.executed`` are these, so a run of millions of steps
    keeps flat memory. An index older than the kept names raises ``IndexError``.
    """

    KEEP = 10_000

    def __init__(self) -> None:
        self._count = 0
        self._last: deque[str] = deque(maxlen=self.KEEP)

    def append(self, name: str) -> None:
        self._count += 1
        self._last.append(name)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._count))]
        k = i + self._count if i < 0 else i
        if not 0 <= k < self._count:
            raise IndexError(f"step name index {i} out of range ({self._count} names)")
        first = self._count - len(self._last)
        if k < first:
            raise IndexError(f"step name {i} is not kept: only the last {self.KEEP} of {self._count} names are")
        return self._last[k - first]

    def __iter__(self) -> Iterator[str]:
        """The kept names (all of them while there are at most :attr:`KEEP`)."""
        return iter(self._last)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same names, while all of them are kept."""
        if isinstance(other, StepNames):
            return self._count == other._count and self._last == other._last
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._count == len(self._last) and list(self._last) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """As a list (agents print it), with a mark for the names no longer kept."""
        dropped = self._count - len(self._last)
        kept = repr(list(self._last))
        return f"[<{dropped} older names not kept>, {kept[1:]}" if dropped else kept


class NameCounts(dict[str, int]):
    """Calls so far per step name, for the ``k`` of each call's ``(name, k)`` identity, exact and in flat memory.

    The newest :attr:`KEEP` names stay in the dict; past that the older half moves out, so an agent whose every
    step has a name of its own does not grow by a hundred bytes a step. A batch moved out is appended to a
    private temporary file (a pickle: cheap to write) and indexed in a private SQLite file (a name's count in one
    query) only when a name in it is called again: names called once, the usual kind past thousands, are never
    indexed. A Bloom filter of the names moved out (1 MiB, three probes) tells a name that never was, the usual
    miss, without a lookup; a name it may hold is looked for in the appended bytes (C speed), and their batches
    are indexed if it is there (or after the bytes were read four times over for names not there). Where no
    temporary file can be made, the counts stay in memory. Used under the run's lock.
    """

    KEEP = 4096
    __slots__ = ("_bloom", "_db", "_end", "_keep", "_pending", "_scanned")

    def __init__(self) -> None:
        super().__init__()
        self._db: Any = None
        self._pending: Any = None  # the batches moved out and not indexed yet: a temporary file, _end bytes of it
        self._end = 0
        self._scanned = 0  # bytes of it read since it was last indexed, for names not there
        self._bloom: bytearray | None = None
        self._keep = self.KEEP

    def new(self, name: str) -> int:
        """The count of a name not in the dict (0, or its count moved out), making room for it first."""
        if len(self) >= self._keep:
            self._spill()
        bloom = self._bloom
        if bloom is None:
            return 0
        p, q, r = _probes(name)
        if not bloom[p >> 3] >> (p & 7) & 1:  # the first probe alone tells most new names
            return 0
        if not (bloom[q >> 3] >> (q & 7) & bloom[r >> 3] >> (r & 7) & 1):
            return 0
        return self._moved(name)

    def give_back(self, name: str) -> None:
        """One call fewer of ``name`` (a failed latest call gives its number back)."""
        k = self.get(name)
        if k is None:
            k = self.new(name)
        if k:
            self[name] = k - 1

    def _spill(self) -> None:
        """Move the older half of the names to the temporary files; where none can be made, keep them here."""
        import pickle
        import sqlite3  # only for the rare agent with thousands of step names: not on the SDK's import path
        import tempfile

        old = list(islice(self.items(), len(self) // 2))
        data = pickle.dumps(old, protocol=pickle.HIGHEST_PROTOCOL)  # a name with a lone surrogate too
        try:
            if self._db is None:  # made now, not at the first name called again: its memory is here from the start
                self._pending = tempfile.TemporaryFile()  # deleted when closed, or when the agent exits
                db = sqlite3.connect("", check_same_thread=False, isolation_level=None)  # "": private, on disk
                db.executescript(
                    "PRAGMA cache_size = -256; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
                    "CREATE TABLE c (name BLOB PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;"
                )
                self._db = db
            self._pending.seek(self._end)
            self._pending.write(data)
            self._pending.flush()
        except (OSError, sqlite3.Error):  # no temporary file here (a read-only temp dir, a full disk)
            if self._end or self._db is not None:
                self._into_memory()  # what moved out comes back: counted in memory from here on, as before
            else:
                self.close()
                self._keep = 1 << 62
            return
        self._end += len(data)
        bloom = self._bloom or bytearray(_BLOOM_BYTES)
        for n, _ in old:
            p, q, r = _probes(n)
            bloom[p >> 3] |= 1 << (p & 7)
            bloom[q >> 3] |= 1 << (q & 7)
            bloom[r >> 3] |= 1 << (r & 7)
        self._bloom = bloom
        for n, _ in old:
            del self[n]

    def _moved(self, name: str) -> int:
        """The count of ``name`` among the names moved out (0: none, a false positive of the filter)."""
        key = _key(name)
        if self._end:
            import mmap

            with mmap.mmap(self._pending.fileno(), self._end, access=mmap.ACCESS_READ) as m:  # no copy in memory
                there = m.find(key) >= 0
            self._scanned += self._end
            if there or self._scanned > 4 * self._end:
                self._index()
        if self._db is None:  # SQLite failed: the counts came back into the dict
            return self.get(name, 0)
        row = self._db.execute("SELECT n FROM c WHERE name = ?", (key,)).fetchone()
        return 0 if row is None else int(row[0])

    def _batches(self) -> Iterator[list[tuple[str, int]]]:
        """The batches appended to the temporary file and not indexed, in the order they were moved out."""
        import pickle

        f = self._pending
        f.seek(0)
        while f.tell() < self._end:
            yield pickle.load(f)

    def _index(self) -> None:
        """Index the appended batches in the SQLite file, in order (a name moved out twice: its later count),
        and empty the file. Where SQLite cannot keep them (a full disk), every count moved out comes back here."""
        import sqlite3

        try:
            self._db.execute("BEGIN")
            for batch in self._batches():
                self._db.executemany("INSERT OR REPLACE INTO c VALUES (?, ?)", [(_key(n), k) for n, k in batch])
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self._into_memory()
            return
        self._end = self._scanned = 0

    def _into_memory(self) -> None:
        """Every count moved out back into the dict (those in it are newer), for good: a file failed here."""
        import sqlite3

        back: dict[str, int] = {}
        db, self._db = self._db, None
        if db is not None:
            try:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                back.update((bytes(n).decode("utf-8", "surrogatepass"), k) for n, k in db.execute("SELECT name, n FROM c"))
            except sqlite3.Error:
                pass  # no table (it failed as it was made): nothing was indexed
            db.close()
        if self._end:
            for batch in self._batches():
                back.update(batch)
        for n, k in back.items():
            self.setdefault(n, k)
        self.close()
        self._end = self._scanned = 0
        self._bloom = None
        self._keep = 1 << 62

    def close(self) -> None:
        """Delete the temporary files (also when the counts are let go: a parent step's counts are never closed)."""
        if self._pending is not None:
            self._pending.close()
            self._pending = None
        if self._db is not None:
            self._db.close()
            self._db = None

    __del__ = close


_MASK = (1 << 23) - 1
_BLOOM_BYTES = 1 << 20
"""A Bloom filter of 2**23 bits and three probes (bits 0-22, 23-45 and 41-63 of the name's hash): a false positive
(a lookup that finds nothing) for one in 23,000 new names with 100,000 names moved out, one in 37 with a million."""


def _probes(name: str) -> tuple[int, int, int]:
    """The filter's three bits for ``name``, from its hash (cached by the str): set and tested by this one function,
    so the two can never disagree (a name moved out and said new would be numbered 0 again)."""
    h = hash(name)
    return h & _MASK, h >> 23 & _MASK, h >> 41 & _MASK


def _key(name: str) -> bytes:
    """A name as the file keeps it (bytes: a name may hold a lone surrogate)."""
    return name.encode("utf-8", "surrogatepass")
