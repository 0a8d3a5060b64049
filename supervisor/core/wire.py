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

import re

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
BEGIN_KEY = re.compile(rb'\{"kind":"begin",("step":"[^"\\]*(?:\\.[^"\\]*)*","pos":\d+,(?:"attempt":\d+,)?)')
"""A writer begin line's head that its step line repeats after ``{"kind":"step",``: the pairing key."""
TRANSIENT = b'"transient":true'
"""A failed try the SDK retries: it does not close its begin."""
CHANGED_INPUTS = "changed inputs"
"""The ``message`` of the SDK's ``note`` for a step served on resume whose inputs differ from the call's."""
CHANGED_WORD = b'"changed inputs"'
USAGE_WORD = b'"usage"'
"""What a chunk with a model call's token usage holds (one C-speed look before any record is parsed)."""


def writer_kind(line: bytes) -> bytes | None:
    """The kind of a line in the writer's form (it starts with :data:`WRITER` and ends with ``}``), else ``None``."""
    if line.startswith(WRITER) and line.endswith(b"}"):
        end = line.find(b'"', KIND_AT)
        if end > KIND_AT:
            return line[KIND_AT:end]
    return None
