"""The workspace's side of a run for the front ends: which files each record's step changed, and diffs of them.

The supervisor records what changed in the workspace as ``files`` events in ``supervisor.jsonl``
(``docs/workspace.md``): ``during`` is ``step`` (``seq`` the step's begin), ``concurrent`` (``steps``
in flight, ``seq`` the first begin's) or ``between`` (``seq`` the last record's). :class:`FilesIndex`
reads them once (they are few: one per step that changed a file) and answers, for one record, the
events that belong to it: a ``begin`` or ``step`` record gets the events of its step (matched by
``pos``, the attempt and the step's name, after the last rollback before it), any record the
``between`` events that follow it. The timeline's rows ask it for a count (the ``✎N`` mark), the
Files tab and ``files --at`` for the changes.

Diffs read the contents from the run's store (``supervisor.core.workspace``, imported when first used:
the timeline's first screen does not load it).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.workspace import Change, Manifest, Store

__all__ = [
    "FILES_EVENT",
    "NO_WORKSPACE",
    "FileChange",
    "FilesEvent",
    "FilesIndex",
    "RecordFiles",
    "WorkspaceDiff",
    "change_lines",
    "has_workspace",
    "merge",
    "workspace_at",
    "workspace_diff",
]

FILES_EVENT = "files"
"""The ``event`` of a ``supervisor.jsonl`` line that records changed files."""

OP_MARK = {"created": "+", "changed": "~", "deleted": "-"}
"""One character for an operation, as the state diff marks its paths."""

NO_WORKSPACE = "has no workspace: start it with supervise --workspace PATH or Run.open(workspace=...)"
"""What a run without a workspace is told (after its name)."""

FLAGS = {
    "too_large": "over the workspace's per-file size cap: its content was not kept (no diff)",
    "unreadable": "unreadable when seen (permissions): its content was not kept (no diff)",
    "not_stored": "its content could not be stored (the run directory's disk): no diff",
}
"""A change's flags (``files`` events), and what the Files tab says instead of a diff."""

MAX_DIFF_LINES = 400
"""Lines of one file's diff shown before the rest is cut (a rewritten 10 MB file stays readable)."""


@dataclass(frozen=True, slots=True)
class FileChange:
    """One path of a ``files`` event: what happened to it, and the contents before and after (SHA-256s)."""

    path: str
    op: str
    before: str | None
    after: str | None
    flag: str | None = None
    """Why the content after is not kept: ``too_large`` (over the per-file cap), ``unreadable``, ``not_stored``."""
    link: str | None = None
    """The text of the link the path is after the change (a symbolic link, never followed)."""

    @property
    def mark(self) -> str:
        return OP_MARK.get(self.op, "?")

    @classmethod
    def read(cls, c: dict[str, Any]) -> FileChange:
        """One change of a ``files`` event (its ``path`` a string)."""
        flag = next((f for f in FLAGS if c.get(f) is True), None)
        link = c.get("link") if isinstance(c.get("link"), str) else None
        return cls(str(c["path"]), str(c.get("op") or "changed"), _sha(c.get("before")), _sha(c.get("after")), flag, link)


@dataclass(frozen=True, slots=True)
class FilesEvent:
    """A ``files`` event, read: ``steps`` are the ``(step, pos)`` in flight (none between steps)."""

    seq: int
    during: str
    attempt: int | None
    steps: tuple[tuple[str, int], ...]
    changes: tuple[FileChange, ...]
    ts: str = ""

    @classmethod
    def read(cls, ev: dict[str, Any]) -> FilesEvent | None:
        """The event of a ``supervisor.jsonl`` line, ``None`` if it is no well-formed ``files`` event."""
        seq = ev.get("seq")
        if ev.get("event") != FILES_EVENT or type(seq) is not int or not isinstance(ev.get("changes"), list):
            return None
        during = str(ev.get("during") or "between")
        steps: list[tuple[str, int]] = []
        if during == "step" and type(ev.get("pos")) is int:
            steps.append((str(ev.get("step") or ""), ev["pos"]))
        elif during == "concurrent" and isinstance(ev.get("steps"), list):
            steps += [(str(s.get("step") or ""), s["pos"]) for s in ev["steps"] if isinstance(s, dict) and type(s.get("pos")) is int]
        changes = tuple(FileChange.read(c) for c in ev["changes"] if isinstance(c, dict) and isinstance(c.get("path"), str))
        att = ev.get("attempt")
        return cls(seq, during, att if type(att) is int else None, tuple(steps), changes, str(ev.get("ts") or ""))

    def describe(self) -> str:
        """When the change happened, in words: ``step edit:app #12``, ``between steps``, ``concurrent: ...``."""
        if self.during == "step" and self.steps:
            name, pos = self.steps[0]
            return f"step {name} #{pos}"
        if self.during == "concurrent":
            return "concurrent: " + ", ".join(f"{n} #{p}" for n, p in self.steps)
        return "between steps"


def _sha(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def merge(changes: Iterable[FileChange]) -> list[FileChange]:
    """Several events' changes folded into one per path (the first ``before``, the last ``after``), by path.
    A file created and deleted again in between is left out: nothing of it remains."""
    first: dict[str, FileChange] = {}
    last: dict[str, FileChange] = {}
    for c in changes:
        first.setdefault(c.path, c)
        last[c.path] = c
    out: list[FileChange] = []
    for path in sorted(first):
        a, b = first[path], last[path]
        if a is b:
            out.append(a)
            continue
        existed, exists = a.op != "created", b.op != "deleted"
        if not existed and not exists:
            continue
        op = "created" if not existed else "deleted" if not exists else "changed"
        out.append(FileChange(path, op, a.before, b.after, b.flag, b.link))
    return out


@dataclass(slots=True)
class RecordFiles:
    """The ``files`` events that belong to one record: its step's (or steps' in flight with it) and the
    changes made after it, between steps."""

    step: list[FilesEvent] = field(default_factory=list)
    between: list[FilesEvent] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.step or self.between)

    def paths(self) -> int:
        """How many distinct paths changed (the row's mark)."""
        return len({c.path for ev in (*self.step, *self.between) for c in ev.changes})

    def concurrent(self) -> list[FilesEvent]:
        """The step's events whose changes could not be told apart from another step's."""
        return [ev for ev in self.step if ev.during == "concurrent"]


class FilesIndex:
    """The ``files`` events of a run, indexed by the records they belong to (built whenever the events are
    read again; a row asks :meth:`count`, cached per seq)."""

    def __init__(self, events: Iterable[dict[str, Any]] = ()) -> None:
        self.events: list[FilesEvent] = [fe for ev in events if ev.get("event") == FILES_EVENT and (fe := FilesEvent.read(ev))]
        self._between: dict[int, list[FilesEvent]] = {}
        self._by_pos: dict[int, list[FilesEvent]] = {}
        for fe in self.events:
            if fe.during == "between" or not fe.steps:
                self._between.setdefault(fe.seq, []).append(fe)
            for _name, pos in fe.steps:
                self._by_pos.setdefault(pos, []).append(fe)
        self._counts: dict[int, int] = {}

    def __bool__(self) -> bool:
        return bool(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def of_record(self, seq: int, rec: Any, rollbacks: Sequence[int] = ()) -> RecordFiles:
        """The events of the record at ``seq`` (``rec``: the record, for a step's ``pos``, ``attempt`` and name).

        A step's events: those naming its ``pos`` (and its name and attempt when both sides have them) at or
        before its seq and after the last rollback before it (``rollbacks``, sorted): after a rollback the
        same positions run again."""
        out = RecordFiles(between=list(self._between.get(seq, ())))
        if not isinstance(rec, dict) or rec.get("kind", "step") not in ("step", "begin"):
            return out
        pos = rec.get("pos")
        cands = self._by_pos.get(pos) if type(pos) is int else None
        if not cands:
            return out
        i = bisect.bisect_left(rollbacks, seq) - 1
        low = rollbacks[i] if i >= 0 else -1
        name = rec.get("step")
        att = rec.get("attempt")
        for fe in cands:
            if not low < fe.seq <= seq:
                continue
            if type(att) is int and fe.attempt is not None and fe.attempt != att:
                continue
            if isinstance(name, str) and not any(p == pos and (not n or n == name) for n, p in fe.steps):
                continue
            out.step.append(fe)
        return out

    def count(self, seq: int, rec: Any, rollbacks: Sequence[int] = ()) -> int:
        """How many distinct paths the record's step (and what followed it between steps) changed; cached."""
        if not self.events:
            return 0
        n = self._counts.get(seq)
        if n is None:
            if len(self._counts) > 8192:
                self._counts.clear()
            n = self._counts[seq] = self.of_record(seq, rec, rollbacks).paths()
        return n


# ---------------------------------------------------------------------------------------------- diffs
def has_workspace(run_dir: Path) -> bool:
    """Whether the run declared a workspace (``run.json``) or holds snapshots of one."""
    from ..core import rundir, workspace

    try:
        if workspace.settings_of(run_dir) is not None:
            return True
    except OSError:
        return False
    return (run_dir / rundir.WORKSPACE / "snapshots.jsonl").is_file()


def change_lines(store: Store, fc: FileChange | Change, *, limit: int = MAX_DIFF_LINES) -> list[str]:
    """The unified diff of a change (``workspace.text_diff``), cut at ``limit`` lines; a file over the size
    cap or a content missing from the store says so in one line instead."""
    from ..core import workspace
    from ..errors import SupervisorError

    if isinstance(fc, FileChange):
        if fc.flag is not None:
            return [FLAGS.get(fc.flag, fc.flag)]
        if fc.link is not None:
            return [f"now a link to {fc.link}"]
        if fc.op == "deleted" and fc.before is None:
            return ["a link or a file not read before (no content to show)"]
        change = workspace.Change(
            fc.path, fc.op,
            workspace.Entry("f", sha256=fc.before) if fc.before else None,
            workspace.Entry("f", sha256=fc.after) if fc.after else None,
        )
    else:
        change = fc
    try:
        lines = workspace.text_diff(store, change)
    except (SupervisorError, OSError) as e:
        return [f"no diff: {e}"]
    if len(lines) > limit:
        lines = [*lines[:limit], f"… {len(lines) - limit} more lines"]
    return lines


def workspace_at(run_dir: Path, seq: int | None) -> Manifest:
    """The workspace as of journal seq ``seq`` on the effective path (``workspace.in_effect``); ``seq < 0``:
    the ``start`` snapshot; ``None``: the workspace as it is now (``workspace.scan``: read, nothing stored).
    ``WorkspaceError`` when there is none to show."""
    from ..core import workspace
    from ..errors import WorkspaceError

    if seq is None:
        settings = workspace.settings_of(run_dir)
        if settings is None:
            raise WorkspaceError(f"{run_dir} {NO_WORKSPACE}")
        return workspace.scan(settings)
    if seq < 0:
        ref = workspace.snapshot_at_checkpoint(run_dir, None)
        if ref is None:
            raise WorkspaceError(f"{run_dir} has no snapshot of the workspace at its start")
        return workspace.Store(run_dir).manifest(ref.snapshot)
    man = workspace.in_effect(run_dir, seq)
    if man is None:
        raise WorkspaceError(f"no snapshot of the workspace at or before #{seq} (the workspace was declared later)")
    return man


@dataclass(slots=True)
class WorkspaceDiff:
    """The workspace at one point against another: the changes, their summary and each one's diff lines."""

    changes: list[Change]
    summary: str
    lines: list[list[str]]


def workspace_diff(run_dir: Path, a: int | None, b: int | None, *, limit: int = MAX_DIFF_LINES) -> WorkspaceDiff:
    """:func:`workspace_at` ``a`` against ``b`` (``None``: now), with the text diff of each changed file
    (the current contents read from the workspace itself when a side is now: they are not in the store)."""
    from ..core import workspace

    ma = workspace_at(run_dir, a)
    mb = workspace_at(run_dir, b)
    changes = workspace.diff(ma, mb)
    store: Store = workspace.Store(run_dir)
    live = [m for m, side in ((ma, a), (mb, b)) if side is None]
    if live:
        store = _live_store(run_dir, live[0])
    return WorkspaceDiff(changes, workspace.summary(changes), [change_lines(store, c, limit=limit) for c in changes])


def _live_store(run_dir: Path, now: Manifest) -> Store:
    """The run's store, that also gives the contents of the files of ``now`` (a scan) from the workspace."""
    from ..core import workspace

    by_sha = {e.sha256: path for path, e in now.files.items() if e.t == "f" and e.sha256}
    root = Path(now.root)

    class _Live(workspace.Store):
        def has(self, sha: str) -> bool:
            return sha in by_sha or super().has(sha)

        def get(self, sha: str) -> bytes:
            path = by_sha.get(sha)
            if path is not None and not super().has(sha):
                return (root / path).read_bytes()
            return super().get(sha)

    return _Live(run_dir)
