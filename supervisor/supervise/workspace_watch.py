"""The supervisor's live watch of a run's workspace: which files changed, and when, seen off the agent's path.

The watch runs in the supervisor's process, never in the agent's: ``watchfiles``' Rust watcher (``RustNotify``,
created on the supervisor's thread, so that it watches before the agent starts) and a daemon thread of this
module that turns what it hands over into :class:`Seen` changes: what a path holds now against the path ->
:class:`Known` map kept here (created, changed, deleted; a write that changed nothing is no change), the new
content put in the run's store (synced in groups, :class:`_Objects`), and the interval of time the change can
have happened in (from the file's mtime; for a deletion, from when its event came and its directory's mtime).
A path is looked at twice a second at most (``HOT_S``): what a busy agent does costs the watch little.

The supervisor's thread takes the changes at each journal poll (:meth:`WorkspaceWatch.take`) and attributes
them to steps (``workspace_hooks``): this module never writes an event. Before a restore the watch is kept
quiet (:meth:`WorkspaceWatch.quiet`): the restore's own writes are not changes of any step.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import rundir, workspace
from .persister import is_resource_error

if TYPE_CHECKING:
    from watchfiles._rust_notify import RustNotify

__all__ = ["Known", "Seen", "WorkspaceWatch", "mtime_tolerance_ns"]

DEBOUNCE_MS = 400
"""The longest the Rust watcher groups changes before it hands them over."""
STEP_MS = 20
"""A batch is handed over once no change came for this long."""
TIMEOUT_MS = 500
"""How often the thread comes back when nothing changes (it also sees its stop event every ``STEP_MS``)."""
HOT_S = 0.5
"""The least time between two looks at one path: a file rewritten step after step is read (and its content
stored) twice a second at most, as the last write left it, so the watch's own reads and writes stay few
however fast the steps come. A path not looked at for that long (a new file, a deletion) is looked at once."""
INSTALL_S = 1.0
"""The longest the content of changes waits to be synced into the store (and the changes to be handed over)."""
DELETED = 3
"""``watchfiles.Change.deleted``."""
Window = tuple[int, int | None]
"""When the events that made the watch look at a path came: after the first, by the second (``None``: by now)."""
SLACK_NS = 50_000_000
"""How long before the previous batch was handed over an event of the next batch may have happened (the
kernel's events reach the watcher's queue a little after the change)."""


def mtime_tolerance_ns() -> int:
    """How far a file's mtime may lag behind the time of the write: the kernel stamps files with its coarse
    clock (one tick, 1 to 10 ms, on Linux); elsewhere 1 ms (the journal's own precision)."""
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", 5 if sys.platform.startswith("linux") else None)
    if coarse is not None:
        with contextlib.suppress(OSError):
            return max(1_000_000, int(time.clock_getres(coarse) * 1e9))
    return 1_000_000


@dataclass(frozen=True)
class Known:
    """What the watch knows a path holds: a file's content (``sha256``) or a link's text (``target``)."""

    t: str
    """``f`` a regular file, ``l`` a symbolic link."""
    sha256: str | None
    """The content's object in the store; ``None`` with ``flag`` (not stored) or for a link."""
    size: int
    mtime_ns: int
    target: str | None = None
    flag: str | None = None
    """``too_large`` (over the per-file cap), ``unreadable`` or ``not_stored`` (the store could not be written)."""

    def same(self, other: Known | None) -> bool:
        """The same content (a write that changed nothing is not a change)."""
        if other is None or other.t != self.t:
            return False
        if self.t == "l":
            return self.target == other.target
        if self.sha256 is None or other.sha256 is None:  # not hashed: only the size and the mtime can tell
            return (self.size, self.mtime_ns, self.flag) == (other.size, other.mtime_ns, other.flag)
        return self.sha256 == other.sha256


@dataclass(frozen=True)
class Seen:
    """One change as the watch saw it, and the interval ``[lo_ns, hi_ns]`` it happened in."""

    path: str
    op: str
    before: Known | None
    after: Known | None
    lo_ns: int
    hi_ns: int

    def to_json(self) -> dict[str, Any]:
        """The change as a ``files`` event holds it (``docs/workspace.md``)."""
        out: dict[str, Any] = {"path": self.path, "op": self.op, "before": _ref(self.before),
                               "after": _ref(self.after)}
        after = self.after
        if after is not None:
            if after.t == "l":
                out["link"] = after.target
            if after.flag:
                out[after.flag] = True
        return out


def _reuse(base: workspace.Manifest | None, rel: str, st: os.stat_result) -> Known | None:
    """``base``'s entry for ``rel`` if the file is unchanged since (size, mtime, and older than ``base``)."""
    e = base.files.get(rel) if base is not None else None
    if e is None or base is None:
        return None
    kind = "l" if stat.S_ISLNK(st.st_mode) else "f"
    if (e.t == kind and e.size == st.st_size and e.mtime_ns == st.st_mtime_ns and st.st_mtime_ns < base.taken_ns
            and (e.sha256 is not None or kind == "l")):
        return Known(kind, e.sha256, e.size, e.mtime_ns, e.target)
    return None


class _Objects:
    """New objects, written to the store's ``tmp/`` and put in place together at :meth:`finish`: their
    contents synced, renamed, their directories synced, as one batch rather than object by object.

    The agent's own commits wait behind every journal commit of the filesystem: syncs spread over time (as
    ``Store.put`` makes them) each cost one; together, the first commits what the others need. The store's
    contract is kept: an object's content is on disk before its name is, and both before a change names it."""

    MAX_OPEN = 256
    """Temporary files kept open (a descriptor each) before the batch is finished early."""

    def __init__(self, store: workspace.Store, made: set[str]) -> None:
        self.store = store
        self.made = made
        """Fan-out directories known to exist (``objects/ab``), kept across batches: no ``mkdir`` to find out."""
        self.tmps: list[tuple[int, Path, str]] = []
        self.shas: set[str] = set()

    def put(self, data: bytes) -> str:
        """``data``'s sha256; written to a temporary file unless the store (or this batch) has it."""
        sha = hashlib.sha256(data).hexdigest()
        if sha in self.shas or self.store.has(sha):
            return sha
        if len(self.tmps) >= self.MAX_OPEN:
            self.finish()
        fd, tmp = self.store.tmp_file()
        try:
            rundir.write_all(fd, data)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        self.tmps.append((fd, tmp, sha))
        self.shas.add(sha)
        return sha

    def finish(self) -> None:
        """Every object of the batch durable in place."""
        tmps, self.tmps = self.tmps, []
        try:
            for fd, _, _ in tmps:
                os.fsync(fd)
        finally:
            for fd, _, _ in tmps:
                os.close(fd)
        dirs: set[Path] = set()
        for _, tmp, sha in tmps:
            dest = self.store.object_path(sha)
            if os.path.exists(dest):  # another process put it meanwhile: objects are never rewritten
                os.unlink(tmp)
                continue
            if sha[:2] not in self.made:
                try:
                    os.mkdir(dest.parent, rundir.DIR_MODE)
                    dirs.add(self.store.objects_dir)
                except FileExistsError:
                    pass
                self.made.add(sha[:2])
            os.rename(tmp, dest)
            dirs.add(dest.parent)
        for d in sorted(dirs, key=lambda d: -len(d.parts)):  # fan-out directories before objects/
            rundir.fsync_dir(d)

    def discard(self) -> None:
        """Give up (an error): the temporary files removed."""
        for fd, tmp, _ in self.tmps:
            os.close(fd)
            tmp.unlink(missing_ok=True)
        self.tmps.clear()


def _unstored(k: Known | None, lost: set[str]) -> Known | None:
    """``k`` without its content if that was among the objects ``lost``."""
    if k is None or k.sha256 not in lost:
        return k
    return replace(k, sha256=None, flag="not_stored")


def _ref(k: Known | None) -> str | None:
    return None if k is None or k.t != "f" else k.sha256


class WorkspaceWatch:
    """The live watch of one workspace, for one supervisor: ``baseline``, ``start``, ``take`` ..., ``close``."""

    def __init__(self, run_dir: Path, settings: workspace.Settings) -> None:
        self.run_dir = run_dir
        self.settings = settings
        self.root = settings.root
        self._prefix = str(self.root).rstrip(os.sep) + os.sep
        self.store = workspace.Store(run_dir)
        self.tol_ns = mtime_tolerance_ns()
        self._lock = threading.Lock()
        """Held to read or change the map (the thread's batches, the supervisor's walks)."""
        self._known: dict[str, Known] = {}
        self._out: deque[Seen] = deque()
        self.notes: deque[str] = deque()
        """Lines for the supervisor to say (a file it could not store, the watch stopped)."""
        self._stop = threading.Event()
        self._paused = False
        self._notify: RustNotify | None = None
        self._pending: _Objects | None = None
        """New objects written, not yet synced and in place (:meth:`_install`)."""
        self._since = 0.0
        self._staged: list[Seen] = []
        """Changes whose objects are in ``_pending``: handed over once those are in place."""
        self._fanouts: set[str] = set()
        self._thread: threading.Thread | None = None
        self._last_batch_ns = time.time_ns()
        self._raw: dict[str, Window] = {}
        """Paths the watcher handed over, not yet looked at, and when their events came."""
        self._raw_ns = self._last_batch_ns
        """When the watcher last handed some over."""
        self._looked: dict[str, float] = {}
        """When each path was last looked at (monotonic), for ``HOT_S``."""
        self._ignored = workspace.ignored(settings, run_dir)

    # ------------------------------------------------------------------ the supervisor's side
    def baseline(self, base: workspace.Manifest | None) -> None:
        """Fill the map with what the workspace holds now: ``base``'s entry for a file whose size and mtime are
        unchanged and older than ``base`` (git's racy-clean rule), the rest read (and stored)."""
        fresh: dict[str, Known] = {}
        self.store.ensure()
        with self._lock:
            for rel, st in self._walk(""):
                k = _reuse(base, rel, st) or self._read(rel, st)
                if k is not None:
                    fresh[rel] = k
            self._known = fresh
            self._install()
            self._last_batch_ns = self._raw_ns = time.time_ns()

    def start(self) -> None:
        """Watch from now on (the watches are in place when this returns), in a daemon thread."""
        from watchfiles._rust_notify import RustNotify

        try:
            self._notify = RustNotify([str(self.root)], False, False, 300, True, True)
        except (OSError, RuntimeError) as e:  # no inotify watches left: poll instead (slower to see, still seen)
            self.notes.append(f"the workspace watch polls ({e})")
            self._notify = RustNotify([str(self.root)], False, True, 300, True, True)
        self._thread = threading.Thread(target=self._run, name="workspace-watch", daemon=True)
        self._thread.start()

    def take(self) -> list[Seen]:
        """The changes seen since the last call, oldest first."""
        out: list[Seen] = []
        q = self._out
        while q:
            out.append(q.popleft())
        return out

    def reconcile(self) -> None:
        """Compare the whole workspace with the map (one stat a file) and queue what differs: the changes the
        watcher has not handed over yet (the agent's last writes before it exited), or never saw."""
        with self._lock:
            self._batch(None)  # what the watcher handed over, with its times
            self._staged.extend(self._under("", (self._last_batch_ns - SLACK_NS, None)))
            self._install()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Within the block the watch records nothing (a restore writes the workspace); after it, the map is
        what the workspace holds, so the restore's late events compare equal and are dropped."""
        with self._lock:
            self._paused = True
        try:
            yield
        finally:
            with self._lock:
                self._under("", (0, None))  # the map follows the workspace; the changes themselves are dropped
                self._raw.clear()
                self._install()
                self._paused = False

    def close(self) -> None:
        """Stop the thread and the Rust watcher."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if self._notify is not None:
            self._notify.close()
            self._notify = None

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        """The thread: the Rust watcher's hand-overs noted, looked at, their objects installed, until closed."""
        notify = self._notify
        assert notify is not None
        try:
            while not self._stop.is_set():
                wait = int(HOT_S * 1000 / 5) if self._raw else TIMEOUT_MS  # a hot path's turn comes soon
                raw = notify.watch(DEBOUNCE_MS, STEP_MS, wait, self._stop)
                if raw == "stop":
                    return
                with self._lock:
                    if isinstance(raw, set):
                        self._note(raw)
                    if self._raw:
                        self._batch(time.monotonic())
                    if self._pending is not None and (raw == "timeout" or time.monotonic() >= self._since + INSTALL_S):
                        self._install()
        except Exception as e:  # said once; snapshots and restores go on without the watch
            self.notes.append(f"the workspace watch stopped ({type(e).__name__}: {e}); the files each step "
                              "changes are no longer recorded (snapshots and rollbacks still work)")

    def _note(self, raw: set[tuple[int, str]]) -> None:
        """A hand-over of the Rust watcher: when each path's last event came (after the hand-over before, by
        now, for a deletion; a change's own time is its file's mtime). Under the lock."""
        now = time.time_ns()
        for change, path in raw:
            rel = self._rel(path)
            if rel is not None:  # a path still waiting keeps the start of its window
                lo = self._raw[rel][0] if rel in self._raw else self._raw_ns - SLACK_NS
                self._raw[rel] = (lo, now if change == DELETED else None)
        self._raw_ns = now

    def _batch(self, now: float | None) -> None:
        """The paths noted: their content now against the map (``now``: not those looked at less than
        ``HOT_S`` before, which wait their turn; ``None``: all). Under the lock."""
        rels, self._raw = self._raw, {}
        if now is not None:
            self._defer_hot(rels, now)
        if any(r == ".gitignore" or r.endswith("/.gitignore") for r in rels):
            self._ignored = workspace.ignored(self.settings, self.run_dir)  # the rules changed with the file
        if not self._raw:
            self._last_batch_ns = self._raw_ns  # every event handed over so far is looked at
        if self._paused:
            return
        at = time.monotonic()
        for rel in sorted(rels):
            if not self._is_ignored(rel):
                self._looked[rel] = at
                self._staged.extend(self._path(rel, rels[rel]))
        if self._pending is None:  # nothing to sync: handed over now
            self._install()

    def _defer_hot(self, rels: dict[str, Window], now: float) -> None:
        """Move the paths of ``rels`` looked at less than ``HOT_S`` ago back to wait their turn."""
        looked = self._looked
        for rel in [r for r in rels if now - looked.get(r, -HOT_S) < HOT_S]:
            self._raw[rel] = rels.pop(rel)
        if len(looked) > 4096:
            self._looked = {r: t for r, t in looked.items() if now - t < HOT_S}

    def _objects(self) -> _Objects:
        """The new objects' batch, begun when the first one is written (under the lock)."""
        if self._pending is None:
            self._pending = _Objects(self.store, self._fanouts)
            self._since = time.monotonic()
        return self._pending

    def _install(self) -> None:
        """The new objects synced and put in place together, then the changes that name them handed over (an
        event never names an object that is not in place). Once a second at most while changes come: the
        agent's commits wait behind every sync of the filesystem, so the watch's are few and grouped.
        If they cannot be synced (a full disk), the changes say their content was not stored."""
        pending, self._pending = self._pending, None
        staged, self._staged = self._staged, []
        if pending is not None:
            try:
                pending.finish()
            except OSError as e:
                pending.discard()
                if not is_resource_error(e):
                    raise
                self.notes.append(f"could not store what the workspace's files hold: {e.strerror or e}; "
                                  "their changes are recorded without their content")
                staged = [replace(c, after=_unstored(c.after, pending.shas)) for c in staged]
                self._known = {r: _unstored(k, pending.shas) or k for r, k in self._known.items()}
        self._out.extend(staged)

    # ------------------------------------------------------------------ comparing (under the lock)
    def _path(self, rel: str, w: Window) -> list[Seen]:
        """What changed at ``rel`` (a file, a link, a directory and what it holds, or nothing any more)."""
        try:
            st = os.lstat(self.root / rel)
        except OSError:
            st = None
        if st is None or not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return self._gone(rel, w, under=True)
        if stat.S_ISDIR(st.st_mode):
            out = self._gone(rel, w, under=False)  # a file that became a directory
            return out + self._under(rel, w)
        out = self._gone(rel, w, under=True, itself=False)  # a directory that became a file
        new = self._read(rel, st)
        if new is None:
            return out
        old = self._known.get(rel)
        self._known[rel] = new
        if new.same(old):
            return out  # written, not changed
        return [*out, self._seen(rel, old, new, w)]

    def _under(self, rel: str, w: Window) -> list[Seen]:
        """Walk ``rel`` (``""``: the whole workspace): files and links unknown or with another size or mtime
        are read; known ones no longer there are deleted."""
        out: list[Seen] = []
        present: set[str] = set()
        for r, st in self._walk(rel):
            present.add(r)
            old = self._known.get(r)
            kind = "l" if stat.S_ISLNK(st.st_mode) else "f"
            if old is not None and old.t == kind and old.size == st.st_size and old.mtime_ns == st.st_mtime_ns:
                continue
            new = self._read(r, st)
            if new is None:
                continue
            self._known[r] = new
            if new.same(old):
                continue  # touched, not changed
            out.append(self._seen(r, old, new, w))
        prefix = f"{rel}/" if rel else ""
        out.extend(self._deleted(r, w) for r in [k for k in self._known if k.startswith(prefix)
                                                           and k not in present])
        return out

    def _gone(self, rel: str, w: Window, *, under: bool, itself: bool = True) -> list[Seen]:
        """``rel`` (``itself``) and, ``under``, every known path below it are deleted."""
        out: list[Seen] = []
        if itself and rel in self._known:
            out.append(self._deleted(rel, w))
        if under:
            prefix = rel + "/"
            out.extend(self._deleted(r, w) for r in [k for k in self._known if k.startswith(prefix)])
        return out

    def _deleted(self, rel: str, w: Window) -> Seen:
        """A deletion: after the file's last write and the events before its own; before its event came (or now, if
        the events that made us look were others), or its directory's mtime."""
        old = self._known.pop(rel)
        lo = max(w[0], old.mtime_ns)
        hi = max(time.time_ns() if w[1] is None else w[1], lo)
        parent = self.root / rel.rpartition("/")[0] if "/" in rel else self.root
        with contextlib.suppress(OSError):
            # an entry removed changes its directory's mtime; a later change there moves it on (never back)
            dm = os.stat(parent).st_mtime_ns
            if lo <= dm <= hi:
                hi = min(hi, dm + self.tol_ns)
        return Seen(rel, "deleted", old, None, lo, hi)

    def _seen(self, rel: str, old: Known | None, new: Known, w: Window) -> Seen:
        """A creation or a change, in the interval its mtime gives (an mtime from before the events, as a copy
        that keeps times makes, says nothing: the events' interval then)."""
        now = time.time_ns()
        m = new.mtime_ns
        if w[0] <= m <= now:
            lo, hi = m, m + self.tol_ns
        else:
            lo, hi = w[0], now
        return Seen(rel, "changed" if old is not None else "created", old, new, lo, hi)

    def _read(self, rel: str, st: os.stat_result) -> Known | None:
        """What ``rel`` holds (its content stored); ``None`` if it went away meanwhile."""
        path = self.root / rel
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(path)
            except OSError:
                return None
            return Known("l", None, len(os.fsencode(target)), st.st_mtime_ns, target)
        if st.st_size > self.settings.max_file:
            return Known("f", None, st.st_size, st.st_mtime_ns, flag="too_large")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:
            return Known("f", None, st.st_size, st.st_mtime_ns, flag="unreadable")
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(self.settings.max_file + 1)
            fst = os.fstat(fd)
            if len(data) > self.settings.max_file:
                return Known("f", None, fst.st_size, fst.st_mtime_ns, flag="too_large")
            sha = self._objects().put(data)
        except OSError as e:
            if not is_resource_error(e):
                return Known("f", None, st.st_size, st.st_mtime_ns, flag="unreadable")
            self.notes.append(f"could not store {rel} of the workspace: {e.strerror or e}; its change is "
                              "recorded without its content")
            return Known("f", None, st.st_size, st.st_mtime_ns, flag="not_stored")
        finally:
            os.close(fd)
        return Known("f", sha, len(data), fst.st_mtime_ns)

    # ------------------------------------------------------------------ paths
    def _rel(self, path: str) -> str | None:
        """``path`` relative to the root, ``/``-separated; ``None`` for the root itself or a path outside it."""
        if not path.startswith(self._prefix):
            return None
        rel = path[len(self._prefix):]
        if os.sep != "/":
            rel = rel.replace(os.sep, "/")
        return rel or None

    def _is_ignored(self, rel: str) -> bool:
        """The ignore rules of the workspace on ``rel`` (those of the directories above it included)."""
        path = self.root / rel
        return self._ignored(rel, os.path.isdir(path) and not os.path.islink(path))

    def _walk(self, rel: str) -> Iterator[tuple[str, os.stat_result]]:
        """The files and links at or below ``rel`` that the rules keep, with their ``lstat``; ignored directories
        are not entered, links to directories not followed."""
        stack = [rel]
        ignored: Callable[[str, bool], bool] = self._ignored
        while stack:
            d = stack.pop()
            try:
                it = os.scandir(self.root / d if d else self.root)
            except OSError:
                continue  # gone, or not a directory any more, or unreadable: its files are not seen
            with it:
                for ent in it:
                    r = f"{d}/{ent.name}" if d else ent.name
                    try:
                        st = ent.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if not ignored(r, True):
                            stack.append(r)
                    elif (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) and not ignored(r, False):
                        yield r, st
