"""``run.replayed`` and ``run.executed``: the names of the steps served and run, with flat memory."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
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
