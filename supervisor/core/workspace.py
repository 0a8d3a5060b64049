"""The run's workspace: the directory the agent works in, kept with the run's state as snapshots.

A snapshot is taken at every checkpoint (just before its record), of the ``start`` of a run, and of what a
rollback replaces (``abandoned``); a rollback's restore makes the workspace equal to its target's snapshot;
a fork materialises one elsewhere. The store and its format are in :mod:`.workspace_store`, the ignore
rules in :mod:`.workspace_ignore`; the user-facing contract is docs/workspace.md.

Cost: a snapshot stats every file once and reads only the files whose size or mtime changed since the
newest snapshot (or that changed too close to it to tell: git's racy-clean rule), so it is proportional to
what changed. Crash safety: objects, then the manifest, are durable before the index line that commits them,
and a ``checkpoint``/``abandoned`` line counts only once its journal record exists (:func:`committed`).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import WorkspaceError
from . import rundir
from .events import read_events
from .history import Fold
from .journal_reader import JournalReader
from .records import Record
from .times import ts_ns
from .workspace_apply import Change, apply_changes, check_paths, diff, summary, text_diff, umask
from .workspace_ignore import DEFAULTS, GITIGNORE, Matcher, Rules
from .workspace_store import Entry, Manifest, Pending, SnapshotRef, Store, hash_fd, link_or_copy, store_file

__all__ = [
    "DEFAULT_IGNORE", "MAX_BYTES", "MAX_FILE", "Change", "Entry", "Manifest", "Settings", "SnapshotRef", "Store",
    "committed", "copy_objects", "declare", "diff", "finish_rollback", "ignored", "in_effect", "materialize",
    "pending_restore", "prepare_rollback", "restore", "scan", "settings_of", "snapshot_at_checkpoint", "summary",
    "take", "text_diff", "write_manifest",
]

DEFAULT_IGNORE: tuple[str, ...] = DEFAULTS
"""Always ignored (with virtual environments, a directory holding ``pyvenv.cfg``, and the run directory)."""
MAX_FILE = 50 * 1024 * 1024
MAX_BYTES = 1024 * 1024 * 1024
_MB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """A declared workspace: its root (absolute, resolved), the extra ignore globs and the caps."""

    root: Path
    ignore: tuple[str, ...] = ()
    max_file: int = MAX_FILE
    max_bytes: int = MAX_BYTES

    def to_json(self) -> dict[str, Any]:
        return {"root": str(self.root), "ignore": list(self.ignore), "max_file": self.max_file,
                "max_bytes": self.max_bytes}

    @classmethod
    def from_json(cls, d: Any) -> Settings:
        """Settings from ``run.json``'s ``"workspace"``; :class:`WorkspaceError` on a malformed value."""
        where = 'run.json\'s "workspace"'
        if not isinstance(d, dict) or not isinstance(d.get("root"), str) or not os.path.isabs(d["root"]):
            raise WorkspaceError(f'{where} is {d!r}, not an object with an absolute "root"; correct or remove it')
        ignore = d.get("ignore", [])
        if not isinstance(ignore, list) or not all(isinstance(g, str) for g in ignore):
            raise WorkspaceError(f'{where}: "ignore" is {ignore!r}, not a list of glob strings; correct it')
        caps = [d.get("max_file", MAX_FILE), d.get("max_bytes", MAX_BYTES)]
        if not all(type(c) is int and c > 0 for c in caps):
            raise WorkspaceError(f'{where}: "max_file" and "max_bytes" must be positive byte counts, not {caps!r}')
        return cls(Path(d["root"]), tuple(ignore), caps[0], caps[1])


def settings_of(run_dir: Path) -> Settings | None:
    """The workspace ``run.json`` declares (``None``: none)."""
    ws = rundir.read_run_json(Path(run_dir)).get("workspace")
    return None if ws is None else Settings.from_json(ws)


def declare(run_dir: Path, settings: Settings) -> None:
    """Write ``settings`` as ``run.json``'s ``"workspace"`` (read, change, atomic rewrite)."""
    rundir.update_run_json(Path(run_dir), workspace=settings.to_json())


def _mb(n: int) -> str:
    """A size as a cap message says it: ``80.0 MB``, ``12.5 KB``, ``300 bytes``."""
    if n >= _MB:
        return f"{n / _MB:.1f} MB"
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{n} bytes"


def _matcher(settings: Settings, run_dir: Path | None) -> Matcher:
    hard: list[str] = []
    if run_dir is not None:
        try:
            rel = Path(run_dir).resolve().relative_to(settings.root)
        except ValueError:
            rel = None
        if rel is not None and rel.parts:
            hard.append(rel.as_posix())
    return Matcher(settings.root, settings.ignore, hard)


def ignored(settings: Settings, run_dir: Path | None = None) -> Callable[[str, bool], bool]:
    """The ignore rule as a predicate over ``(relative path, is_dir)``: the defaults, virtual environments,
    the run directory when inside the root, the ``.gitignore`` files (read as first needed; make a new
    predicate after one changes), ``settings.ignore``. A path inside an ignored directory is ignored."""
    return _matcher(settings, run_dir)


# -- the walk

@dataclass
class _Found:
    """What a walk found: files (with their lstat), links (their text) and empty directories."""

    files: dict[str, os.stat_result]
    links: dict[str, str]
    dirs: list[str]


def _scandir(root: Path, rel_dir: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(root / rel_dir if rel_dir else root) as it:
            return list(it)
    except PermissionError:
        raise WorkspaceError(
            f"cannot read the directory {root / rel_dir} (permission denied); make it readable or ignore it "
            f"with --workspace-ignore '{rel_dir}/'"
        ) from None
    except FileNotFoundError:
        if not rel_dir:
            raise WorkspaceError(f"the workspace {root} does not exist; create it or declare another") from None
        return []  # removed while walked


def _walk(root: Path, matcher: Matcher) -> _Found:
    """Every path of the workspace that is not ignored, one ``lstat`` a file; never follows a link."""
    found = _Found({}, {}, [])
    stack: list[tuple[str, Rules]] = [("", matcher.base_rules)]
    while stack:
        rel_dir, parent_rules = stack.pop()
        entries = _scandir(root, rel_dir)
        if rel_dir and matcher.special(rel_dir, {e.name for e in entries}):
            continue  # a virtual environment, a run directory
        rules = matcher.rules_in(rel_dir, parent_rules) if any(e.name == GITIGNORE for e in entries) else parent_rules
        prefix = rel_dir + "/" if rel_dir else ""
        for e in entries:
            rel = prefix + e.name
            try:
                if e.is_symlink():
                    if not matcher.is_ignored(rel, False, rules):
                        found.links[rel] = os.readlink(e.path)
                elif e.is_dir(follow_symlinks=False):
                    if not matcher.is_ignored(rel, True, rules):
                        stack.append((rel, rules))
                elif e.is_file(follow_symlinks=False) and not matcher.is_ignored(rel, False, rules):
                    found.files[rel] = e.stat(follow_symlinks=False)
                # a FIFO, a socket or a device is no content: left out
            except FileNotFoundError:
                continue  # removed while walked
        if rel_dir and not entries:
            found.dirs.append(rel_dir)  # an empty directory (one that holds only ignored paths is left out, as git does)
    return found


def _check_caps(settings: Settings, found: _Found) -> None:
    """The per-file and per-snapshot caps: :class:`WorkspaceError` naming the file and the cap."""
    total = 0
    for rel, st in sorted(found.files.items()):
        if st.st_size > settings.max_file:
            raise WorkspaceError(
                f"{settings.root / rel} is {_mb(st.st_size)}, over the workspace's per-file cap of "
                f"{_mb(settings.max_file)}; raise it with --workspace-max-file or ignore the file with "
                f"--workspace-ignore '{rel}'"
            )
        total += st.st_size
        if total > settings.max_bytes:
            raise WorkspaceError(
                f"the workspace {settings.root} is over the snapshot cap of {_mb(settings.max_bytes)} at {rel} "
                f"({_mb(total)} so far); raise it with --workspace-max-bytes or ignore large files with "
                "--workspace-ignore GLOB"
            )


def _open_file(settings: Settings, rel: str) -> int:
    """Open a workspace file for reading, never through a link; :class:`WorkspaceError` if it cannot be read."""
    try:
        return os.open(settings.root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except PermissionError:
        raise WorkspaceError(
            f"cannot read {settings.root / rel} (permission denied); make it readable or ignore it with "
            f"--workspace-ignore '{rel}'"
        ) from None
    except OSError as e:
        raise WorkspaceError(
            f"cannot read {settings.root / rel} ({e.strerror}): it changed while the snapshot was taken; take it again"
        ) from None


def _reusable(prev: Manifest | None, rel: str, st: os.stat_result) -> Entry | None:
    """The previous snapshot's entry for a file whose size and mtime are unchanged and whose mtime is older
    than that snapshot (git's racy-clean rule: a file changed in the same clock tick is read again)."""
    if prev is None:
        return None
    e = prev.files.get(rel)
    if e is None or e.t != "f" or e.sha256 is None:
        return None
    # a filesystem that stamps whole seconds (or two) may stamp a later write with an earlier time than ours
    slack = _COARSE if st.st_mtime_ns % 1_000_000_000 == 0 else 0
    if e.size == st.st_size and e.mtime_ns == st.st_mtime_ns and st.st_mtime_ns + slack < prev.taken_ns:
        return e
    return None


_COARSE = 2_000_000_000


def _read_one(settings: Settings, rel: str, pending: Pending | None) -> tuple[str, os.stat_result, bool] | None:
    """Read one file: its sha256, the ``fstat`` it was read with, whether a new object was stored (``pending``:
    store it). ``None``: it is no longer a regular file."""
    fd = _open_file(settings, rel)
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            return None  # replaced by a FIFO or the like while walked
        if pending is not None:
            sha, new = store_file(pending.store, fd, fst.st_size, pending)
            return sha, fst, new
        return hash_fd(fd), fst, False
    except OSError as e:
        raise WorkspaceError(f"cannot read {settings.root / rel} ({e.strerror}); make it readable or "
                             f"ignore it with --workspace-ignore '{rel}'") from None
    finally:
        os.close(fd)


READ_THREADS = 8
"""Files are read, hashed, stored and synced on this many threads when there are many: the syncs overlap."""


def _read_many(settings: Settings, rels: list[str], pending: Pending | None) -> list[Any]:
    """:func:`_read_one` of each path, in order; on several threads when there are more than a few."""
    if len(rels) <= 4:
        return [_read_one(settings, rel, pending) for rel in rels]
    pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="workspace-read")
    try:
        return list(pool.map(lambda rel: _read_one(settings, rel, pending), rels))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # an error: the files not started are not read


def _entries(settings: Settings, found: _Found, prev: Manifest | None, pending: Pending | None
             ) -> tuple[dict[str, Entry], int]:
    """The manifest's entries of what a walk found, and how many objects were stored: a file's hash reused
    from ``prev`` where :func:`_reusable`, else read (and stored, with ``pending``)."""
    files: dict[str, Entry] = {}
    todo: list[str] = []
    for rel, st in found.files.items():
        old = _reusable(prev, rel, st)
        if old is None:
            todo.append(rel)
        else:
            files[rel] = Entry("f", old.sha256, st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    stored = 0
    for rel, got in zip(todo, _read_many(settings, todo, pending), strict=True):
        if got is not None:
            sha, fst, new = got
            stored += new
            files[rel] = Entry("f", sha, fst.st_size, stat.S_IMODE(fst.st_mode), fst.st_mtime_ns)
    for rel, target in found.links.items():
        files[rel] = Entry("l", target=target)
    for rel in found.dirs:
        files[rel] = Entry("d")
    return files, stored


def _fs_now(store: Store) -> int:
    """The filesystem's clock now (a file's mtime set now): what the racy-clean rule compares mtimes with.
    The kernel stamps files from a coarse clock that may lag ``time.time_ns()`` by a tick."""
    store.ensure()
    path = store.tmp_dir / "clock"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, rundir.FILE_MODE)
    try:
        os.utime(fd)
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)


def _sweep(store: Store) -> None:
    """Remove the temporary files of snapshots whose process is gone (killed in the middle): garbage."""
    try:
        names = os.listdir(store.tmp_dir)
    except FileNotFoundError:
        return
    for n in names:
        pid = n.split(".", 1)[0]
        if not n.endswith(".tmp") or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            (store.tmp_dir / n).unlink(missing_ok=True)
        except OSError:
            pass  # alive (another user's: not ours to judge)


def _newest(store: Store, root: Path) -> Manifest | None:
    """The newest snapshot's manifest of this root (committed or not: its hashes are facts), for reuse."""
    for ref in reversed(store.index()):
        try:
            m = store.manifest(ref.snapshot)
        except WorkspaceError:
            continue
        if m.root == str(root):
            return m
    return None


def scan(settings: Settings) -> Manifest:
    """The workspace as it is now, every file hashed, nothing stored (a run directory inside it that declares
    it is left out, as in a snapshot)."""
    taken = time.time_ns()
    found = _walk(settings.root, _matcher(settings, None))
    files, _ = _entries(settings, found, None, None)
    return Manifest(str(settings.root), taken, files)


def _current(settings: Settings, run_dir: Path | None, reuse: Manifest | None) -> Manifest:
    """The workspace now, reusing ``reuse``'s hashes where size and mtime tell (no caps: only compared)."""
    taken = time.time_ns()
    found = _walk(settings.root, _matcher(settings, run_dir))
    files, _ = _entries(settings, found, reuse, None)
    return Manifest(str(settings.root), taken, files)


def take(run_dir: Path, settings: Settings, *, for_: str, seq: int | None, name: str | None = None,
         by: str) -> SnapshotRef:
    """Snapshot the workspace and commit it to the index (see the module's docstring for the cost).

    Caps and unreadable files raise :class:`WorkspaceError` before the index line: a snapshot is whole or
    not taken (objects already written are unnamed garbage)."""
    run_dir = Path(run_dir)
    store = Store(run_dir)
    taken = _fs_now(store)
    _sweep(store)
    prev = _newest(store, settings.root)
    found = _walk(settings.root, _matcher(settings, run_dir))
    _check_caps(settings, found)
    pending = Pending(store)
    files, stored = _entries(settings, found, prev, pending)
    pending.finish()
    manifest = Manifest(str(settings.root), taken, files)
    return _commit(store, manifest, for_=for_, seq=seq, name=name, by=by, stored=stored)


def _commit(store: Store, manifest: Manifest, *, for_: str, seq: int | None, name: str | None, by: str,
            stored: int) -> SnapshotRef:
    snap = store.write_manifest(manifest)
    n_files = sum(1 for e in manifest.files.values() if e.t == "f")
    ref = SnapshotRef(snap, for_, seq, name, n_files, manifest.bytes_total(), stored, rundir.utc_now(), by)
    store.append_index(ref)
    return ref


def write_manifest(run_dir: Path, manifest: Manifest, *, for_: str, seq: int | None, name: str | None,
                   by: str) -> SnapshotRef:
    """Store an already built manifest (its objects in the store: :class:`WorkspaceError` otherwise) and
    append its index line (a fork's ``fork`` snapshot)."""
    store = Store(Path(run_dir))
    missing = [s for s in manifest.objects() if not store.has(s)]
    if missing:
        raise WorkspaceError(f"{store.dir} lacks {len(missing)} object(s) of the manifest (e.g. {missing[0][:12]}); "
                             "copy them first (copy_objects)")
    return _commit(store, manifest, for_=for_, seq=seq, name=name, by=by, stored=0)


# -- what the journal commits

@dataclass
class _Marks:
    """The journal's checkpoint and rollback records, in order (one lazy pass: step lines are not parsed)."""

    records: list[Record]
    checkpoints: dict[int, str | None]
    rollbacks: dict[int, Record]

    def add(self, entries: Iterable[Any]) -> None:
        for e in entries:
            if type(e) is not dict or type(e.get("seq")) is not int:
                continue  # a lazy step line, a damaged line
            kind = e.get("kind")
            if kind == "checkpoint":
                self.records.append(e)
                self.checkpoints[e["seq"]] = e.get("name")
            elif kind == "rollback":
                self.records.append(e)
                self.rollbacks[e["seq"]] = e


_Sig = tuple[tuple[int, int], ...]
_MARKS: dict[Path, tuple[_Sig, _Marks, JournalReader]] = {}
"""The marks of the journals read lately, with their files' (inode, size) and the reader (which goes on from
where it stopped: a journal that only grew is read from there)."""


def _grew(old: _Sig, new: _Sig) -> bool:
    """Whether the journal's files only grew since ``old`` (appends; a rotation renames, keeping the inode)."""
    sizes = dict(new)
    return all(sizes.get(ino, -1) >= size for ino, size in old)


def _journal_marks(run_dir: Path) -> _Marks:
    """:class:`_Marks` of ``run_dir``'s journal: read once, then only what was appended since."""
    from .segments import segment_paths

    key_path = Path(run_dir).resolve()
    sig_list: list[tuple[int, int]] = []
    for p in segment_paths(key_path):
        try:
            st = os.stat(p)
            sig_list.append((st.st_ino, st.st_size))
        except FileNotFoundError:
            continue
    sig = tuple(sig_list)
    cached = _MARKS.get(key_path)
    if cached is not None and cached[0] == sig:
        return cached[1]
    if cached is not None and cached[0] and _grew(cached[0], sig):
        marks, reader = cached[1], cached[2]
        marks.add(reader.read_new())
    else:
        marks, reader = _Marks([], {}, {}), JournalReader(key_path)
        if sig:
            marks.add(reader.iter_entries(lazy=True))
    if len(_MARKS) > 16 and key_path not in _MARKS:
        _MARKS.clear()
    _MARKS[key_path] = (sig, marks, reader)
    return marks


def committed(run_dir: Path) -> list[SnapshotRef]:
    """The index lines that are committed, in file order: ``start`` and ``fork`` always, ``checkpoint`` and
    ``abandoned`` only if the journal holds a record of that kind at that seq (for a checkpoint, that name)."""
    refs = Store(Path(run_dir)).index()
    if not any(r.for_ in ("checkpoint", "abandoned") for r in refs):
        return refs
    marks = _journal_marks(Path(run_dir))
    out = []
    for r in refs:
        if r.for_ == "checkpoint":
            if r.seq is None or r.seq not in marks.checkpoints or marks.checkpoints[r.seq] != r.name:
                continue
        elif r.for_ == "abandoned" and (r.seq is None or r.seq not in marks.rollbacks):
            continue
        out.append(r)
    return out


def _pick(refs: list[SnapshotRef], for_: str, seq: int | None) -> SnapshotRef | None:
    """The last line of ``refs`` for that kind and seq (a line retaken after a crash comes later)."""
    for r in reversed(refs):
        if r.for_ == for_ and (for_ == "start" or r.seq == seq):
            return r
    return None


def snapshot_at_checkpoint(run_dir: Path, checkpoint_seq: int | None) -> SnapshotRef | None:
    """The committed snapshot of the checkpoint record at ``checkpoint_seq`` (``None``: the ``start`` one)."""
    refs = committed(Path(run_dir))
    return _pick(refs, "start", None) if checkpoint_seq is None else _pick(refs, "checkpoint", checkpoint_seq)




# -- the workspace at a point of the effective history

def _effective_cuts(marks: _Marks, seq: int) -> tuple[Fold, list[tuple[int, int]]]:
    """The journal's checkpoints and rollbacks up to ``seq`` folded: the effective ones, and the cut ranges
    ``(target seq, rollback seq)`` whose records in between are abandoned (-1: the start)."""
    fold = Fold(keep=False)
    for r in marks.records:
        if r["seq"] > seq:
            break
        fold.add(r)
    return fold, list(fold.cuts)


def _base(run_dir: Path, fold: Fold, cuts: list[tuple[int, int]]) -> tuple[int, SnapshotRef, bool] | None:
    """The newest point on the effective path with a snapshot: ``(its seq, the snapshot, is a checkpoint)``.
    A rollback's point is its own seq with its target's snapshot (or, for a target without one, the
    ``abandoned`` snapshot: the restore left the files as they were)."""
    refs = committed(run_dir)
    targets = {rb: t for t, rb in cuts}
    points: list[tuple[int, str, int]] = [(int(c["seq"]), "cp", int(c["seq"])) for c in fold.checkpoints]
    points += [(int(r["seq"]), "rb", targets[int(r["seq"])]) for r in fold.rollbacks if int(r["seq"]) in targets]
    for seq, kind, target in sorted(points, reverse=True):
        if kind == "cp":
            ref = _pick(refs, "checkpoint", seq)
        else:
            ref = _pick(refs, "start", None) if target < 0 else _pick(refs, "checkpoint", target)
            ref = ref or _pick(refs, "abandoned", seq)
        if ref is not None:
            return seq, ref, kind == "cp"
    start = _pick(refs, "start", None)
    return None if start is None else (-1, start, False)


def _applies(ev: dict[str, Any], seq: int, point: int, cuts: list[tuple[int, int]], after_ns: int | None) -> bool:
    """Whether a ``files`` event changes the workspace between the base at ``point`` and ``seq``."""
    s = ev.get("seq")
    if type(s) is not int or s > seq or any(t < s < rb for t, rb in cuts):
        return False  # later, or on an abandoned branch
    if s > point or (s == point and seq > point):
        return True  # after the point's record ("between" changes carry the seq of the record before them)
    # a concurrent step begun before a checkpoint may change files after its snapshot was taken
    return after_ns is not None and s < point and (ts_ns(ev.get("ts")) or 0) > after_ns


def _apply_event(store: Store, files: dict[str, Entry], ch: Any) -> None:
    if not isinstance(ch, dict) or not isinstance(ch.get("path"), str):
        return
    path, old = ch["path"], files.get(ch["path"])
    if ch.get("op") == "deleted":
        files.pop(path, None)
    elif isinstance(ch.get("link"), str):
        files[path] = Entry("l", target=ch["link"])
    else:
        sha = ch.get("after") if isinstance(ch.get("after"), str) else None
        try:
            size = os.stat(store.object_path(sha)).st_size if sha else int(ch.get("size") or 0)
        except (OSError, ValueError, TypeError):
            size = 0
        given = ch.get("mode")
        mode = given if isinstance(given, int) else (old.mode if old is not None else 0o644)
        files[path] = Entry("f", sha, size, mode, 0)


def in_effect(run_dir: Path, seq: int) -> Manifest | None:
    """The workspace as of journal seq ``seq`` on the effective path: the newest committed snapshot of a
    checkpoint at or before ``seq`` (a rollback counts as its target's), then the ``files`` events after it
    up to ``seq`` applied. ``None``: no snapshot to start from. At a checkpoint's own seq: its snapshot."""
    run_dir = Path(run_dir)
    fold, cuts = _effective_cuts(_journal_marks(run_dir), seq)
    base = _base(run_dir, fold, cuts)
    if base is None:
        return None
    point, ref, is_cp = base
    store = Store(run_dir)
    m = store.manifest(ref.snapshot)
    files = dict(m.files)
    after_ns = m.taken_ns if is_cp else None
    for ev in read_events(run_dir):
        if ev.get("event") == "files" and _applies(ev, seq, point, cuts, after_ns):
            for ch in ev.get("changes") or ():
                _apply_event(store, files, ch)
    return Manifest(m.root, m.taken_ns, files)


# -- writing snapshots into directories

def restore(run_dir: Path, snapshot: str, root: Path, settings: Settings) -> list[Change]:
    """Make ``root`` equal to the snapshot (ignored paths never touched, nothing outside ``root`` written or
    followed) and return what it did. Only what differs is written: files whose size and mtime match the
    snapshot (and are older than it) are not even read."""
    store = Store(Path(run_dir))
    target = store.manifest(snapshot)
    check_paths(target, f"the snapshot {snapshot[:12]}")
    here = Settings(Path(root), settings.ignore, settings.max_file, settings.max_bytes)
    if not os.path.lexists(root):
        Path(root).mkdir(parents=True)  # a workspace removed meanwhile is made again
    match = _matcher(here, Path(run_dir))
    current = _current(here, Path(run_dir), target)
    changes = [c for c in diff(current, target, umask()) if c.after is None or not match(c.path, c.after.t == "d")]
    apply_changes(store, Path(root), changes, target, sync=True)
    return changes


def _has_entries(d: Path) -> bool:
    with os.scandir(d) as it:
        return any(True for _ in it)


def materialize(run_dir: Path, manifest: Manifest, to: Path) -> None:
    """Write ``manifest``'s files (objects from ``run_dir``'s store) into ``to``, which must not exist or be
    an empty directory (:class:`WorkspaceError` otherwise)."""
    to = Path(to)
    check_paths(manifest, "the manifest")
    if to.is_symlink() or (to.exists() and (not to.is_dir() or _has_entries(to))):
        raise WorkspaceError(f"{to} is not an empty directory: a snapshot is only materialised into a new or "
                             "empty directory; choose another path (or empty it)")
    to.mkdir(parents=True, exist_ok=True)
    changes = [Change(p, "created", None, e) for p, e in manifest.files.items()]
    apply_changes(Store(Path(run_dir)), to, changes, manifest, sync=False)


def copy_objects(src_run: Path, dst_run: Path, manifest: Manifest) -> None:
    """Put ``manifest``'s objects into ``dst_run``'s store (hard links where possible, else copies)."""
    src, dst = Store(Path(src_run)), Store(Path(dst_run))
    dst.ensure()
    fan: set[Path] = set()
    for sha in sorted(manifest.objects()):
        if dst.has(sha):
            continue
        if not src.has(sha):
            raise WorkspaceError(f"{src.dir}: the object {sha[:12]} is missing; the snapshot cannot be copied")
        d = dst.object_path(sha).parent
        d.mkdir(mode=rundir.DIR_MODE, exist_ok=True)
        link_or_copy(src.object_path(sha), dst.object_path(sha))
        fan.add(d)
    for d in fan:
        rundir.fsync_dir(d)
    if fan:
        rundir.fsync_dir(dst.objects_dir)


# -- rollbacks

def prepare_rollback(run_dir: Path, rollback_seq: int, *, by: str) -> SnapshotRef | None:
    """Before a rollback record is appended at ``rollback_seq``: take the ``abandoned`` snapshot of the
    workspace it replaces (``None``: no workspace declared)."""
    settings = settings_of(Path(run_dir))
    if settings is None:
        return None
    return take(Path(run_dir), settings, for_="abandoned", seq=rollback_seq, by=by)


def _last_rollback(marks: _Marks) -> tuple[Record, int | None] | None:
    """The journal's last rollback record and the checkpoint seq it returns to (-1: the start; ``None``: it
    names no checkpoint of the effective history)."""
    if not marks.rollbacks:
        return None
    fold = Fold(keep=False)
    for r in marks.records:
        fold.add(r)
    last = marks.rollbacks[max(marks.rollbacks)]
    return last, fold.last_target


def finish_rollback(run_dir: Path) -> str | None:
    """Finish the restore of the journal's last rollback if ``restored.json`` is behind it: make the workspace
    equal to the target's snapshot, record it, and return a line to print. A target without a snapshot gives
    a warning and touches nothing. ``None``: nothing pending, or no workspace. Idempotent."""
    run_dir = Path(run_dir)
    settings = settings_of(run_dir)
    if settings is None:
        return None
    last = _last_rollback(_journal_marks(run_dir))
    store = Store(run_dir)
    done = store.read_restored()
    if last is None or (done is not None and done >= int(last[0]["seq"])):
        return None
    rec, target = last
    rb_seq = int(rec["seq"])
    if not store.index():  # a rollback from before the workspace was declared: nothing to restore, ever
        store.write_restored(rb_seq)
        return None
    label = "the start of the run" if target == -1 else f"checkpoint {rec.get('checkpoint')!r}"
    if target is None:
        store.write_restored(rb_seq)
        return (f"warning: the rollback at seq {rb_seq} names no checkpoint of the effective history: "
                f"no files are restored; {settings.root} is left as it is")
    ref = snapshot_at_checkpoint(run_dir, None if target < 0 else target)
    if ref is None:
        store.write_restored(rb_seq)
        return (f"warning: {label} has no workspace snapshot (taken before the workspace was declared): "
                f"its files are not restored; {settings.root} is left as it is")
    if _pick(committed(run_dir), "abandoned", rb_seq) is None:
        take(run_dir, settings, for_="abandoned", seq=rb_seq, by="supervisor")  # nothing is lost
    changes = restore(run_dir, ref.snapshot, settings.root, settings)
    store.write_restored(rb_seq)
    return f"restored the workspace to {label}: {summary(changes)}"


def pending_restore(run_dir: Path, checkpoint_seq: int | None) -> list[Change] | None:
    """What a rollback to that checkpoint (``None``: the start) would change in the workspace now, as
    :func:`restore` would report it; ``None``: no workspace, or no snapshot for that checkpoint."""
    run_dir = Path(run_dir)
    settings = settings_of(run_dir)
    if settings is None:
        return None
    ref = snapshot_at_checkpoint(run_dir, checkpoint_seq)
    if ref is None:
        return None
    target = Store(run_dir).manifest(ref.snapshot)
    match = _matcher(settings, run_dir)
    current = _current(settings, run_dir, target)
    return [c for c in diff(current, target, umask()) if c.after is None or not match(c.path, c.after.t == "d")]
