"""What one read of the journal hands from the reading worker to the UI thread (the timeline model's live side).

A worker builds :class:`Changes` off the UI thread with the :class:`LiveSide` it took; ``TimelineModel.apply``
takes them on the UI thread and puts the live side back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.journal_reader import Entry, JournalReader
from .scan import Marker, Region, StepPairs
from .timeline_calls import CallsFollower, CallsRead
from .timeline_tree import Facts, StepTree, TreeScan

SHORT_READS = 5
"""Reads in a row that find fewer lines than counted before the journal is taken as cut, not caught mid-rotation."""


@dataclass(slots=True)
class LiveSide:
    """What the reading worker owns between two reads: its reader and how far it has read.

    The UI thread never touches it during a read: ``read_changes`` takes it from a
    one-slot queue and ``apply`` puts it back, after swapping readers (the worker's
    reader, indexed up to the new count, becomes the UI's; the UI's becomes the
    worker's). The two readers are twins (``JournalReader.twin``): they share the
    line offsets, which only grow, so the index is held once.
    """

    gen: int
    reader: JournalReader
    indexed: bool
    count: int
    scan_pos: dict[int, tuple[int, int]] = field(default_factory=dict)  # inode -> (bytes scanned, line number there)
    scanned: int = 0  # lines scanned
    events_size: int = -1
    pairs: StepPairs = field(default_factory=StepPairs)  # begins awaiting their step, across reads
    short: int = 0  # reads in a row that found fewer lines than counted (a rotation half done, or a cut journal)
    calls: CallsFollower = field(default_factory=lambda: CallsFollower(None))  # llm.jsonl, read as far as this
    tree: TreeScan | None = None  # the nesting read so far (once the model wants it)


@dataclass(slots=True)
class Changes:
    """What one read found on disk (built off the UI thread, applied by ``TimelineModel.apply``)."""

    live: LiveSide
    count: int
    deleted: bool = False
    indexed: bool = False
    """The live side's reader was indexed up to ``count``: ``apply`` gives it to the UI."""
    again: bool = False
    """The files were caught in the middle of a rotation: nothing was taken, read again."""
    shrank: str | None = None
    """The journal has fewer lines than were shown, read after read: not a rotation, a cut journal (said once)."""
    new: list[Entry] = field(default_factory=list)
    markers: list[Marker] | None = None
    """Markers from the byte scan (indexed mode); ``None``: take them from ``new``."""
    steps: int = 0
    regions: list[Region] = field(default_factory=list)
    hidden: list[int] = field(default_factory=list)
    """Begins whose step the scan of the new bytes found (their rows fold into the step's)."""
    changed: dict[int, str] = field(default_factory=dict)
    """Changed-inputs notes so far: ``pos`` -> step name."""
    events: list[dict[str, Any]] | None = None
    """All of ``supervisor.jsonl`` when it changed, else ``None``."""
    events_size: int = -1
    calls: CallsRead | None = None
    """The proxy's calls committed since the last read (``None``: none), placed among the records."""
    calls_reset: bool = False
    """``calls`` are every call of the file (the live side started over): they replace those shown."""
    tree: Facts | StepTree | None = None
    """What the read found about the steps' nesting (``None``: nothing, or the tree is not read): the first read of
    it, the whole tree (built in the worker: a million records' tree takes a second to build); then what is new."""
