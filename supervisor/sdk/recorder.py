"""The live recorder: the records a step writes (``begin``, then ``step`` with its output or error), written
through the journal writer with their state patch, and folded once written. Nothing is written in a replay."""

from __future__ import annotations

import re
import traceback
from time import perf_counter
from typing import Any

import orjson

from ..core import wire
from ..core.history import Fold
from ..core.journal_writer import JournalWriter
from ..core.records import Kind, Record
from ..core.state import find_unjournalable, unjournalable_text
from ..errors import JournalError, NotJSONValueError
from ..replay.session import inputs_hash
from .options import Call, _encode
from .shadow import REFUSED, Shadow

_DUMPS_OPTS = orjson.OPT_NON_STR_KEYS
# A dict, list or scalar orjson writes with string keys is plain JSON; dataclasses and datetimes, keys that are not
# strings (typed by the codec: they come back as they were) and the types orjson writes but would not read back
# at the top (a tuple, UUID, Enum) are left to the codec (typed outputs).
_OUT_OPTS_STR = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_PLAIN_TOP = frozenset({dict, list, str, int, float, bool, type(None)})
_EMPTY_HASH = inputs_hash({})
_dumps = orjson.dumps
_loads = orjson.loads
_has_null = re.compile(b"null").search  # faster than `in` (about 0.1 us for a short line)
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
            rec["k"] = c.k  # the call's number among this name's calls (in its parent): its identity is (step, k)
        if c.parent is not None and c.parent.bid is not None:
            rec["parent"] = c.parent.bid
        if inputs:
            rec["inputs"] = inputs
        if c.call is not None:
            rec["call"] = c.call
        self.append(rec, sync=False)
        c.bid = rec.get("id")

    def finished(self, c: Call, out: Any, t0: float) -> Record:
        """The ``step`` record of a call that returned ``out`` (raises if ``out`` cannot be encoded)."""
        rec: Record = {"kind": wire.STEP, "step": c.name, "pos": c.pos, "attempt": self.attempt}
        if c.k:
            rec["k"] = c.k
        if c.parent is not None and c.parent.bid is not None:
            rec["parent"] = c.parent.bid
        inputs = c.inputs
        if inputs:
            rec["inputs"] = inputs
            rec["inputs_hash"] = inputs_hash(inputs)  # compared by 'replay --verify' and on resume
        else:
            rec["inputs_hash"] = _EMPTY_HASH
        data = None
        if type(out) in _PLAIN_TOP:  # plain JSON: serialised once
            try:
                data = _dumps(out, option=_OUT_OPTS_STR)
            except TypeError:
                pass  # a datetime, a dataclass, a key that is not a str, a lone surrogate...: the codec
            else:
                # orjson writes NaN and Infinity as null: only a null can hide one (then the codec decides)
                if out is not None and _has_null(data) and _changed(out, data):
                    data = None
        if data is not None:
            rec["output"] = _Fragment(data)
        else:
            data, otype = _encode(out, c.name)
            rec["output"] = _Fragment(data)
            if otype is not None:
                rec["output_type"] = otype
        rec["dur_ms"] = int((perf_counter() - t0) * 1e6 + 0.5) / 1000  # round(x, 3) at a third of its cost
        rec["key"] = c.key
        if c.call is not None:
            rec["call"] = c.call
        if c.usage:
            rec["usage"] = c.usage
        if c.extra:
            rec.update(c.extra)  # a person's answer at a pause: the output was given, or the inputs it ran with
        return rec

    def failed(self, c: Call, e: BaseException, t0: float, transient: bool) -> Record:
        """The ``step`` record of a try that raised ``e`` (``transient``: it is tried again); the try's usage goes with it."""
        rec: Record = {"kind": wire.STEP, "step": c.name, "pos": c.pos, "attempt": self.attempt}
        if c.k:
            rec["k"] = c.k
        if c.parent is not None and c.parent.bid is not None:
            rec["parent"] = c.parent.bid
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
        if REFUSED in rec:
            raise rec.pop(REFUSED)  # its state patch: the journal would change it (Shadow.with_patch)
        try:
            try:
                return w.append(rec, sync=sync, alone=alone)
            except TypeError as e:
                self._unencodable(rec, e)
            try:
                return w.append(rec, sync=sync, alone=alone)
            except TypeError as e:
                raise _not_journaled(rec, e) from None
        except (JournalError, TypeError, ValueError):
            if "state_patch" in rec:
                self.shadow.forget()  # not written (a failed write is cut back by the writer)
            raise

    def write(self, rec: Record) -> int:
        """Write ``rec`` without its sync: its end in the stream, for :meth:`wait_synced` (``-1``: a replay)."""
        w = self.writer
        if w is None:
            return -1
        if REFUSED in rec:
            raise rec.pop(REFUSED)
        try:
            try:
                return w.write(rec)
            except TypeError as e:
                self._unencodable(rec, e)
            try:
                return w.write(rec)
            except TypeError as e:
                raise _not_journaled(rec, e) from None
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
    def _unencodable(rec: Record, err: TypeError) -> None:
        """A record the writer could not encode (``err``; it has escaped lone surrogates in free text already).

        A step's name and inputs are matched and compared on resume, so they are never changed: a lone
        surrogate there, or inputs nested too deeply for a journal line, is an error naming the step (raised
        at its ``begin``: the step has not run). Other inputs JSON cannot hold are written as JSON where they
        say how (a pydantic model: ``model_dump(mode="json")``), else as their ``repr`` (an output was encoded
        before). Their ``inputs_hash`` is made from the values themselves either way, so resume matches as before.
        Anything else is left to :func:`_not_journaled`."""
        if rec.get("kind") not in (wire.BEGIN, wire.STEP):
            return
        name = rec.get("step")
        if isinstance(name, str) and find_unjournalable(name) is not None:
            raise NotJSONValueError(
                f"the step name {name!r} holds a lone surrogate, which a journal line (UTF-8 JSON) cannot hold, and "
                "a resume matches steps by name: give the step a name that is valid text", name
            )
        inputs = rec.get("inputs")
        if inputs is None or isinstance(inputs, _Fragment):
            return
        hit = find_unjournalable(inputs, floats=False)
        if hit is not None:
            raise NotJSONValueError(
                f"step {name!r} cannot be journaled: {_inputs_text(hit)}; a resume compares a step's inputs "
                "with the recorded ones, so they are never changed: pass the text cleaned "
                "(s.encode('utf-8', 'replace').decode()) or as bytes (s.encode('utf-8', 'surrogatepass')) "
                "(the step has not run)",
                hit[1], tuple(hit[0]),
            )
        try:
            rec["inputs"] = _Fragment(orjson.dumps(inputs, default=_input_json, option=_DUMPS_OPTS))
        except TypeError as e:
            raise TypeError(f"step {name!r} cannot be journaled: its inputs are {_why(e)} (the step has not run)") from None

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


def _changed(out: Any, data: bytes) -> bool:
    """Whether ``data``, read back, is not ``out`` (a NaN written as null, a tuple as a list...)."""
    try:
        return bool(_loads(data) != out)
    except Exception:  # an __eq__ that raises: the codec decides
        return True


def _inputs_text(hit: tuple[Any, Any, bool]) -> str:
    """Where in a step's inputs, as the call gave them: ``args[0]``, ``kwargs['q']``."""
    path, bad, is_key = hit
    if path and path[0] in ("args", "kwargs"):
        return unjournalable_text(str(path[0]), (path[1:], bad, is_key))
    return unjournalable_text("inputs", hit)


def _why(e: TypeError) -> str:
    """orjson's reason, for a person."""
    if "ecursion" in str(e):  # "Recursion limit reached"
        return "nested too deeply (a journal line holds at most 254 levels)"
    return f"not JSON ({e})"


def _who(rec: Record) -> str:
    kind = rec.get("kind")
    if kind in (wire.BEGIN, wire.STEP):
        return f"step {rec.get('step')!r}"
    if kind == Kind.NOTE:
        return f"the note {rec.get('message')!r}"
    return f"the {kind} record" + (f" {rec['name']!r}" if "name" in rec else "")


def _not_journaled(rec: Record, e: TypeError) -> TypeError:
    """The error for a record still not encodable: what it is and why (its values are the agent's)."""
    return TypeError(f"{_who(rec)} cannot be journaled: a value in it is {_why(e)}")


def _input_json(value: Any) -> Any:
    """A step input JSON cannot hold, for its record: a pydantic model as its JSON dump (readable, as its outputs
    are), anything else as its ``repr``."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # a model whose fields do not dump: its repr says what it was
            pass
    return repr(value)
