"""``RUN/workspace/``: the content-addressed store of the workspace's snapshots (objects, manifests, the index).

An object is a file's content named by its SHA-256 (``objects/ab/cdef…``), a manifest a snapshot's list of
paths named by the SHA-256 of its own bytes (``manifests/<sha>.json``); both are written once (temporary
file in ``tmp/``, fsync, rename) and never rewritten. ``snapshots.jsonl`` is the index: one line per
snapshot, appended with one write and ``fdatasync`` after everything it names is durable: the line is the
snapshot's commit point. A torn last line is skipped; objects and manifests no line names are garbage.
The format is the public contract of docs/workspace.md ("The run directory's part").
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import RunDirError, WorkspaceError
from . import rundir

OBJECTS = "objects"
MANIFESTS = "manifests"
INDEX = "snapshots.jsonl"
RESTORED = "restored.json"
TMP = "tmp"
MANIFEST_FORMAT = 1
BLOCK = 1 << 20
"""Files are read (and hashed) in blocks of this size."""
FOR_KINDS = frozenset({"start", "checkpoint", "abandoned", "fork"})
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Entry:
    """One path of a manifest: ``t`` is ``"f"`` (a regular file), ``"l"`` (a symbolic link) or ``"d"`` (an
    empty directory)."""

    t: str
    sha256: str | None = None
    size: int = 0
    mode: int = 0
    mtime_ns: int = 0
    target: str | None = None
    """A link's text (never followed)."""

    def to_json(self) -> dict[str, Any]:
        if self.t == "f":
            return {"t": "f", "sha256": self.sha256, "size": self.size, "mode": self.mode, "mtime_ns": self.mtime_ns}
        if self.t == "l":
            return {"t": "l", "target": self.target}
        return {"t": "d"}

    @classmethod
    def from_json(cls, d: Any) -> Entry:
        """An entry of a manifest's ``files``; ``ValueError`` if it is not one."""
        if not isinstance(d, dict):
            raise ValueError("an entry is not an object")
        t = d.get("t")
        if t == "f":
            sha, size, mode, mtime = d.get("sha256"), d.get("size"), d.get("mode", 0o644), d.get("mtime_ns", 0)
            if not (isinstance(sha, str) and _HEX64.fullmatch(sha)):
                raise ValueError("a file entry without a sha256")
            if not all(type(v) is int and v >= 0 for v in (size, mode, mtime)):
                raise ValueError("a file entry's size, mode and mtime_ns are whole numbers")
            return cls("f", sha, int(size), int(mode), int(mtime))  # type: ignore[arg-type]  # checked above
        if t == "l":
            target = d.get("target")
            if not isinstance(target, str):
                raise ValueError("a link entry without a target")
            return cls("l", target=target)
        if t == "d":
            return cls("d")
        raise ValueError(f"an entry of type {t!r} (not f, l or d)")

    def executable(self) -> int:
        """The executable bits of a file's mode."""
        return self.mode & 0o111


@dataclass
class Manifest:
    """A snapshot: the workspace's root when taken, when (``taken_ns``, the filesystem's clock), and its paths."""

    root: str
    taken_ns: int
    files: dict[str, Entry]
    """Relative ``/``-separated path -> entry."""

    def to_bytes(self) -> bytes:
        files = {p: self.files[p].to_json() for p in sorted(self.files)}
        doc = {"format": MANIFEST_FORMAT, "root": self.root, "taken_ns": self.taken_ns, "files": files}
        return orjson.dumps(doc) + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Manifest:
        """Parse a manifest; :class:`WorkspaceError` naming ``where`` if it is not one."""
        try:
            doc = orjson.loads(data)
            if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
                raise ValueError("not a manifest object")
            if type(doc.get("format", 1)) is not int or doc.get("format", 1) > MANIFEST_FORMAT:
                raise ValueError(f"format {doc.get('format')!r} is newer than this version reads")
            files = {str(p): Entry.from_json(e) for p, e in doc["files"].items()}
            root, taken = doc.get("root"), doc.get("taken_ns")
            if not isinstance(root, str) or type(taken) is not int:
                raise ValueError("no root or taken_ns")
        except (ValueError, orjson.JSONDecodeError) as e:
            raise WorkspaceError(f"{where} is not a workspace manifest ({e}); the store is damaged") from None
        return cls(root, taken, files)

    def bytes_total(self) -> int:
        return sum(e.size for e in self.files.values() if e.t == "f")

    def objects(self) -> set[str]:
        """The sha256 of every file's content."""
        return {e.sha256 for e in self.files.values() if e.t == "f" and e.sha256}


@dataclass(frozen=True)
class SnapshotRef:
    """One line of ``snapshots.jsonl`` (``for_`` is the JSON key ``for``)."""

    snapshot: str
    for_: str
    seq: int | None
    name: str | None
    files: int
    bytes: int
    stored: int
    ts: str
    by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot, "for": self.for_, "seq": self.seq, "name": self.name, "files": self.files,
            "bytes": self.bytes, "stored": self.stored, "ts": self.ts, "by": self.by,
        }

    @classmethod
    def from_json(cls, d: Any) -> SnapshotRef | None:
        """The line's reference, ``None`` for a line that is not a well-formed one."""
        if not isinstance(d, dict):
            return None
        snap, kind, seq, name = d.get("snapshot"), d.get("for"), d.get("seq"), d.get("name")
        if not (isinstance(snap, str) and _HEX64.fullmatch(snap)) or kind not in FOR_KINDS:
            return None
        if not (seq is None or type(seq) is int) or not (name is None or isinstance(name, str)):
            return None
        nums = [d.get(k, 0) for k in ("files", "bytes", "stored")]
        if not all(type(v) is int for v in nums):
            return None
        return cls(snap, kind, seq, name, nums[0], nums[1], nums[2], str(d.get("ts") or ""), str(d.get("by") or ""))


def _mkdir(path: Path) -> None:
    try:
        os.mkdir(path, rundir.DIR_MODE)
    except FileExistsError:
        pass


class Store:
    """``RUN/workspace/``: objects, manifests and the index of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / rundir.WORKSPACE
        self.objects_dir = self.dir / OBJECTS
        self.manifests_dir = self.dir / MANIFESTS
        self.tmp_dir = self.dir / TMP
        self.index_path = self.dir / INDEX
        self._manifests: dict[str, Manifest] = {}
        self._made: set[str] = set()  # object fan-out directories known to exist

    # -- layout
    def ensure(self) -> None:
        """Create the store's directories (mode 0700) if missing."""
        if self.tmp_dir.is_dir() and self.objects_dir.is_dir() and self.manifests_dir.is_dir():
            return
        rundir.ensure_dir(self.dir)
        for d in (self.objects_dir, self.manifests_dir, self.tmp_dir):
            _mkdir(d)
        rundir.fsync_dir(self.dir)

    def object_path(self, sha: str) -> Path:
        return self.objects_dir / sha[:2] / sha[2:]

    def has(self, sha: str) -> bool:
        return os.path.exists(self.object_path(sha))

    def _fanout(self, sha: str) -> tuple[Path, bool]:
        """The object's fan-out directory, made if missing; whether it was made now (its parent needs a sync)."""
        d = self.objects_dir / sha[:2]
        if sha[:2] in self._made:
            return d, False
        try:
            os.mkdir(d, rundir.DIR_MODE)
            made = True
        except FileExistsError:
            made = False
        self._made.add(sha[:2])
        return d, made

    def tmp_file(self) -> tuple[int, Path]:
        """A new temporary file in ``tmp/`` (open for writing) and its path."""
        path = self.tmp_dir / f"{os.getpid()}.{os.urandom(6).hex()}.tmp"
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, rundir.FILE_MODE), path

    def install(self, tmp: Path, sha: str, pending: Pending | None = None) -> bool:
        """Rename the temporary file ``tmp`` (its content synced) to object ``sha``; ``False`` (and ``tmp``
        removed) if the object was there already. The directories changed are synced now, or by ``pending``."""
        dest = self.object_path(sha)
        if os.path.exists(dest):
            os.unlink(tmp)
            return False
        d, made = self._fanout(sha)
        os.rename(tmp, dest)
        if pending is None:
            rundir.fsync_dir(d)
            if made:
                rundir.fsync_dir(self.objects_dir)
        else:
            pending.dirs.add(d)
            if made:
                pending.dirs.add(self.objects_dir)
        return True

    def put(self, data: bytes) -> str:
        """Store ``data`` as an object (written once: tmp, fsync, rename) and return its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        if self.has(sha):
            return sha
        self.ensure()
        fd, tmp = self.tmp_file()
        try:
            rundir.write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        self.install(tmp, sha)
        return sha

    def get(self, sha: str) -> bytes:
        """An object's content; :class:`WorkspaceError` if the store does not have it."""
        try:
            with open(self.object_path(sha), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            raise WorkspaceError(
                f"{self.dir}: the object {sha[:12]} is missing (the store is damaged or the snapshot is not from this run)"
            ) from None

    # -- manifests
    def write_manifest(self, manifest: Manifest) -> str:
        """Store a manifest (written once, synced) and return its sha256."""
        data = manifest.to_bytes()
        sha = hashlib.sha256(data).hexdigest()
        path = self.manifests_dir / f"{sha}.json"
        if not path.exists():
            self.ensure()
            rundir.atomic_write(path, data)
        self._manifests[sha] = manifest
        return sha

    def manifest(self, snapshot: str) -> Manifest:
        """The manifest named ``snapshot``; :class:`WorkspaceError` if missing or damaged."""
        got = self._manifests.get(snapshot)
        if got is not None:
            return got
        path = self.manifests_dir / f"{snapshot}.json"
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise WorkspaceError(f"{path} is missing: the snapshot {snapshot[:12]} cannot be read") from None
        if hashlib.sha256(data).hexdigest() != snapshot:
            raise WorkspaceError(f"{path} does not hash to its name: the manifest is damaged")
        got = self._manifests[snapshot] = Manifest.from_bytes(data, str(path))
        return got

    # -- the index
    def index(self) -> list[SnapshotRef]:
        """Every well-formed line of ``snapshots.jsonl``, in file order (a torn last line skipped)."""
        try:
            data = rundir.read_run_file(self.index_path)
        except FileNotFoundError:
            return []
        except RunDirError as e:
            raise WorkspaceError(str(e)) from None
        out: list[SnapshotRef] = []
        lines = data.split(b"\n")
        for raw in lines[:-1]:  # the part after the last newline is empty or a torn line
            if not raw.strip():
                continue
            try:
                ref = SnapshotRef.from_json(orjson.loads(raw))
            except orjson.JSONDecodeError:
                continue
            if ref is not None:
                out.append(ref)
        return out

    def append_index(self, ref: SnapshotRef) -> None:
        """Append ``ref``'s line with one write, then ``fdatasync``: the snapshot's commit point.
        A torn last line left by a killed writer is ended first, so the new line stands alone."""
        self.ensure()
        line = orjson.dumps(ref.to_json()) + b"\n"
        try:
            fd = rundir.open_run_file(self.index_path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        except RunDirError as e:
            raise WorkspaceError(str(e)) from None
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            rundir.write_all(fd, line)
            rundir.datasync_function()(fd)
        finally:
            os.close(fd)
        if size == 0:
            rundir.fsync_dir(self.dir)

    def read_restored(self) -> int | None:
        """``restored.json``'s seq: the last rollback record whose restore finished (``None``: none)."""
        try:
            doc = orjson.loads((self.dir / RESTORED).read_bytes())
        except (FileNotFoundError, NotADirectoryError, orjson.JSONDecodeError):
            return None
        seq = doc.get("seq") if isinstance(doc, dict) else None
        return seq if type(seq) is int else None

    def write_restored(self, seq: int) -> None:
        self.ensure()
        rundir.atomic_write(self.dir / RESTORED, orjson.dumps({"seq": seq}) + b"\n")


class Pending:
    """The new objects of one snapshot, written by several threads: each is written to ``tmp/``, synced and
    renamed to its name (written once: tmp, fsync, rename) by the thread that read it, so the syncs of many
    files overlap with one another and with the reads. :meth:`finish` syncs the directories the renames
    changed, before the manifest is written. A content two files share is claimed (written) once."""

    THREADS = 8

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self.shas: set[str] = set()
        self.dirs: set[Path] = set()

    def claim(self, sha: str) -> bool:
        """Whether this caller writes object ``sha`` (no other file of the snapshot has, nor the store)."""
        with self._lock:
            if sha in self.shas:
                return False
            self.shas.add(sha)
        return not self.store.has(sha)

    def install(self, tmp: Path, sha: str) -> None:
        with self._lock:
            self.store.install(tmp, sha, self)

    def finish(self) -> None:
        """Every new object durable in place: the directories of the renames synced."""
        dirs = sorted(self.dirs)
        self.dirs.clear()
        if len(dirs) <= 4:
            for d in dirs:
                rundir.fsync_dir(d)
            return
        with ThreadPoolExecutor(max_workers=self.THREADS, thread_name_prefix="workspace-sync") as pool:
            for _ in pool.map(rundir.fsync_dir, dirs):
                pass


def _write_object(pending: Pending, data: bytes | None, tmp_fd: tuple[int, Path] | None, sha: str) -> bool:
    """Write (or finish) the temporary file of object ``sha``, sync it and put it in place; ``False`` (nothing
    left behind) if another file of the snapshot, or the store, has it already."""
    if not pending.claim(sha):
        if tmp_fd is not None:
            os.close(tmp_fd[0])
            tmp_fd[1].unlink()
        return False
    out, tmp = tmp_fd if tmp_fd is not None else pending.store.tmp_file()
    try:
        if data is not None:
            rundir.write_all(out, data)
        os.fsync(out)
    except BaseException:
        os.close(out)
        tmp.unlink(missing_ok=True)
        raise
    os.close(out)
    pending.install(tmp, sha)
    return True


def store_file(store: Store, fd: int, size: int, pending: Pending) -> tuple[str, bool]:
    """Read the open file ``fd`` (``size`` bytes expected), hash it and store it as an object unless the store
    has it (synced and in place when this returns). Returns ``(sha256, stored)``. Small files are read whole;
    large ones copied in blocks to a temporary file while hashed."""
    if size <= 4 * BLOCK:
        data = _read_all(fd, size)
        sha = hashlib.sha256(data).hexdigest()
        return sha, _write_object(pending, data, None, sha)
    h = hashlib.sha256()
    out, tmp = store.tmp_file()
    try:
        while True:
            block = os.read(fd, BLOCK)
            if not block:
                break
            h.update(block)
            rundir.write_all(out, block)
    except BaseException:
        os.close(out)
        tmp.unlink(missing_ok=True)
        raise
    sha = h.hexdigest()
    return sha, _write_object(pending, None, (out, tmp), sha)


def _read_all(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        b = os.read(fd, max(size + 1, BLOCK) if not chunks else BLOCK)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def hash_fd(fd: int) -> str:
    """The sha256 of an open file's content, read in blocks."""
    h = hashlib.sha256()
    while True:
        b = os.read(fd, BLOCK)
        if not b:
            return h.hexdigest()
        h.update(b)


def link_or_copy(src: Path, dst: Path) -> None:
    """Put the file ``src`` at ``dst`` (absent): a hard link where the filesystem allows, else a synced copy."""
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        return  # put there meanwhile: objects are never rewritten, the same name is the same content
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
    rundir.atomic_write(dst, src.read_bytes())


