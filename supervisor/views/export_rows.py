"""Write timeline rows to a JSONL file (no Textual): the records as the journal holds them, the
supervisor rows as ``supervisor.jsonl`` holds them, in row order.

The journal is read forward once (``read_stream``), so exporting a million filtered
rows holds one chunk at a time. The file is written beside its final name, synced and
renamed into place: a crash never leaves half an export under that name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ..core.records import parse_line
from ..core.segments import read_stream, split_lines

Item = tuple[str, Any]
"""``("rec", seq)`` or ``("event", event dict)``, in row order (records' seqs ascending)."""


def merge_rows(seqs: Sequence[int], events: Sequence[tuple[int, dict[str, Any]]]) -> list[Item]:
    """Rows in order from the records' ``seqs`` (ascending) and ``(i, event)`` pairs: the event comes before ``seqs[i]``
    (``i == len(seqs)``: after the last), in the order given (built in the worker: a million rows take a moment)."""
    out: list[Item] = []
    k = 0
    for i, ev in events:
        out.extend(("rec", s) for s in seqs[k:i])
        out.append(("event", ev))
        k = max(k, i)
    out.extend(("rec", s) for s in seqs[k:])
    return out


@dataclass
class Exported:
    """What an export wrote."""

    path: Path
    rows: int
    skipped: int = 0
    """Damaged journal lines left out (they are not JSON)."""


def _json_line(raw: bytes) -> bytes | None:
    """The line as JSON: as it is when it is a JSON object, else its record after a text prefix; ``None``: damaged."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        return raw
    try:
        return orjson.dumps(parse_line(raw))
    except ValueError:
        return None


def _write_items(out: BinaryIO, source: Path, items: Sequence[Item], cancelled: Callable[[], bool] | None) -> tuple[int, int]:
    rows = skipped = 0
    k = 0
    n = len(items)

    def events() -> None:
        nonlocal k, rows
        while k < n and items[k][0] == "event":
            out.write(orjson.dumps(items[k][1], default=str) + b"\n")
            rows += 1
            k += 1

    events()
    if k < n:
        for c in read_stream(source):
            first = c.region.first_seq
            if items[k][1] >= first + c.count():
                continue  # nothing wanted in this chunk: its lines are not split
            lines = split_lines(c.data)
            while k < n:
                kind, seq = items[k]
                if kind == "event":
                    events()
                    continue
                if seq >= first + len(lines):
                    break
                if seq >= first:
                    line = _json_line(lines[seq - first])
                    if line is None:
                        skipped += 1
                    else:
                        out.write(line + b"\n")
                        rows += 1
                k += 1
            if k >= n or (cancelled is not None and cancelled()):
                break
    events()
    return rows, skipped


def export_rows(source: Path, items: Sequence[Item], dest: Path, cancelled: Callable[[], bool] | None = None) -> Exported:
    """Write ``items`` to ``dest`` (replacing it) atomically; raise ``OSError`` as the file system does."""
    dest = dest.expanduser()
    parent = dest.parent if str(dest.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as out:
            rows, skipped = _write_items(out, source, items, cancelled)
            out.flush()
            os.fsync(out.fileno())
        # mode 0600 as mkstemp made it: the rows may hold what the run directory keeps private
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass  # already renamed or never made: nothing to clean
        raise
    dfd = os.open(parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return Exported(dest.absolute(), rows, skipped)
