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

    The newest :attr:`KEEP` names stay in the dict; past that the older half moves to a private temporary SQLite
    file (deleted when closed), so an agent whose every step has a name of its own does not grow by a hundred
    bytes a step. A name not in the dict is looked up there (:meth:`new`), unless a Bloom filter of the names
    moved out (1 MiB, made with the file) says it never was: a new name, the usual miss, costs no query.
    Used under the run's lock.
    """

    KEEP = 4096
    __slots__ = ("_bloom", "_db", "_keep")

    def __init__(self) -> None:
        super().__init__()
        self._db: Any = None
        self._bloom: bytearray | None = None
        self._keep = self.KEEP

    def new(self, name: str) -> int:
        """The count of a name not in the dict (0, or its count moved out), making room for it first."""
        if len(self) >= self._keep:
            self._spill()
        bloom = self._bloom
        if bloom is None:
            return 0
        p = hash(name) & _MASK  # one probe: the str's hash is cached, a bit costs less than a second or third
        if not bloom[p >> 3] >> (p & 7) & 1:
            return 0
        row = self._db.execute("SELECT n FROM c WHERE name = ?", (_key(name),)).fetchone()
        return 0 if row is None else int(row[0])

    def give_back(self, name: str) -> None:
        """One call fewer of ``name`` (a failed latest call gives its number back)."""
        k = self.get(name)
        if k is None:
            k = self.new(name)
        if k:
            self[name] = k - 1

    def _spill(self) -> None:
        """Move the older half of the names to the file; where no file can be made, keep them here."""
        import sqlite3  # only for the rare agent with thousands of step names: not on the SDK's import path

        try:
            if self._db is None:
                db = sqlite3.connect("", check_same_thread=False, isolation_level=None)  # "": private, on disk
                db.executescript(
                    "PRAGMA cache_size = -256; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
                    "CREATE TABLE c (name BLOB PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;"
                )
                self._db = db
            old = list(islice(self.items(), len(self) // 2))
            bloom = self._bloom or bytearray(_BLOOM_BYTES)
            for n, _ in old:
                p = hash(n) & _MASK
                bloom[p >> 3] |= 1 << (p & 7)
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO c VALUES (?, ?)", [(_key(n), k) for n, k in old])
            self._db.execute("COMMIT")
            self._bloom = bloom
        except sqlite3.Error:  # no temporary file here (a read-only temp dir): counted in memory, as before
            if self._db is not None and self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._keep = 1 << 62
            return
        for n, _ in old:
            del self[n]

    def close(self) -> None:
        """Delete the temporary file."""
        if self._db is not None:
            self._db.close()
            self._db = None


_MASK = (1 << 23) - 1
_BLOOM_BYTES = 1 << 20
"""A Bloom filter of 2**23 bits and one probe: a false positive (a query that finds nothing) for 1.2% of new names
with 100,000 names moved out, 11% with a million; three probes would halve that and triple the cost of each name."""


def _key(name: str) -> bytes:
    """A name as the file keeps it (bytes: a name may hold a lone surrogate)."""
    return name.encode("utf-8", "surrogatepass")
