"""Begins paired with their steps: the one rule every reader applies (history, ``log``, the TUI's scan).

A ``step`` record closes the ``begin`` of the same key (its ``pos`` for records; the TUI's byte scan keys
by the writer's line head) unless it is a failed try marked ``transient`` (the step is retried); a
``begin`` or ``step`` without a ``pos`` pairs with the next one (hand-written, sequential). A ``start``
(a new process attempt) or a ``rollback`` ends every step still open: those were interrupted; a begin
begun again under the same key interrupts the first one.

:func:`writer_pairs` and :func:`foreign_pairs` tell, a chunk of raw bytes at a time, whether every begin is
closed by the next line: then no step overlapped another and none was interrupted, and a reader needs no
look ahead for the marks (``log``'s first pass).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from . import wire
from .records import LazyRecord, Record, parse_line

if TYPE_CHECKING:
    from .stream import Item

__all__ = ["Carry", "Pairing", "foreign_pairs", "writer_pairs"]

_STEP, _BEGIN, _START, _ROLLBACK = wire.STEP, wire.BEGIN, wire.START, wire.ROLLBACK


class Pairing:
    """Begins paired with their steps, in journal order: feed records with :meth:`add`, a stream's items with
    :meth:`add_item`, or drive :meth:`begin`, :meth:`close` and :meth:`end_attempt` from another reading."""

    __slots__ = ("_keep", "interrupted", "open", "overlapped", "paired")

    def __init__(self, *, keep_paired: bool = True) -> None:
        """``keep_paired=False``: no begin -> step map (a stream's million entries for a million steps)."""
        self.open: dict[Any, Record] = {}
        """Key -> the begin record of a step in flight (a stream's items: ``{"seq": S}``)."""
        self.paired: dict[int, int] = {}
        """begin seq -> the seq of the step record that closed it (``keep_paired`` only)."""
        self.interrupted: set[int] = set()
        """Seqs of the begins whose process attempt ended (or that were begun again) before their step."""
        self.overlapped = False
        """A begin came while another step was in flight."""
        self._keep = keep_paired

    # -- the rule
    def begin(self, key: Any, rec: Record) -> None:
        """A begin under ``key`` (``rec`` holds its ``seq``)."""
        if self.open:
            self.overlapped = True
        old = self.open.get(key)
        if old is not None:
            self.interrupted.add(int(old["seq"]))
        self.open[key] = rec

    def close(self, key: Any, seq: int) -> Record | None:
        """A (not transient) step under ``key``, at ``seq``: the begin it closes (the one without a key
        when none has it), or ``None``."""
        b = self.open.pop(key, None)
        if b is None:
            b = self.open.pop(None, None)
        if b is not None and self._keep:
            self.paired[int(b["seq"])] = seq
        return b

    def end_attempt(self) -> None:
        """A new process attempt or a rollback: every begin still open was interrupted."""
        for b in self.open.values():
            self.interrupted.add(int(b["seq"]))
        self.open.clear()

    # -- the readers' ways in
    def add(self, rec: Record) -> None:
        """A record (a lazy step line is a success: never parsed here)."""
        kind = rec.get("kind", _STEP)
        if kind == _BEGIN:
            self.begin(rec.get("pos"), rec)
        elif kind == _STEP:
            if self.open and (isinstance(rec, LazyRecord) or not rec.get("transient")):
                self.close(rec.get("pos"), int(rec["seq"]))
        elif kind in (_START, _ROLLBACK):
            self.end_attempt()

    def add_item(self, item: Item) -> None:
        """A :class:`stream.Item` (a canonical line's bytes parsed only when they may say ``transient``)."""
        kind = item.kind
        if kind == _BEGIN:
            self.begin(item.pos, {"seq": item.seq})
        elif kind == _STEP:
            if not self.open:
                return
            if item.rec is not None:
                if item.rec.get("transient"):
                    return
            elif item.raw is not None and wire.FIELD_TRANSIENT in item.raw and item.record().get("transient"):
                return
            self.close(item.pos, item.seq)
        elif kind in (_START, _ROLLBACK):
            self.end_attempt()


# -- the first pass's check (stream.plan(pairs=True)), a chunk at a time: is every begin closed by the next line?
_FIRST = 1 << 16
"""Bytes of a chunk's first lines given to the pattern when the chunk starts with a begin (a begin and its step fit)."""


Carry = tuple[bytes | None, int]
"""What a begin that ends a chunk wants from the next chunk's first line: the head of its writer step line
(``None``: no writer line is its step) and its ``pos``."""


def writer_pairs(data: bytes, carry: Carry | None) -> tuple[bool, Carry | None]:
    """Whether every begin line of a writer chunk is followed by its own step line (C-speed scans); what a
    begin that is the chunk's last line wants from the next chunk. ``carry``: what the previous chunk's
    last begin wants from this one's first line. One search for the first begin that is not
    (:data:`wire.UNCLOSED`): no list of matches, no count of the begins."""
    if carry is not None and (
        carry[0] is None or not data.startswith(carry[0]) or wire.FIELD_TRANSIENT in data[: data.find(b"\n")]
    ):
        return False, None  # (a retried try does not close its begin, in a chunk without begins too)
    head = data.startswith(wire.BEGIN_HEAD)
    if not head and wire.NL_BEGIN not in data:
        return True, None
    if wire.FIELD_TRANSIENT in data:
        return False, None  # a failed try to be retried does not close its begin: the look ahead decides
    last = data.rfind(b"\n", 0, len(data) - 1) + 1
    open_last = False
    if head and wire.UNCLOSED.match(b"\n" + data[:_FIRST]) is not None:
        if last:
            return False, None
        open_last = True  # the chunk is that one begin line
    m = wire.UNCLOSED.search(data)
    if m is not None:
        if m.start() + 1 != last:
            return False, None
        open_last = True
    if not open_last:
        return True, None
    h = wire.BEGIN_NAME_POS.match(data, last)  # the last line is a begin: its step may start the next chunk
    if h is None:
        return False, None
    return True, (wire.step_head(h.group(1), h.group(2)), int(h.group(2)))


_ESCAPE_006 = b"\\u006"
"""An escape that may spell a letter of ``begin`` (``\\u0062`` is ``b``): a chunk that holds one has each record
line looked at, not only those that hold ``"begin"``."""


def foreign_pairs(data: bytes, carry: Carry | None) -> tuple[bool, Carry | None]:
    """:func:`writer_pairs` for a chunk not all in the writer's form, by the walk's own rule (:class:`Pairing`
    keys a begin and its step by their ``pos``): whether every begin record is followed, on the next line, by a
    step record of the same integer ``pos`` that closes it (not a try to be retried). Only the lines that may be
    begins (found by ``"begin"``, the kind's value in any key order and spacing) and the lines after them are
    parsed, as the walk parses them: a line the walk would not take as that begin or that step (damaged, blank,
    a begin without an integer ``pos``) says no, and the look ahead decides."""
    if carry is not None and not _closes(data[: data.find(b"\n")], carry[1]):
        return False, None
    word = b"{" if _ESCAPE_006 in data else b'"begin"'  # "{": every line that may be a record
    i = data.find(word)
    while i >= 0:
        s = data.rfind(b"\n", 0, i) + 1
        e = data.find(b"\n", i)
        rec = _record(data[s:e])
        if rec is not None and rec.get("kind") == _BEGIN:
            pos = rec.get("pos")
            if type(pos) is not int:
                return False, None  # its key is the fold's pos (top + 1): not known in the first pass
            if e + 1 == len(data):  # the chunk's last line: its step may start the next chunk
                name = rec.get("step")
                return True, (wire.step_head(orjson.dumps(name), str(pos).encode()) if type(name) is str else None, pos)
            s, e = e + 1, data.find(b"\n", e + 1)
            if not _closes(data[s:e], pos):
                return False, None
        i = data.find(word, e)
    return True, None


def _record(raw: bytes) -> Record | None:
    """A line as the walk takes it (a JSON object, maybe after a text prefix), not normalised; ``None``: no record."""
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        rec = None
    if type(rec) is dict:
        return rec
    try:
        return parse_line(raw)  # a text prefix, or no record
    except ValueError:
        return None


def _closes(raw: bytes, pos: int) -> bool:
    """Line ``raw`` is a step record that closes the begin of ``pos`` in the walk's pairing."""
    rec = _record(raw)
    if rec is None or rec.get("kind", _STEP) != _STEP or rec.get("transient"):
        return False
    p = rec.get("pos")
    return type(p) is int and p == pos
