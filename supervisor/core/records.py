"""Parsing and normalising journal lines.

A journal line is one JSON object. Readers also accept the object after a text
prefix (as Python's logging writes it) and the field aliases that hand-written
durable loops use. Unknown fields are kept.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

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


KINDS = frozenset(Kind)

# Plain-string twins of the kinds the per-line paths test and write: looking up an enum member
# costs ~100 ns in Python 3.11, and orjson encodes a member at half the speed of a str.
_STEP: str = Kind.STEP.value
_BEGIN: str = Kind.BEGIN.value
_STEP_ALIASES = ("action", "name")
_OUTPUT_ALIASES = ("result",)
_TS_ALIASES = ("timestamp", "time")


@dataclass(frozen=True, slots=True)
class BadLine:
    """A journal line that is not a JSON object: where it is and why it was skipped."""

    path: str
    line: int
    seq: int
    reason: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: skipped, {self.reason}: {self.text[:80]!r}"


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
    if kind == _STEP or kind == _BEGIN:
        if "step" not in rec:
            for alias in _STEP_ALIASES:
                if alias in rec:
                    rec["step"] = rec[alias]
                    break
        if kind == _STEP and "output" not in rec and "error" not in rec:
            for alias in _OUTPUT_ALIASES:
                if alias in rec:
                    rec["output"] = rec[alias]
                    break
    if "ts" not in rec:
        for alias in _TS_ALIASES:
            if alias in rec:
                rec["ts"] = rec[alias]
                break
    return rec


def is_ok_step(rec: Record) -> bool:
    """A finished step that succeeded: a ``step`` record without an ``error``."""
    return rec.get("kind") == _STEP and rec.get("error") is None


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
