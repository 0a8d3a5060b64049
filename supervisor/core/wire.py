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

# --- rest (usage fold): marker words ----------------------------------------------------------
USAGE_MARK = b'"usage"'
"""In every line that has a ``usage`` key (and in some that only mention the word): the usage fold parses only those."""
