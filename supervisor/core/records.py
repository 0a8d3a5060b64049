"""Parsing and normalising journal lines.

A journal line is one JSON object. Readers also accept the object after a text
prefix (as Python's logging writes it) and the field aliases that hand-written
durable loops use. Unknown fields are kept.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from . import wire

Record = dict[str, Any]


class Kind(StrEnum):
    """The ``kind`` of a journal record (a ``str``: it compares equal to the text written in the file)."""

    START = "start"
    """A process attempt began."""
    BEGIN = "begin"
    """A step started (it says only that: resume does not keep it)."""
    STEP = "step"
    """A step finished, with exactly one of ``output`` or ``error``; a record without ``kind`` is one."""
    CHECKPOINT = "checkpoint"
    """A named full state snapshot (``file`` in ``checkpoints/``)."""
    ROLLBACK = "rollback"
    """The effective history returns to the checkpoint it names."""
    FORK = "fork"
    """This run was forked from another at a point."""
    NOTE = "note"
    """A free-form message."""
    PAUSE = "pause"
    """A live step waits for a person before its function runs (a breakpoint, ``run.ask``): ``core.pauses``."""
    CHOICE = "choice"
    """A person's answer to a ``pause`` (its ``seq`` in ``pause``)."""


KINDS = frozenset(Kind)

_STEP, _BEGIN = wire.STEP, wire.BEGIN  # plain strings for the per-line paths (see wire)
_STEP_ALIASES = ("action", "name")
_OUTPUT_ALIASES = ("result",)
_TS_ALIASES = ("timestamp", "time")


DAMAGED = "damaged"
"""The ``kind`` of the record a reader puts in place of a damaged line (never written to a file).

A damaged line keeps its place: its seq, and the step position it may hold (see
:attr:`BadLine.holds_step`), so no reader shifts the records after it. The record
carries ``file``, ``line``, ``offset`` (of the line's first byte in its file),
``reason``, ``text`` (the start of the line), ``was`` (the kind its first bytes
still show, or ``None``) and ``holds_step``.
"""

# Kinds that carry no output and no state: a damaged line of these kinds costs a reader nothing.
_HARMLESS = frozenset(("begin", "start"))


def is_foreign(raw: bytes | str, reason: str) -> bool:
    """Whether a line that is not a record never was one: a JSON value that is not an object, or text
    without a ``{`` (a program's output mixed into a hand-written journal). Such a line is reported and
    skipped; any other bad line is *damaged* (a record cut short, NUL bytes, invalid UTF-8)."""
    if reason.startswith("a JSON "):
        return True
    return reason == "not JSON" and ("{" not in raw if isinstance(raw, str) else b"{" not in raw)


def damaged_was(head: str | bytes) -> str:
    """The kind a damaged line's first bytes still show (``""``: none readable)."""
    if isinstance(head, bytes):
        head = head[:64].decode("utf-8", "replace")
    m = wire.KIND_FIELD.match(head)
    return m.group(1) if m else ""


def damaged_holds_step(was: str) -> bool:
    """Whether a damaged line whose first bytes show ``was`` takes a step position.

    Every reader applies this one rule, so they agree on the position of every
    step after it. A line that still shows another kind (``begin``, ``note``,
    ``checkpoint``...) is not a step; one that shows ``step``, or nothing at all
    (NUL bytes, a cut before the kind, a record without ``kind``, which means
    ``step``), is counted as one: a successful step lost, never one step's
    output served for another's.
    """
    return was == "step" or was == ""


@dataclass(frozen=True, slots=True)
class BadLine:
    """A journal line that is not a JSON object: where it is and why.

    Either *foreign* (never a record: skipped, as before) or *damaged* (a record
    that was cut, overwritten or corrupted): a damaged line keeps its place, as a
    :data:`DAMAGED` record (:meth:`record`) and maybe a step position."""

    path: str
    line: int
    seq: int
    reason: str
    text: str
    offset: int = field(default=-1, compare=False)
    """The byte offset of the line's start in its file (-1: not known to the reader that found it)."""

    def __str__(self) -> str:
        if self.foreign:
            return f"{self.path}:{self.line}: skipped, {self.reason}: {self.text[:80]!r}"
        where = f", byte {self.offset}" if self.offset >= 0 else ""
        held = "; kept as a step that cannot be served" if self.holds_step else "; kept in its place"
        return f"{self.path}:{self.line}: damaged line (seq {self.seq}{where}), {self.reason}{held}: {self.text[:80]!r}"

    @property
    def foreign(self) -> bool:
        """Never a record (:func:`is_foreign`): skipped, holds no position; else a damaged record."""
        return is_foreign(self.text, self.reason)

    @property
    def was(self) -> str:
        """The kind its first bytes still show (``""``: none)."""
        return damaged_was(self.text)

    @property
    def holds_step(self) -> bool:
        """Whether it takes a step position (:func:`damaged_holds_step`; a foreign line never does)."""
        return not self.foreign and damaged_holds_step(self.was)

    @property
    def harmless(self) -> bool:
        """A damaged ``begin`` or ``start`` line: it carried no output and no state."""
        return self.was in _HARMLESS

    def record(self) -> Record:
        """The record readers put in its place (kind :data:`DAMAGED`)."""
        return {
            "kind": DAMAGED,
            "seq": self.seq,
            "file": self.path,
            "line": self.line,
            "offset": self.offset,
            "reason": self.reason,
            "text": self.text,
            "was": self.was or None,
            "holds_step": self.holds_step,
            "step": self.step,
        }

    @property
    def step(self) -> str | None:
        """The step name its bytes still show, if any (as written: escapes are not undone)."""
        m = wire.STEP_FIELD.search(self.text)
        return m.group(1) if m else None


class LazyRecord:
    """A successful ``step`` line from this package's writer, parsed only when a field is read.

    Resuming a million steps must not build a million dicts, nor keep a million
    byte strings, up front: the SDK keeps where the line is (in a read-only
    memory map of the journal file) and parses it when the step is replayed.
    ``kind``, ``seq``, ``pos`` and ``error`` (always ``None``) are known without parsing.
    """

    __slots__ = ("end", "kind", "path", "pos", "seq", "src", "start")

    def __init__(self, kind: str, src: bytes | mmap.mmap, start: int, end: int, seq: int, path: str) -> None:
        self.kind = kind
        self.src = src
        self.start = start
        self.end = end
        self.seq = seq
        self.pos = -1
        self.path = path

    @property
    def raw(self) -> bytes:
        return self.src[self.start : self.end]

    def record(self) -> Record:
        """The full, normalised record (parsed anew on each call: callers use it once)."""
        try:
            rec = orjson.loads(self.src[self.start : self.end])
        except orjson.JSONDecodeError as e:
            from ..errors import JournalError

            raise JournalError(f"{self.path}: the record with seq {self.seq} is not valid JSON ({e})") from None
        if rec.get("seq") != self.seq or "ts" not in rec:
            normalize(rec, self.seq)
        rec["pos"] = self.pos
        return rec  # type: ignore[no-any-return]

    def nested(self) -> bool:
        """Whether it is a nested step's line (it names a ``parent``), told by its bytes."""
        return self.src.find(wire.PARENT_WORD, self.start, self.end) >= 0

    def damaged(self) -> BadLine:
        """This line, which does not parse, as a :class:`BadLine` (its line number is counted in the
        file, once, when it is found damaged)."""
        raw = bytes(self.src[self.start : self.end])
        try:
            parse_line(raw)
            reason = "not JSON"
        except ValueError as e:
            reason = str(e)
        line = self.src[: self.start].count(b"\n") + 1
        return BadLine(self.path, line, self.seq, reason, raw[:200].decode("utf-8", "replace"), self.start)

    def get(self, key: str, default: Any = None) -> Any:
        if key == "kind":
            return self.kind
        if key == "seq":
            return self.seq
        if key == "pos":
            return self.pos
        if key == "error":
            return None
        return self.record().get(key, default)

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if key != "pos":
            raise TypeError("a LazyRecord only takes its pos")
        self.pos = value

    def __contains__(self, key: str) -> bool:
        return key in ("kind", "seq", "pos") or key in self.record()


_ABSENT: Any = object()


def parse_line(raw: bytes) -> Record:
    """Parse one line into a dict; raise ``ValueError`` with a reason if it is not a JSON object."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        if b"\x00" in raw:  # never a text prefix: the line was overwritten, or its write never reached the disk
            raise ValueError("NUL bytes in the line") from None
        try:
            raw.decode()
        except UnicodeDecodeError as e:
            raise ValueError(f"not valid UTF-8 (byte {e.start} of the line)") from None
        i = raw.find(b"{")
        if i <= 0:
            raise ValueError("not JSON") from None
        try:
            obj = orjson.loads(raw[i:])
        except orjson.JSONDecodeError:
            raise ValueError("not JSON, even after a text prefix") from None
        if isinstance(obj, dict):
            obj.setdefault("prefix", raw[:i].decode("utf-8", "replace").strip(" |"))
    if not isinstance(obj, dict):
        raise ValueError(f"a JSON {type(obj).__name__}, not an object")
    return obj


def normalize(rec: Record, seq: int) -> Record:
    """Fill in the canonical fields (kind, seq, step, output, ts) in place and return ``rec``.

    Records written by this package already carry them; the checks are cheap.
    """
    kind = rec.get("kind")
    if kind is None:
        kind = rec["kind"] = _STEP
    if rec.get("seq") != seq:
        if "seq" in rec:
            rec["recorded_seq"] = rec["seq"]
        rec["seq"] = seq
    if kind in (_STEP, _BEGIN):
        if "step" not in rec:
            _alias(rec, "step", _STEP_ALIASES)
        if kind == _STEP and "output" not in rec and "error" not in rec:
            _alias(rec, "output", _OUTPUT_ALIASES)
    if "ts" not in rec:
        _alias(rec, "ts", _TS_ALIASES)
    return rec


def _alias(rec: Record, key: str, aliases: tuple[str, ...]) -> None:
    """Set ``rec[key]`` from the first of ``aliases`` it holds (a hand-written journal's field name)."""
    for alias in aliases:
        if alias in rec:
            rec[key] = rec[alias]
            return


def step_name(rec: Record) -> str:
    """The step's name as text (hand-written journals may use numbers)."""
    name = rec.get("step")
    return name if isinstance(name, str) else ("" if name is None else str(name))


def preview(value: Any, width: int = 60) -> str:
    """A one-line preview of a JSON value for tables."""
    if isinstance(value, str):
        text = value
    else:
        text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS).decode()
    text = text.replace("\n", "⏎ ")
    return text if len(text) <= width else text[: width - 1] + "…"


_EXACT_STEP_FIELDS = frozenset({"step", "inputs", "output", "state_patch"})
"""What a resume matches, compares or returns, of a ``begin`` or ``step`` record: never escaped (the SDK names the
step in an error instead); the state patch of any record neither."""
_EXACT_FIELDS = frozenset({"state_patch"})


def surrogates_escaped(rec: Record) -> Record:
    """A copy of ``rec`` whose free text has every lone surrogate as ``\\uXXXX`` text (the writer's fallback for a
    record orjson refuses); what a resume matches, compares or returns (:data:`_EXACT_STEP_FIELDS`) is left as it is."""
    exact = _EXACT_STEP_FIELDS if rec.get("kind") in (wire.BEGIN, wire.STEP) else _EXACT_FIELDS
    return {k: v if k in exact else _escaped(v) for k, v in rec.items()}


def _escaped(v: Any) -> Any:
    """``v`` with every lone surrogate in its strings (keys included) as ``\\uXXXX`` text (a copy: never in place)."""
    if isinstance(v, str):
        return v.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(v, dict):
        return {_escaped(k): _escaped(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_escaped(x) for x in v]
    return v
