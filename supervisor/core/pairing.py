"""Begins paired with their steps: the one rule every reader applies (history, ``log``, the TUI's scan).

A ``step`` record closes the ``begin`` of the same key (its ``pos`` for records; the TUI's byte scan keys
by the writer's line head) unless it is a failed try marked ``transient`` (the step is retried); a
``begin`` or ``step`` without a ``pos`` pairs with the next one (hand-written, sequential). A ``start``
(a new process attempt) or a ``rollback`` ends every step still open: those were interrupted; a begin
begun again under the same key interrupts the first one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import wire
from .records import LazyRecord, Record

if TYPE_CHECKING:
    from .stream import Item

__all__ = ["Pairing"]

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
