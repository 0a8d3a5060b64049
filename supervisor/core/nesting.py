"""Nested steps as a stream of parsed records goes by: the names of the steps a record is nested in.

A step whose function calls ``run.step`` makes a nested step. Every record of a nested step carries
``parent``: the ``id`` of the ``begin`` record of its enclosing step, written by the same attempt (a top-level
step's records have no ``parent``). The enclosing step's begin comes before its children's records, and its
own step record after them, so a reader going forward knows a nested record's enclosing steps when it meets it.

:class:`Nesting` keeps the begins whose step is still open (a step closes its begin, a new attempt or a
rollback ends them all): memory follows the steps in flight, not the journal. A reader that took some begins
by their bytes without parsing them finds a parent it did not keep with :func:`find_begin`, a search of the
bytes read before, backwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import wire
from .records import Record, parse_line, step_name
from .segments import Region

__all__ = ["FOUND_MAX", "PATH_SEP", "SEARCH_BYTES", "UNKNOWN", "Nesting", "find_begin", "nested_in"]

PATH_SEP = " \u203a "
"""Between the names of a nested step's path (a single right-pointing angle quotation mark): ``outer``, the
separator, ``inner``."""
UNKNOWN = "…"
"""The name of an enclosing step whose begin was not found (before the records read, or never written)."""
SEARCH_BYTES = 64 * 1024 * 1024
"""How far back :func:`find_begin` looks for a parent's begin (some 200,000 records of the SDK's)."""
FOUND_MAX = 4096
"""Parents looked up (:attr:`Nesting.lookup`) kept at most: their step records, not fed, never drop them."""


def nested_in(rec: Record) -> str | None:
    """The ``id`` of the begin of the step ``rec`` is nested in (``None``: a top-level record)."""
    parent = rec.get("parent")
    return parent if isinstance(parent, str) else None


class Nesting:
    """The path of each nested record (the names of its enclosing steps, outermost first), record by record.

    ``lookup``: how to find the begin of a parent that was not fed (taken by its bytes): its record, or
    ``None``; a parent found nowhere is named :data:`UNKNOWN`.
    """

    __slots__ = ("_found", "_ids", "_keys", "lookup")

    def __init__(self, lookup: Callable[[str], Record | None] | None = None) -> None:
        self._ids: dict[str, tuple[str, ...]] = {}
        """Begin id -> the path of its step, its own name last (the begins fed whose step is open)."""
        self._found: dict[str, tuple[str, ...]] = {}
        """The same for the parents looked up, the last :data:`FOUND_MAX` (one asked again is looked up again)."""
        self._keys: dict[tuple[Any, Any, Any], str] = {}
        """``(name, pos, attempt)`` of an open begin -> its id: its step record drops it."""
        self.lookup = lookup

    def add(self, rec: Record) -> tuple[str, ...] | None:
        """Feed the next record (parsed, in journal order); return the names of the steps it is nested in,
        outermost first (``None``: a top-level record)."""
        kind = rec.get("kind", wire.STEP)
        parent = nested_in(rec)
        path = None if parent is None else self._path(parent)
        if kind == wire.BEGIN:
            rid = rec.get("id")
            if isinstance(rid, str):
                self._ids[rid] = (*path, step_name(rec)) if path else (step_name(rec),)
                self._keys[(rec.get("step"), rec.get("pos"), rec.get("attempt"))] = rid
        elif kind == wire.STEP:
            if not rec.get("transient"):  # a failed try to be retried leaves its begin open: its retries nest there too
                rid = self._keys.pop((rec.get("step"), rec.get("pos"), rec.get("attempt")), None)
                if rid is not None:
                    self._ids.pop(rid, None)
        elif kind in (wire.START, wire.ROLLBACK):  # every step still open was interrupted: no record names it again
            self._ids.clear()
            self._keys.clear()
            self._found.clear()
        return path

    def _path(self, parent: str) -> tuple[str, ...]:
        """The path of the step whose begin has id ``parent``, its own name last."""
        got = self._ids.get(parent) or self._found.get(parent)
        if got is not None:
            return got
        rec = self.lookup(parent) if self.lookup is not None else None
        if rec is None:
            got = (UNKNOWN,)
        else:  # a begin not fed: taken by its bytes, so written without a parent of its own (else it was parsed)
            grand = nested_in(rec)
            got = (*(self._path(grand) if grand is not None and grand != parent else ()), step_name(rec))
        if len(self._found) >= FOUND_MAX:
            del self._found[next(iter(self._found))]  # the oldest
        self._found[parent] = got  # its other children's records ask again
        return got


def find_begin(regions: Sequence[Region], record_id: str, budget: int = SEARCH_BYTES) -> tuple[Record, int] | None:
    """The record whose ``id`` is ``record_id`` and its seq, searched for in the bytes of ``regions`` (whole
    lines, in journal order) from the last backwards, ``budget`` bytes at most; ``None``: not found."""
    needle = wire.id_needle(record_id)
    for r in reversed(regions):
        if budget <= 0:
            break
        start = max(r.start, r.end - budget)
        budget -= r.end - start
        data = _read(r.path, start, r.end)
        if data is None:
            continue
        i = data.rfind(needle)
        while i >= 0:
            a = data.rfind(b"\n", 0, i) + 1
            if a == 0 and start > r.start:
                break  # the line starts before the bytes read (the budget ran out inside it)
            try:
                rec = parse_line(data[a : data.find(b"\n", i)])
            except ValueError:
                rec = {}
            if rec.get("id") == record_id:
                before = data.count(b"\n", 0, a) if start == r.start else -1
                if before < 0:  # the region's first lines were not read: count them too
                    head = _read(r.path, r.start, start)
                    before = (head or b"").count(b"\n") + data.count(b"\n", 0, a)
                return rec, r.first_seq + before
            i = data.rfind(needle, 0, a)
    return None


def _read(path: Path, start: int, end: int) -> bytes | None:
    """Bytes ``start``..``end`` of ``path`` (``None``: the file is gone, rotated away under the reader)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(end - start)
    except OSError:
        return None
