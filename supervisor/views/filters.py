"""Row filters and search terms for the timeline (no Textual): lnav's filter-in/filter-out, k9s's ``/`` with ``!``.

One parser serves the filter (``&``) and the search (``/``). A query is a few terms, all of which a row must satisfy:

- ``word`` or ``"two words"``: the record's text holds it (smart case: a word in lower case matches any case;
  ``text:kind:x`` for a text that looks like a term). Everything a record holds is searched except the
  ``inputs`` of a model call (its conversation, repeated by every call: ``inputs:word`` searches it);
- ``output:T``, ``error:T``, ``inputs:T``: that field of the record holds the text (as JSON text, smart case);
- ``step:search:*``: the step name matches the glob (case-sensitive, as ``replay --live``);
- ``model:M``: the model a step or call used holds ``M`` (any case), e.g. ``model:claude``;
- ``attempt:N`` (or ``attempt:1,2``): the process attempt that wrote it;
- ``kind:step,checkpoint``: the record's kind (``event``: a supervisor row, ``bad``: a damaged line);
- ``errors``: failed steps, and crashes, hangs and give-ups of the supervisor;
- ``!term``: the row must not satisfy ``term`` (filter out).

Journal lines are tested raw, in a worker (:class:`FilterPass`): a line is parsed only when a term needs a
field (then only the lines that hold the term's text, found at C speed) or the line may be a model call that
holds a plain word (is it in its inputs only?).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..core.events import is_error_event
from ..core.records import Kind, parse_line
from ..core.segments import StreamPos, read_stream, split_lines
from ..core.wire import ERROR_WORD, NL_WRITER, WRITER, writer_kind

KINDS = tuple(k.value for k in Kind) + ("event", "bad")
"""What ``kind:`` accepts: the journal's kinds, ``event`` (supervisor rows) and ``bad`` (damaged lines)."""
_KIND_ALIASES = {"supervisor": "event", "checkpt": "checkpoint", "damaged": "bad"}

SYNTAX = "text, output:T, error:T, inputs:T, step:GLOB, model:M, attempt:N, kind:K, errors; !term excludes"

FIELDS = ("output", "error", "inputs")
"""The record fields a scoped text term (``output:T``) searches."""
_RECORD_TERMS = frozenset({"step", "errors", "model", "attempt", *FIELDS})
"""The terms that need the parsed record (a text term needs it on a model call's line only)."""
MODEL_HINT = b'"model"'
"""What a model call's line holds in any spacing (``"kind":"model"``): a line without it is no model call."""


@dataclass(frozen=True, slots=True)
class Term:
    """One condition: ``what`` is ``text``, ``kind``, ``step``, ``errors``, ``model``, ``attempt`` or a field
    of :data:`FIELDS`."""

    what: str
    value: str
    negate: bool = False
    kinds: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    needle: bytes = b""
    fold: bool = False
    attempts: frozenset[int] = frozenset()

    def label(self) -> str:
        if self.what in FIELDS:
            body = f"{self.what} has {self.value!r}"
        else:
            body = {"text": repr(self.value), "errors": "errors"}.get(self.what, f"{self.what}:{self.value}")
        return ("not " if self.negate else "") + body

    def holds(self, text: bytes) -> bool:
        """Whether JSON text holds the term's needle (smart case)."""
        return self.needle in (text.lower() if self.fold else text)


def is_model_call(rec: Any) -> bool:
    """A step or proxied call whose ``call`` says it is a model call (the adapters' and the proxy's records)."""
    call = rec.get("call") if isinstance(rec, dict) else None
    return isinstance(call, dict) and call.get("kind") == "model"


def _without_inputs(rec: dict[str, Any]) -> bytes:
    """A model call's record as JSON without its ``inputs`` (the conversation): what a plain word searches."""
    return orjson.dumps({k: v for k, v in rec.items() if k != "inputs"}, default=str)


def _field(rec: Any, key: str) -> bytes:
    """A record's field as JSON text (``b""``: absent)."""
    if not isinstance(rec, dict) or rec.get(key) is None:
        return b""
    return orjson.dumps(rec[key], default=str)


def _model_of(rec: Any) -> str:
    """The model a step or call used, lower-cased: its ``call``'s, else its usage's (``""``: none)."""
    if not isinstance(rec, dict):
        return ""
    call = rec.get("call")
    if isinstance(call, dict) and isinstance(call.get("model"), str):
        return str(call["model"]).lower()
    usage = rec.get("usage")
    for u in usage if isinstance(usage, list) else ():
        if isinstance(u, dict) and isinstance(u.get("model"), str):
            return str(u["model"]).lower()
    return ""


def _glob_hit(t: Term, name: Any) -> bool:
    return name is not None and t.pattern is not None and t.pattern.match(name if isinstance(name, str) else str(name)) is not None


def _record_hit(t: Term, kind: str, rec: Any) -> bool:
    """A term that reads the parsed record (``rec``: ``None`` for a damaged line)."""
    if t.what == "kind":
        return kind in t.kinds
    if t.what == "step":
        return _glob_hit(t, rec.get("step") if isinstance(rec, dict) else None)
    if t.what == "errors":  # a failed step (a retried try too, as e and E go to)
        return kind == Kind.STEP and isinstance(rec, dict) and rec.get("error") is not None
    if t.what == "model":
        return t.value.lower() in _model_of(rec)
    if t.what == "attempt":
        att = rec.get("attempt") if isinstance(rec, dict) else None
        return type(att) is int and att in t.attempts
    return t.holds(_field(rec, t.what))  # output:, error:, inputs:


@dataclass(frozen=True, slots=True)
class RowFilter:
    """The terms a row must all satisfy; ``text`` as the user typed it."""

    text: str
    terms: tuple[Term, ...]

    def describe(self) -> str:
        return " and ".join(t.label() for t in self.terms)

    @property
    def needs_record(self) -> bool:
        return any(t.what in _RECORD_TERMS for t in self.terms)

    # ------------------------------------------------------------------ journal lines
    def match_line(self, line: bytes) -> bool:
        """Whether the raw journal line passes (a blank line never does: it is no record)."""
        if not line.strip():
            return False
        rec: Any = None
        parsed = False
        kind = ""
        for t in self.terms:
            if t.what == "text":
                hit = t.holds(line)
                if hit and MODEL_HINT in line:  # in a model call's conversation only? then no hit
                    if not parsed:
                        parsed = True
                        kind, rec = _kind_and_record(line, True)
                    hit = not is_model_call(rec) or t.holds(_without_inputs(rec))
            else:
                if not parsed:
                    parsed = True
                    kind, rec = _kind_and_record(line, self.needs_record)
                hit = _record_hit(t, kind, rec)
            if hit == t.negate:
                return False
        return True

    # ------------------------------------------------------------------ supervisor rows
    def match_event(self, ev: dict[str, Any]) -> bool:
        """Whether a supervisor row (a ``supervisor.jsonl`` event) passes: it has no output, inputs or model."""
        raw: bytes | None = None
        for t in self.terms:
            if t.what in ("text", "error"):
                if raw is None:
                    raw = orjson.dumps(ev, default=str)
                hit = t.holds(raw) and (t.what == "text" or is_error_event(ev))
            elif t.what == "kind":
                hit = "event" in t.kinds
            elif t.what == "step":
                hit = _glob_hit(t, ev.get("step"))
            elif t.what == "errors":
                hit = is_error_event(ev)
            elif t.what == "attempt":
                hit = type(ev.get("attempt")) is int and ev["attempt"] in t.attempts
            else:  # output:, inputs:, model:
                hit = False
            if hit == t.negate:
                return False
        return True


def _kind_and_record(line: bytes, need_record: bool) -> tuple[str, Any]:
    """The line's kind (``bad`` for a damaged line; no kind: ``step``) and, if needed or parsed anyway, its record."""
    if not need_record:
        kind = writer_kind(line)
        if kind is not None:
            return kind.decode("utf-8", "replace"), None
    try:
        rec = parse_line(line)
    except ValueError:
        return "bad", None
    kind = rec.get("kind")
    return (str(kind) if kind is not None else Kind.STEP.value), rec


def _text_term(what: str, body: str, negate: bool) -> Term:
    """A text to find (smart case), as the raw JSON line holds it: a quote or backslash is escaped there."""
    needle = body.encode()
    fold = needle == needle.lower() and needle != needle.upper()  # smart case, as the search
    escaped = orjson.dumps(body)[1:-1]
    return Term(what, body, negate, needle=escaped.lower() if fold else escaped, fold=fold)


def _attempts(value: str) -> frozenset[int]:
    try:
        out = frozenset(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        out = frozenset()
    if not out:
        raise ValueError(f"attempt:{value} is not an attempt number: type e.g. attempt:2 or attempt:1,2")
    return out


def _scoped(low: str, body: str, negate: bool) -> Term | None:
    """A ``scope:value`` term (``None``: the word names no scope, it is a text)."""
    scope, _, value = low.partition(":")
    value = body[len(scope) + 1 :]
    if scope in FIELDS:
        if not value:
            if scope == "error":
                return Term("errors", "", negate)
            raise ValueError(f"{scope}: needs a text after it, e.g. {scope}:timeout")
        return _text_term(scope, value, negate)
    if scope == "kind":
        kinds = {_kind(k) for k in value.split(",")}
        return Term("kind", ",".join(sorted(kinds)), negate, kinds=frozenset(kinds))
    if scope == "step" and value:
        return Term("step", value, negate, pattern=re.compile(fnmatch.translate(value)))
    if scope == "model" and value:
        return Term("model", value, negate, needle=value.lower().encode(), fold=True)
    if scope == "attempt":
        return Term("attempt", value, negate, attempts=_attempts(value))
    return None


def _term(body: str, negate: bool) -> Term | None:
    """One word of a query (``!`` taken off): ``errors``, a scoped term, or a text (``None``: empty)."""
    low = body.lower()
    if low in ("errors", "error", "is:error", "is:errors"):
        return Term("errors", "", negate)
    if low.startswith("text:"):
        body = body[5:]
    elif ":" in low:
        term = _scoped(low, body, negate)
        if term is not None:
            return term
    if not body:
        return None
    return _text_term("text", body, negate)


def _kind(word: str) -> str:
    """A kind named in ``kind:``, its aliases resolved; ``ValueError`` for an unknown one."""
    k = _KIND_ALIASES.get(word.strip().lower(), word.strip().lower())
    if k in ("error", "errors"):
        raise ValueError("errors is a term of its own: type errors, not kind:errors")
    if k not in KINDS:
        raise ValueError(f"unknown kind {k!r} in the filter: one of {', '.join(KINDS)}")
    return k


def parse_filter(text: str) -> RowFilter:
    """Parse what the user typed; ``ValueError`` with a one-line reason (an unknown kind, an open quote)."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"cannot read {text!r}: {e}") from None
    terms: list[Term] = []
    for w in words:
        negate = w.startswith("!") and len(w) > 1
        term = _term(w[1:] if negate else w, negate)
        if term is not None:
            terms.append(term)
    if not terms:
        raise ValueError("nothing to look for: type a text, or output:T, error:T, inputs:T, step:GLOB, model:M, "
                         "attempt:N, kind:K, errors")
    return RowFilter(text.strip(), tuple(terms))


@dataclass(frozen=True, slots=True)
class _Needle:
    """A text every passing line holds: ``term`` (its index) is decided by it (``at_start``: found at the line's start)."""

    text: bytes
    fold: bool
    term: int
    at_start: bool = False


def _needles(flt: RowFilter, data: bytes, lines: int) -> list[_Needle]:
    """Texts every passing line of ``data`` must hold, one per positive term that has one."""
    out: list[_Needle] = []
    writer: bool | None = None
    for k, t in enumerate(flt.terms):
        if t.negate:
            continue
        if t.what == "text":
            out.append(_Needle(t.needle, t.fold, k))
        elif t.what in FIELDS or t.what == "model":  # a hint only: the field (the model) decides
            out.append(_Needle(t.needle, t.fold, -1))
        elif t.what == "errors":
            out.append(_Needle(ERROR_WORD, False, -1))  # a hint only: the record says whether it failed
        elif t.what == "kind" and len(t.kinds) == 1 and next(iter(t.kinds)) not in ("event", "bad"):
            if writer is None:  # every line says its kind first (another writer's lines may not)
                writer = data.startswith(WRITER) and data.count(NL_WRITER) == lines - 1
            if writer:
                out.append(_Needle(WRITER + next(iter(t.kinds)).encode() + b'"', False, k, at_start=True))
        elif t.what == "step":
            literal = re.split(r"[*?\[]", t.value, maxsplit=1)[0]
            if literal:
                out.append(_Needle(orjson.dumps(literal)[1:-1], False, -1))
    return out


def _rarest(needles: list[_Needle], data: bytes) -> tuple[_Needle, int, bytes]:
    """The needle ``data`` holds fewest times (counted at C speed), that count, and the bytes it is found in
    (``data``, or ``data`` lowered for a case-folded needle)."""
    hays: dict[bool, bytes] = {False: data}
    best, fewest = needles[0], -1
    for nd in needles:
        if nd.fold and True not in hays:
            hays[True] = data.lower()
        n = hays[nd.fold].count(nd.text)
        if fewest < 0 or n < fewest:
            best, fewest = nd, n
    return best, fewest, hays[best.fold]


def filter_lines(flt: RowFilter, data: bytes, first_seq: int, out: list[int]) -> int:
    """Append the seqs of the lines of ``data`` (whole lines, the first at ``first_seq``) that pass; the line count.

    When a term names a text every passing line must hold (a text, ``"error"``, a writer
    line's kind, a glob's literal start), only the lines that hold the rarest such text
    (counted at C speed) are tested."""
    lines = data.count(b"\n")
    needles = _needles(flt, data, lines)
    match = flt.match_line
    if not needles:
        out.extend(first_seq + k for k, line in enumerate(split_lines(data)) if match(line))
        return lines
    best, fewest, hay = _rarest(needles, data)
    needle = best.text
    # the other terms (the needle decides its own): a line that holds a text term's needle passes it
    rest = RowFilter(flt.text, tuple(t for k, t in enumerate(flt.terms) if k != best.term)) if best.term >= 0 else flt
    rest_match = rest.match_line if rest.terms else None

    text_decides = best.term >= 0 and flt.terms[best.term].what == "text"

    def passes(line: bytes) -> bool:
        """A line that holds the needle."""
        if best.at_start and not (line.startswith(needle) and line.endswith(b"}")):
            return match(line)  # the kind's text inside a value, or a line cut short: the line itself decides
        if text_decides and MODEL_HINT in line:
            return match(line)  # a model call's line: is the text in its conversation only?
        return rest_match is None or rest_match(line)

    if fewest * 4 > lines:  # most lines hold it: a test per line beats a find per line
        split = split_lines(data)
        low = split_lines(hay) if best.fold else split
        out.extend(first_seq + k for k, line in enumerate(low) if needle in line and passes(split[k]))
        return lines
    i = hay.find(needle)
    seq, pos = first_seq, 0
    while i >= 0:
        start = hay.rfind(b"\n", 0, i) + 1
        seq += hay.count(b"\n", pos, start)
        end = hay.find(b"\n", i)
        if passes(data[start:end]):
            out.append(seq)
        pos = end + 1
        seq += 1
        i = hay.find(needle, pos)
    return lines


@dataclass
class FilterPass:
    """One filter's forward read of the journal: where it stands, so each pass reads only what came since."""

    flt: RowFilter
    source: Path
    cursor: StreamPos
    cancelled: bool = False
    busy: bool = False
    """A worker reads for this pass (the dashboard's, under its lock)."""
    again: bool = False
    """More was committed while it read: it reads again before it ends."""

    def advance(self, cancelled: Callable[[], bool] | None = None) -> tuple[list[int], int]:
        """Test the lines committed since the last call; their passing seqs and the seq read up to."""
        out: list[int] = []
        for c in read_stream(self.source, self.cursor):
            c.n_lines = filter_lines(self.flt, c.data, c.region.first_seq, out)
            if self.cancelled or (cancelled is not None and cancelled()):
                break
        return out, self.cursor.seq


def new_pass(flt: RowFilter, source: Path) -> FilterPass:
    return FilterPass(flt, source, StreamPos())
