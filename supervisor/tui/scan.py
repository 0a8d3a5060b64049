"""Whole-journal passes over raw bytes, at C speed (no Textual): the marker scan and the search.

Neither pass parses every record. The scan counts lines, finds the few records
that navigation and folding need (checkpoints, rollbacks, starts, errors) with
``bytes.find`` and parses only those lines, and remembers *regions*: slices of
the files that start at a line start, with the seq of their first line. The
search then reads region by region (no copying across chunk edges) and counts
newlines only in regions that hold a match.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..core.journal import JournalReader, _committed_size, segment_paths
from ..core.records import Record, parse_line

CHUNK = 4 * 1024 * 1024
# the compact form this package (orjson) writes is found with bytes.find; other spacing with a regex
_FAST = (b'"kind":"checkpoint"', b'"kind":"rollback"', b'"kind":"start"', b'"error":')
_SPACED = (b'"kind": ', b'"kind" :', b'"error" ', b'"error": ')
_SLOW_RE = re.compile(rb'"kind"\s*:\s*"(?:checkpoint|rollback|start)"|"error"\s*:')


@dataclass(slots=True)
class Marker:
    """A record that navigation or folding needs: seq, kind and the few fields used."""

    seq: int
    kind: str  # checkpoint, rollback, start, error
    name: str = ""
    file: str = ""
    attempt: int | None = None
    target_seq: int | None = None  # rollback: the checkpoint it returns to (-1: the start)


@dataclass(frozen=True, slots=True)
class Region:
    """Bytes ``start``..``end`` of ``path``: whole lines, the first of them at ``first_seq``."""

    path: Path
    start: int
    end: int
    first_seq: int
    ino: int = 0
    """The file's inode: a rotation renames ``journal.jsonl``, the inode finds it again."""


@dataclass
class ScanResult:
    """What a full scan found (built in a worker thread, handed to the model)."""

    count: int = 0
    regions: list[Region] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    steps: int = 0
    reader: JournalReader | None = None
    """A reader indexed in the worker too: the model swaps it in (indexing 290 MB takes a second)."""


def add_marker(rec: Record, seq: int, markers: list[Marker]) -> None:
    """Append a marker for ``rec`` if it is one of the kinds navigation needs."""
    kind = rec.get("kind", "step")
    if kind == "checkpoint":
        markers.append(Marker(seq, "checkpoint", str(rec.get("name") or ""), str(rec.get("file") or "")))
    elif kind == "rollback":
        markers.append(Marker(seq, "rollback", str(rec.get("checkpoint") or ""), target_seq=rec.get("checkpoint_seq")))
    elif kind == "start":
        att = rec.get("attempt")
        markers.append(Marker(seq, "start", attempt=att if isinstance(att, int) else None))
    elif kind == "step" and rec.get("error") is not None:
        markers.append(Marker(seq, "error", str(rec.get("step") or "")))


def _find_all(data: bytes, needle: bytes) -> Iterator[int]:
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + len(needle))


def scan_bytes(data: bytes, base_seq: int, out: ScanResult) -> int:
    """Scan whole lines in ``data`` (the first at ``base_seq``); return the number of lines."""
    lines = data.count(b"\n")
    out.steps += data.count(b'"kind":"step"')
    if data.count(b'"kind"') < lines:
        # records without a kind are steps (the minimal format): count the lines that look like objects
        out.steps += sum(1 for ln in data.split(b"\n") if ln and b'"kind"' not in ln and b"{" in ln)
    hits: list[int] = []
    for needle in _FAST:
        hits.extend(_find_all(data, needle))
    # one writer, one style: the spacing of a region's first 64 kB decides whether the regex is needed
    head = data[:65536]
    if any(s in head for s in _SPACED):
        hits.extend(m.start() for m in _SLOW_RE.finditer(data))
    if not hits:
        return lines
    hits.sort()
    seq = base_seq
    pos = 0  # start of the line at ``seq``
    for h in hits:
        start = data.rfind(b"\n", 0, h) + 1
        if start < pos:
            continue  # a second hit in a line already handled
        seq += data.count(b"\n", pos, start)
        end = data.find(b"\n", h)
        end = len(data) if end < 0 else end
        pos = end + 1
        try:
            rec = parse_line(data[start:end])
        except ValueError:
            seq += 1
            continue
        add_marker(rec, seq, out.markers)
        seq += 1
    return lines


def iter_new_regions(path: Path, start: int, first_seq: int) -> Iterator[tuple[Region, bytes]]:
    """Regions of whole lines of ``path`` from byte ``start`` to its committed end, with their bytes."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        st = os.fstat(f.fileno())
        end = _committed_size(f.fileno(), st.st_size)
        f.seek(start)
        pos = start
        carry = b""
        seq = first_seq
        while pos + len(carry) < end:
            chunk = f.read(min(CHUNK, end - pos - len(carry)))
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data  # a line longer than a chunk: read on
                continue
            carry = data[cut:]
            body = data[:cut] if cut < len(data) else data
            yield Region(path, pos, pos + cut, seq, st.st_ino), body
            seq += body.count(b"\n")
            pos += cut


def scan_journal(source: Path, cancelled: Callable[[], bool] | None = None, *, index: bool = True) -> ScanResult:
    """One pass over the raw bytes (count lines, find markers, record regions); then index a reader."""
    res = ScanResult()
    for p in segment_paths(source):
        for region, data in iter_new_regions(p, 0, res.count):
            res.count += scan_bytes(data, res.count, res)
            res.regions.append(region)
            if cancelled is not None and cancelled():
                return res
    if index:
        reader = JournalReader(source)
        try:
            reader.index()
        except OSError:
            return res
        res.reader = reader
    return res


def _current_paths(regions: list[Region]) -> dict[int, Path]:
    """Where each region's file is now (by inode), after any rotation."""
    out: dict[int, Path] = {}
    for d in {r.path.parent for r in regions}:
        for p in segment_paths(d) if (d / "journal.jsonl").exists() or any(d.glob("journal.*.jsonl")) else []:
            try:
                out[os.stat(p).st_ino] = p
            except OSError:
                continue
    return out


def search_regions(
    regions: list[Region], query: str, cancelled: Callable[[], bool] | None = None, limit: int = 1_000_000
) -> list[int]:
    """Seqs of the lines whose raw JSON text contains ``query``, region by region.

    Smart case, as in less and vim: a query in lower case matches any case.
    """
    where = _current_paths(regions)
    needle = query.encode()
    fold = needle == needle.lower() and needle != needle.upper()
    hits: list[int] = []
    handle = None
    current: Path | None = None
    try:
        for r in regions:
            path = where.get(r.ino, r.path)
            if path != current:
                if handle is not None:
                    handle.close()
                try:
                    handle = open(path, "rb")
                except FileNotFoundError:
                    handle, current = None, None
                    continue
                current = path
            if handle is None:
                continue
            handle.seek(r.start)
            data = handle.read(r.end - r.start)
            hay = data.lower() if fold else data
            i = hay.find(needle)
            seq, pos = r.first_seq, 0
            while i >= 0:
                start = hay.rfind(b"\n", 0, i) + 1
                seq += hay.count(b"\n", pos, start)
                hits.append(seq)
                pos = hay.find(b"\n", i) + 1
                seq += 1
                if len(hits) >= limit or pos == 0:
                    return hits
                i = hay.find(needle, pos)
            if cancelled is not None and cancelled():
                break
    finally:
        if handle is not None:
            handle.close()
    return hits


def journal_regions(source: Path) -> list[Region]:
    """Regions of the whole journal, for a search before (or without) a scan."""
    out: list[Region] = []
    seq = 0
    for p in segment_paths(source):
        for region, data in iter_new_regions(p, 0, seq):
            out.append(region)
            seq += data.count(b"\n")
    return out


def search_journal(source: Path, query: str, cancelled: Callable[[], bool] | None = None) -> list[int]:
    """Search the whole journal (reads it twice: use ``search_regions`` with a scan's regions)."""
    return search_regions(journal_regions(source), query, cancelled)
