"""The writer's byte shapes: the only module that knows how this package's own lines look on disk.

Any JSON object per line is a valid journal record (see ``records``). Lines this
package writes have one more property that the fast paths rely on: a fixed key
order. A ``begin`` or ``step`` line the SDK writes is, byte for byte::

    {"kind":"step","step":"<name>","pos":N[,"attempt":A],...,"seq":S,"id":"<id>","ts":"<ts>"}

- ``kind`` first, then ``step`` (a JSON string), then ``pos`` (a non-negative integer),
  then ``attempt`` where the writer knows it;
- the record's other fields in the order the SDK set them (``inputs``, ``output`` or ``error``, ...);
- ``seq``, ``id`` and ``ts`` last, added by the journal writer in that order, with no spaces anywhere.

Every other record the package writes (``start``, ``checkpoint``, ``rollback``, ``fork``, ``note``)
starts with ``{"kind":"<kind>",``. A reader may take a line that matches a predicate of this
module by its bytes; a line that does not (another key order, spaces, a text prefix) takes the
general path (``orjson.loads`` and ``records.normalize``) and must give the same answers.
``tests/unit/test_wire_contract.py`` checks both halves of that promise.
"""

from __future__ import annotations

import operator
import re
from itertools import repeat
from typing import Any, NamedTuple, TypedDict

import orjson

# --- the record kinds as plain strings --------------------------------------------------------
# Plain-string twins of records.Kind for the per-line paths: looking up an enum member costs
# ~100 ns in Python 3.11, and orjson encodes a member at half the speed of a str.
STEP = "step"
BEGIN = "begin"
START = "start"
CHECKPOINT = "checkpoint"
ROLLBACK = "rollback"
FORK = "fork"
NOTE = "note"
PAUSE = "pause"
CHOICE = "choice"

# --- line heads ---------------------------------------------------------------------------------
WRITER = b'{"kind":"'
"""How every line this package writes starts."""
STEP_HEAD = b'{"kind":"step",'
BEGIN_HEAD = b'{"kind":"begin",'
START_HEAD = b'{"kind":"start",'
ROLLBACK_HEAD = b'{"kind":"rollback",'
CHECKPOINT_HEAD = b'{"kind":"checkpoint",'


# --- views: what the scan and the filters look for in a line's bytes ----------------------------
KIND_AT = len(WRITER)
"""Where a writer line's kind starts (it ends at the next ``"``)."""
NL_WRITER = b"\n" + WRITER
END_WRITER = b"}\n" + WRITER
"""One writer line's end and the next one's start: in a chunk of writer lines, one fewer than its lines."""
NL_STEP = b"\n" + STEP_HEAD
NL_BEGIN = b"\n" + BEGIN_HEAD
ERROR_KEY = b'"error":'
"""In a writer line (no spaces), what a record with an ``error`` holds."""
ERROR_WORD = b'"error"'
"""What every failed record's line holds in any spacing (a hint: the record says whether it failed)."""
ERROR_RE = re.compile(rb'"error"\s*:')
"""``error`` as a key, in any spacing."""
KIND_RE = re.compile(rb'\s*\{\s*"kind"\s*:\s*"([a-z]+)"\s*[,}]')
"""A line whose first key is ``kind`` (so the top-level one), in any spacing."""
MARKER_KINDS = (CHECKPOINT.encode(), ROLLBACK.encode(), START.encode())
"""The kinds, besides a failed step, that make a marker of the timeline's scan."""
MARKER_WORDS = tuple(b'"kind":"' + k + b'"' for k in MARKER_KINDS)
"""Their ``kind`` as it appears in a writer line (a failed step is found by :data:`ERROR_KEY`)."""
BEGIN_KEY = re.compile(re.escape(BEGIN_HEAD) + rb'("step":"[^"\\]*(?:\\.[^"\\]*)*","pos":\d+,(?:"attempt":\d+,)?)')
"""A writer begin line's head that its step line repeats after ``{"kind":"step",``: the pairing key."""
TRANSIENT = b'"transient":true'
"""A failed try the SDK retries: it does not close its begin."""
CHANGED_INPUTS = "changed inputs"
"""The ``message`` of the SDK's ``note`` for a step served on resume whose inputs differ from the call's."""
CHANGED_WORD = b'"changed inputs"'
USAGE_WORD = b'"usage"'
"""What a chunk with a model call's token usage holds (one C-speed look before any record is parsed)."""
PARENT_WORD = b'"parent":'
"""What every record of a nested step holds in a writer line: ``parent``, the ``id`` of its enclosing step's begin
(a top-level step has none). A hint, one substring test: the parsed record says whether its top level has it."""


def id_needle(record_id: str) -> bytes:
    """What a writer line whose ``id`` is ``record_id`` holds: ``"id":"<id>"`` (how a nested record's parent begin
    is found by its bytes)."""
    return b'"id":' + orjson.dumps(record_id)


def writer_kind(line: bytes) -> bytes | None:
    """The kind of a line in the writer's form (it starts with :data:`WRITER` and ends with ``}``), else ``None``."""
    if line.startswith(WRITER) and line.endswith(b"}"):
        end = line.find(b'"', KIND_AT)
        if end > KIND_AT:
            return line[KIND_AT:end]
    return None

# --- core: the patterns the readers test lines with, the overlap rule, the record TypedDicts -------

FIELD_TRANSIENT = b'"transient":'
"""In a step line: maybe a failed try that is retried (its begin stays open)."""
ABANDONED_TAIL = b',"abandoned":true}'
"""What ``log --json --all`` puts in place of a writer line's last ``}`` on an abandoned branch."""
S_BYTE = ord("s")
"""``line[KIND_AT]`` of a ``step`` (or ``start``) writer line."""
MARKS = MARKER_WORDS[:2]
"""The kind markers the first pass looks for in a chunk of writer lines (the fold's markers)."""
WORDS = MARKER_KINDS[:2]
"""The words a writer line must not hold to be passed over unparsed in a chunk not all in the writer's form."""

AFTER_BEGIN = (STEP_HEAD, START_HEAD, ROLLBACK_HEAD)
"""The overlap rule: the steps did not overlap while every ``begin`` line is followed by one of these (its
step, a new attempt, a rollback) or is the file's last line. :data:`OVERLAP` is built from it."""
OVERLAP = re.compile(
    b"\\n" + re.escape(BEGIN_HEAD) + b"[^\\n]*\\n(?!" + b"|".join(map(re.escape, AFTER_BEGIN)) + b"|\\Z)"
)
"""The overlap rule over a whole file's bytes: a begin line (after a newline) whose next line is none of
:data:`AFTER_BEGIN` (the file's first line is checked apart, by :func:`first_line_overlaps`)."""

_NAME = rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'  # a JSON string on one line (the step name, its quotes kept)
STEP_POS = re.compile(rb'\{"kind":"step","step":"[^"\\]*(?:\\.[^"\\]*)*","pos":(\d+)[,}]')
"""A writer step line's head; group 1 its ``pos``."""
TEXT_POS = re.compile(r'"pos"\s*:\s*(\d+)')
"""A ``pos`` field in any JSON text (a damaged line's text: the step position it still shows)."""
CANON = re.compile(
    rb'\{"kind":"(step|begin)","step":"([^"\\]*(?:\\.[^"\\]*)*)","pos":(\d+),.*,"seq":(\d+),"id":"[^"\\]*","ts":"([^"\\]*)"\}',
    re.DOTALL,
)
"""A writer begin/step line whole: its head (kind, the step name as JSON string content, pos) and its tail
(seq, ts: the last ``,"seq":`` of the line, the greedy ``.*`` backtracks from the end), all top-level."""
PLAIN_BEGIN = re.compile(
    rb'\{"kind":"begin","step":"([^"\\]*)","pos":\d+,.*,"seq":(\d+),"id":"[^"\\]*","ts":"([\x20\x21\x23-\x5b\x5d-\x7e]{23})[\x20\x21\x23-\x5b\x5d-\x7e]*"\}',
    re.DOTALL,
)
"""A :data:`CANON` begin line whose name has no escape and whose ``ts`` is ASCII, 23 characters or more
(groups: name, seq, the first 23 of the ``ts``)."""
UNCLOSED = re.compile(rb"\n" + re.escape(BEGIN_HEAD) + rb'(?!"step":(' + _NAME + rb',"pos":\d+,)[^\n]*+\n\{"kind":"step","step":\1)')
"""A writer begin line not followed by its own step line (the backreference: the same name and pos; a begin
not in the head's form counts). Led by a newline, not ``^``: a literal prefix lets the engine search for it at
C speed (``^`` tries every byte); a possessive ``[^\\n]*+`` (nothing to give back before the newline)."""
SEQUENTIAL = re.compile(
    rb"(?:" + re.escape(BEGIN_HEAD) + rb'"step":(' + _NAME + rb',"pos":\d+,)[^\n]*+\n' + re.escape(STEP_HEAD) + rb'"step":\1[^\n]*+\n)*+'
)
"""Writer begin lines each followed by its own step line (the same name and pos, the backreference), as many
as come: how the SDK writes sequential steps. Possessive throughout: one pass over the bytes, nothing given back."""
BEGIN_NAME_POS = re.compile(re.escape(BEGIN_HEAD) + rb'"step":(' + _NAME + rb'),"pos":(\d+),')
"""A writer begin line's head; groups: the step name (a JSON string, quotes kept), ``pos``."""
KIND_FIELD = re.compile(r'\s*\{\s*"kind"\s*:\s*"([a-z]+)"')
"""Any line's leading ``kind`` (spaces allowed): the kind a damaged line still shows."""
STEP_FIELD = re.compile(r'"step"\s*:\s*"((?:[^"\\]|\\.)*)"')
"""A ``step`` field in any JSON text (spaces allowed): the name a damaged line still shows."""


def step_head(name_json: bytes, pos: bytes) -> bytes:
    """How the step line closing a begin of ``name_json`` (a JSON string, quotes kept) at ``pos`` starts."""
    return STEP_HEAD + b'"step":' + name_json + b',"pos":' + pos + b","


def is_suspect(data: bytes) -> bool:
    """A NUL or ``\\xff`` byte: never in a line this package writes (a damaged line may still look whole)."""
    return b"\x00" in data or b"\xff" in data


def is_writer_line(raw: bytes) -> bool:
    """A line that starts and ends as the writer's lines do and holds no suspect byte."""
    return raw.startswith(WRITER) and raw.endswith(b"}") and not is_suspect(raw)


def is_writer_chunk(data: bytes, n: int) -> bool:
    """Every line of ``data`` (``n`` lines, each ending in a newline) is in the writer's form."""
    return (
        n > 0
        and data.startswith(WRITER)
        and data.endswith(b"}\n")
        and data.count(END_WRITER) == n - 1
        and not is_suspect(data)
    )


def is_lazy_step(raw: bytes) -> bool:
    """A successful writer step line: the resume view keeps it unparsed."""
    return raw.startswith(STEP_HEAD) and ERROR_WORD not in raw


def plain_lines(data: bytes, lines: list[bytes]) -> tuple[list[bool], list[bool]]:
    """Which of a region's ``lines`` (``data`` split at its newlines) are writer ``step`` lines of a success (no
    ``error``, not a retried try), and which are writer ``begin`` lines: what a follower that credits progress
    takes by their bytes, unparsed. C-speed passes over the lines, none a line in Python."""
    steps = list(map(bytes.startswith, lines, repeat(STEP_HEAD)))
    if ERROR_WORD in data:  # rare: only then a look at each line (a retried try is a failed one: it holds one)
        steps = list(map(operator.gt, steps, map(bytes.__contains__, lines, repeat(ERROR_WORD))))
    return steps, list(map(bytes.startswith, lines, repeat(BEGIN_HEAD)))


def unclosed_begins(data: bytes) -> list[int]:
    """Where the writer ``begin`` lines of ``data`` (whole lines) start that the next line does not close with
    their own step (:data:`UNCLOSED`): in flight at the end of ``data``, or overlapping other steps."""
    return [m.start() for m in UNCLOSED.finditer(b"\n" + data)]  # the match's newline is the added one or the line's before


class SequentialRun(NamedTuple):
    """Whole lines as the SDK writes sequential steps (:func:`sequential_run`)."""

    steps: int
    """Successful step lines."""
    first_pos: int
    """The ``pos`` of the first line if it is a step, whose begin was in an earlier read (-1: it is not)."""
    last_begin: int
    """Where the last line starts if it is a begin, whose step is not written yet (-1: it is not)."""


def sequential_run(data: bytes, n: int) -> SequentialRun | None:
    """``data`` (``n`` whole lines) if it holds only writer begin lines and step lines of a success, each begin
    followed by its own step (:data:`SEQUENTIAL`), but for a step first and a begin last; ``None`` if it holds
    anything else. Two substring searches and one regex match: no Python step a line."""
    if ERROR_WORD in data or is_suspect(data):  # a retried try is a failed one: it holds an error too
        return None
    start, first_pos = 0, -1
    if data.startswith(STEP_HEAD):
        m = STEP_POS.match(data)
        if m is None:
            return None
        start, first_pos = data.find(b"\n") + 1, int(m[1])
    pairs_m = SEQUENTIAL.match(data, start)  # zero pairs match too
    end = pairs_m.end() if pairs_m is not None else start
    last = -1
    if end < len(data):
        if not data.startswith(BEGIN_HEAD, end) or data.find(b"\n", end) != len(data) - 1:
            return None
        last = end
    pairs = (n - (first_pos >= 0) - (last >= 0)) // 2
    return SequentialRun(pairs + (first_pos >= 0), first_pos, last)


def is_marker_line(raw: bytes) -> bool:
    """A writer line the first pass must parse (a checkpoint or a rollback may be in it)."""
    return any(w in raw for w in WORDS)


def closes_begin(next_line: bytes) -> bool:
    """The overlap rule for one begin line: ``next_line`` (the line after it) shows the steps did not overlap."""
    return next_line.startswith(AFTER_BEGIN)


def first_line_overlaps(src: Any) -> bool:
    """The overlap rule for a file's first line (:data:`OVERLAP` looks for begins after a newline)."""
    if src[: len(BEGIN_HEAD)] != BEGIN_HEAD:
        return False
    nl = src.find(b"\n")
    after = bytes(src[nl + 1 : nl + 20]) if nl >= 0 else b""
    return bool(after) and not closes_begin(after)


def overlaps(src: Any) -> bool:
    """The overlap rule over a whole file's bytes (``bytes`` or a map)."""
    return first_line_overlaps(src) or OVERLAP.search(src) is not None


class StartRecord(TypedDict, total=False):
    """``start``: a process attempt began (written by the SDK when a ``Run`` opens its journal)."""

    kind: str
    """Always ``"start"``."""
    seq: int
    """The line's position in the journal (all segments), dense from 0."""
    id: str
    """Unique record id."""
    ts: str
    """ISO-8601 UTC time, e.g. ``2026-11-29T18:30:12.345Z``."""
    pos: int
    """The number of successful steps before it in the effective history (derived by readers)."""
    attempt: int
    """The process attempt this record opens."""
    pid: int
    """The writing process."""
    resume: bool
    """Whether the attempt resumes recorded steps."""
    replayable_steps: int
    """How many recorded steps the attempt can serve."""
    argv: list[str]
    """The command line, redacted."""
    supervisor: int
    """The supervising process's pid, when supervised (tells the attempt's records from another writer's)."""
    numbering: str
    """``"name-k"``: this attempt's ``begin``/``step`` records carry ``k``."""


class BeginRecord(TypedDict, total=False):
    """``begin``: a step started (written, not synced; a resume does not need it)."""

    kind: str
    """Always ``"begin"``."""
    step: str
    """The step's name, e.g. ``search:q2`` (the action type is the part before ``:``)."""
    pos: int
    """The step's position: successful steps before it in the effective history."""
    attempt: int
    """The process attempt that wrote it."""
    k: int
    """The call's number among the run's calls of the same name (absent: 0)."""
    call: dict[str, Any]
    """Optional: a model call ``{"kind": "model", "model", "provider"}`` or a tool call ``{"kind": "tool", ...}``."""
    seq: int
    """The line's position in the journal."""
    id: str
    """Unique record id."""
    ts: str
    """ISO-8601 UTC time."""


class StepRecord(TypedDict, total=False):
    """``step``: a step finished; exactly one of ``output`` and ``error`` (the writer asserts it)."""

    kind: str
    """Always ``"step"`` (a record without ``kind`` is a step too)."""
    step: str
    """The step's name."""
    pos: int
    """The step's position: successful steps before it in the effective history."""
    attempt: int
    """The process attempt that wrote it."""
    k: int
    """The call's number among the run's calls of the same name (absent: 0)."""
    inputs: Any
    """``{"args": [...], "kwargs": {...}}`` as the SDK records them (any JSON in other writers)."""
    inputs_hash: str
    """sha256 of the inputs' sorted-key JSON, 16 hex digits."""
    output: Any
    """The step's result, plain JSON (a success)."""
    output_type: str
    """How to read ``output`` back as its type (only when it was not plain JSON)."""
    error: str
    """Why the step failed (a failed step is not done)."""
    transient: bool
    """A failed try that is retried."""
    dur_ms: float
    """How long the step ran."""
    key: str
    """The idempotency key."""
    usage: list[dict[str, Any]]
    """What the step's model calls consumed, each ``{model, provider, input_tokens, output_tokens, cached_tokens}``."""
    call: dict[str, Any]
    """Optional: the model or tool call the step is."""
    state_patch: list[dict[str, Any]]
    """RFC 6902 JSON Patch from the state after the previous record that had one."""
    seq: int
    """The line's position in the journal."""
    id: str
    """Unique record id."""
    ts: str
    """ISO-8601 UTC time."""


class CheckpointRecord(TypedDict, total=False):
    """``checkpoint``: a named state snapshot (a rollback may return to it)."""

    kind: str
    """Always ``"checkpoint"``."""
    name: str
    """The checkpoint's name."""
    file: str
    """The snapshot's file in ``checkpoints/``."""
    pos: int
    """Successful steps before it in the effective history."""
    state_patch: list[dict[str, Any]]
    """Its own RFC 6902 patch."""
    seq: int
    """The line's position in the journal."""
    id: str
    """Unique record id."""
    ts: str
    """ISO-8601 UTC time."""


class RollbackRecord(TypedDict, total=False):
    """``rollback``: the records since a checkpoint become an abandoned branch (an attempt's last line)."""

    kind: str
    """Always ``"rollback"``."""
    checkpoint: str | None
    """The checkpoint's name, or null for the start of the run."""
    checkpoint_seq: int | None
    """The checkpoint record's seq."""
    reason: str
    """Why the run was rolled back."""
    by: str
    """``sdk``, ``supervisor`` or ``user``."""
    failed_step: str | None
    """The step that failed, if one did."""
    pos: int
    """Successful steps before it in the effective history (derived by readers)."""
    seq: int
    """The line's position in the journal."""
    id: str
    """Unique record id."""
    ts: str
    """ISO-8601 UTC time."""


class ForkRecord(TypedDict, total=False):
    """``fork``: the run was forked from another run's history (the first lines of a fork's journal)."""

    kind: str
    """Always ``"fork"``."""
    origin: dict[str, Any]
    """Where the fork was made: ``{run_dir, run_id, seq, id}`` of the origin's record."""
    records: int
    """How many records were copied from the origin's effective history."""
    skipped_bad_lines: int
    """Bad lines of the origin left out (they stay in the original, shown by ``log``)."""
    pos: int
    """Successful steps before it in the effective history (derived by readers)."""
    seq: int
    """The line's position in the journal."""
    id: str
    """Unique record id."""
    ts: str
    """ISO-8601 UTC time."""


class NoteRecord(TypedDict, total=False):
    """``note``: a message for the reader (changed inputs, a damaged line a resume stopped at, ...)."""

    kind: str
    """Always ``"note"``."""
    message: str
    """What happened."""
    pos: int
    """Successful steps before it in the effective history (derived by readers)."""
    seq: int
    """The line's position in the journal."""
    id: str
    """Unique record id."""
    ts: str
    """ISO-8601 UTC time."""
