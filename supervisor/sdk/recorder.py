"""The live recorder: the records a step writes (``begin``, then ``step`` with its output or error), written
through the journal writer with their state patch, and folded once written. Nothing is written in a replay."""

from __future__ import annotations

import traceback
from time import perf_counter
from typing import Any

import orjson

from ..core import wire
from ..core.history import Fold
from ..core.journal_writer import JournalWriter
from ..core.records import Kind, Record
from ..errors import JournalError
from ..replay.session import inputs_hash
from .options import Call, _encode
from .shadow import Shadow

_DUMPS_OPTS = orjson.OPT_NON_STR_KEYS
# An output orjson writes as it is is plain JSON; dataclasses and datetimes are left to the codec (typed outputs).
_OUT_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
# Tried first (the same bytes when every key is a str, at about half the cost: orjson's non-str-keys path is
# slower even on str keys); on a TypeError the full options, then the codec.
_OUT_OPTS_STR = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_EMPTY_HASH = inputs_hash({})
_dumps = orjson.dumps
_Fragment = orjson.Fragment


class Recorder:
    """Writes this attempt's records (``writer`` is ``None`` in a replay: nothing is written) and folds them.

    A record with a state patch that could not be written makes the shadow unknown (:meth:`Shadow.forget`).
    """

    def __init__(self, writer: JournalWriter | None, fold: Fold, shadow: Shadow, attempt: int) -> None:
        self.writer = writer
        self.fold = fold
        self.shadow = shadow
        self.attempt = attempt

    # ------------------------------------------------------------------ records
    def begin(self, c: Call, inputs: dict[str, Any]) -> None:
        """The ``begin`` record of a live call (its key order is the wire's: kind, step, pos, attempt, ...)."""
        rec: Record = {"kind": wire.BEGIN, "step": c.name, "pos": c.pos, "attempt": self.attempt}
        if c.k:
            rec["k"] = c.k  # the call's number among this name's calls: its identity is (step, k)
        if inputs:
            rec["inputs"] = inputs
        if c.call is not None:
            rec["call"] = c.call
        self.append(rec, sync=False)

    def finished(self, c: Call, out: Any, t0: float) -> Record:
        """The ``step`` record of a call that returned ``out`` (raises if ``out`` cannot be encoded)."""
        rec: Record = {"kind": wire.STEP, "step": c.name, "pos": c.pos, "attempt": self.attempt}
        if c.k:
            rec["k"] = c.k
        inputs = c.inputs
        if inputs:
            rec["inputs"] = inputs
            rec["inputs_hash"] = inputs_hash(inputs)  # compared by 'replay --verify' and on resume
        else:
            rec["inputs_hash"] = _EMPTY_HASH
        try:
            try:  # plain JSON: serialised once
                rec["output"] = _Fragment(_dumps(out, option=_OUT_OPTS_STR))
            except TypeError:
                rec["output"] = _Fragment(_dumps(out, option=_OUT_OPTS))
        except TypeError:
            value, otype = _encode(out, c.name)
            rec["output"] = value
            if otype is not None:
                rec["output_type"] = otype
        rec["dur_ms"] = int((perf_counter() - t0) * 1e6 + 0.5) / 1000  # round(x, 3) at a third of its cost
        rec["key"] = c.key
        if c.call is not None:
            rec["call"] = c.call
        if c.usage:
            rec["usage"] = c.usage
        return rec

    def failed(self, c: Call, e: BaseException, t0: float, transient: bool) -> Record:
        """The ``step`` record of a try that raised ``e`` (``transient``: it is tried again); the try's usage goes with it."""
        rec: Record = {"kind": wire.STEP, "step": c.name, "pos": c.pos, "attempt": self.attempt}
        if c.k:
            rec["k"] = c.k
        if c.inputs:
            rec["inputs"] = c.inputs
        rec["error"] = {
            "type": type(e).__name__,
            "message": str(e),
            "traceback": "".join(traceback.format_exception(e)[-6:]),
        }
        rec["dur_ms"] = round((perf_counter() - t0) * 1000, 3)
        if transient:
            rec["transient"] = True
        if c.call is not None:
            rec["call"] = c.call
        if c.usage:
            rec["usage"] = c.usage
            c.usage = None  # the next try records its own
        return rec

    def note(self, message: str, **fields: Any) -> None:
        """Append a free-form ``note`` record."""
        self.append({"kind": Kind.NOTE, "message": message, **fields})

    # ------------------------------------------------------------------ writing
    def append(self, rec: Record, *, sync: bool = True, alone: bool = False) -> Record:
        """Write ``rec`` (synced unless ``sync`` is false); in a replay nothing is written."""
        w = self.writer
        if w is None:
            return rec  # replay never writes to the journal it replays (and has no writer)
        try:
            try:
                return w.append(rec, sync=sync, alone=alone)
            except TypeError:
                self._unencodable(rec)
                return w.append(rec, sync=sync, alone=alone)
        except (JournalError, TypeError):
            if "state_patch" in rec:
                self.shadow.forget()  # not written (a failed write is cut back by the writer)
            raise

    def write(self, rec: Record) -> int:
        """Write ``rec`` without its sync: its end in the stream, for :meth:`wait_synced` (``-1``: a replay)."""
        w = self.writer
        if w is None:
            return -1
        try:
            try:
                return w.write(rec)
            except TypeError:
                self._unencodable(rec)
                return w.write(rec)
        except BaseException:
            if "state_patch" in rec:
                self.shadow.forget()
            raise

    def wait_synced(self, end: int) -> None:
        """Block until a sync covers the line :meth:`write` ended at ``end``."""
        assert self.writer is not None  # write gave an end: there is a writer
        self.writer.wait_synced(end)

    def synced_future(self, end: int) -> Any:
        """A future done once a sync covers ``end`` (``None``: covered already), for ``astep``."""
        assert self.writer is not None
        return self.writer.synced_future(end)

    @staticmethod
    def _unencodable(rec: Record) -> None:
        """A record with a value JSON cannot hold: inputs are shown as repr (an output was encoded before)."""
        if "inputs" in rec:
            rec["inputs"] = orjson.Fragment(orjson.dumps(rec["inputs"], default=repr, option=_DUMPS_OPTS))

    def took(self, rec: Record) -> None:
        """Fold a record this process just wrote; its state patch is already in the shadow."""
        fold = self.fold
        if fold.keep:
            fold.add(rec)
        elif rec["kind"] is wire.STEP and "error" not in rec:
            fold.step_count += 1  # all a counting fold does with a live step (Fold._record)
        else:
            if "state_patch" in rec:
                rec = {k: v for k, v in rec.items() if k != "state_patch"}  # a kept checkpoint needs no patch
            fold.add(rec)
        self.shadow.applied(rec["seq"])
