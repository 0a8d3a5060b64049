"""Comparing snapshots and writing one into a directory: :class:`Change`, :func:`diff`, :func:`summary`,
:func:`text_diff`, and :func:`apply_changes`, the one writer behind a rollback's restore and a materialise.

The writer never leaves the directory it is given: every path is checked (relative, no ``..``), every
directory on the way is opened with ``O_NOFOLLOW`` relative to its parent's descriptor (a link where a
directory should be is refused, never followed), and files and links are written as a temporary name
beside their place and renamed over it (a link in the way is replaced, never written through).
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import WorkspaceError
from .workspace_store import BLOCK, Entry, Manifest, Store


@dataclass(frozen=True)
class Change:
    """One path that differs between two snapshots (``before`` ``None``: created; ``after`` ``None``: deleted)."""

    path: str
    op: str
    """``created``, ``changed`` or ``deleted``."""
    before: Entry | None
    after: Entry | None


def umask() -> int:
    """The process's umask, read without changing it where the platform tells it (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def exec_bits_equal(current: int, wanted: int, mask: int) -> bool:
    """Whether a file's executable bits are what a snapshot's ``wanted`` mode restores under ``mask``."""
    cx, wx = current & 0o111, wanted & 0o111
    return cx == wx or cx == wx & ~mask


def _differs(a: Entry, b: Entry, mask: int | None) -> bool:
    if a.t != b.t:
        return True
    if a.t == "f":
        if a.sha256 != b.sha256 or a.sha256 is None:
            return True
        return (a.mode & 0o111) != (b.mode & 0o111) if mask is None else not exec_bits_equal(a.mode, b.mode, mask)
    if a.t == "l":
        return a.target != b.target
    return False


def diff(a: Manifest, b: Manifest, mask: int | None = None) -> list[Change]:
    """What changed from ``a`` to ``b``, sorted by path. A file's content or executable bits, a link's text,
    or a path's type make a change. ``mask`` (a umask): compare ``b``'s executable bits as a restore under
    it writes them."""
    out: list[Change] = []
    fa, fb = a.files, b.files
    for p in sorted(fa.keys() | fb.keys()):
        ea, eb = fa.get(p), fb.get(p)
        if ea is None:
            out.append(Change(p, "created", None, eb))
        elif eb is None:
            out.append(Change(p, "deleted", ea, None))
        elif _differs(ea, eb, mask):
            out.append(Change(p, "changed", ea, eb))
    return out


def summary(changes: list[Change]) -> str:
    """``3 files changed, 1 created, 2 deleted`` (``no file changed`` for none)."""
    counts = [(sum(1 for c in changes if c.op == op), op) for op in ("changed", "created", "deleted")]
    parts = [(n, op) for n, op in counts if n]
    if not parts:
        return "no file changed"
    n0, op0 = parts[0]
    return ", ".join([f"{n0} file{'s' if n0 != 1 else ''} {op0}", *(f"{n} {op}" for n, op in parts[1:])])


def _describe(e: Entry | None) -> str:
    if e is None:
        return "absent"
    if e.t == "l":
        return f"a link to {e.target}"
    if e.t == "d":
        return "an empty directory"
    return "a file"


def _text(store: Store, e: Entry | None) -> list[str] | None:
    """A file entry's content as lines (``[]`` for none); ``None`` if it is not UTF-8 text."""
    if e is None:
        return []
    if e.sha256 is None:
        return None
    data = store.get(e.sha256)
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def text_diff(store: Store, change: Change, *, context: int = 3) -> list[str]:
    """The unified diff lines of a file's change (contents from the store); ``["binary file differs"]`` for
    content that is not UTF-8 text; one line for a link's change, a type's or a mode's alone."""
    b, a = change.before, change.after
    if (b is not None and b.t != "f") or (a is not None and a.t != "f"):
        if b is not None and a is not None and b.t == a.t == "l":
            return [f"link changed: {b.target} -> {a.target}"]
        return [f"was {_describe(b)}, now {_describe(a)}"]
    if (b is not None and b.sha256 is None) or (a is not None and a.sha256 is None):
        return ["content not recorded (over the per-file cap, or unreadable when seen)"]
    if any(e is not None and e.sha256 and not store.has(e.sha256) for e in (b, a)):
        return ["content not in the store (a file as it is now, not snapshotted)"]
    if b is not None and a is not None and b.sha256 == a.sha256:
        return [f"mode changed: {b.mode & 0o7777:o} -> {a.mode & 0o7777:o}"]
    old, new = _text(store, b), _text(store, a)
    if old is None or new is None:
        return ["binary file differs"]
    lines = list(difflib.unified_diff(old, new, f"a/{change.path}" if b else "/dev/null",
                                      f"b/{change.path}" if a else "/dev/null", n=context, lineterm=""))
    if b is not None and a is not None and (b.mode ^ a.mode) & 0o111:
        lines.insert(0, f"mode changed: {b.mode & 0o7777:o} -> {a.mode & 0o7777:o}")
    return lines


def check_paths(manifest: Manifest, where: str) -> None:
    """Refuse a manifest with a path that is absolute, empty or holds ``..``/``.`` (it would lead out)."""
    for p in manifest.files:
        parts = p.split("/")
        if not p or p.startswith("/") or "\0" in p or any(s in ("", ".", "..") for s in parts):
            raise WorkspaceError(
                f"{where} names the path {p!r}, which is not a plain relative path inside the workspace; "
                "the store is damaged: nothing was written"
            )


def dirs_needed(manifest: Manifest) -> set[str]:
    """The directories a manifest's paths need: every parent, and its empty directories."""
    out: set[str] = set()
    for p, e in manifest.files.items():
        if e.t == "d":
            out.add(p)
        head = p.rpartition("/")[0]
        while head and head not in out:
            out.add(head)
            head = head.rpartition("/")[0]
    return out


def _key(c: Change) -> list[str]:
    return c.path.split("/")


class _Dirs:
    """Directory descriptors under a root, each opened relative to its parent with ``O_NOFOLLOW``."""

    FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fds: dict[str, int] = {"": os.open(root, self.FLAGS)}
        self.touched: set[str] = set()

    def get(self, rel_dir: str, *, create: bool) -> int | None:
        """The descriptor of ``rel_dir`` (made if ``create``); ``None`` if missing and not ``create``."""
        fd = self.fds.get(rel_dir)
        if fd is not None:
            return fd
        parent, _, name = rel_dir.rpartition("/")
        pfd = self.get(parent, create=create)
        if pfd is None:
            return None
        try:
            fd = os.open(name, self.FLAGS, dir_fd=pfd)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(name, 0o777, dir_fd=pfd)
            self.touched.add(parent)
            fd = os.open(name, self.FLAGS, dir_fd=pfd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise WorkspaceError(
                    f"cannot write into {self.root / rel_dir}: it is a link or a file, not a directory (it is "
                    "ignored, so it was left alone); move it aside and try again"
                ) from None
            raise
        self.fds[rel_dir] = fd
        return fd

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def sync(self) -> None:
        for rel in self.touched:
            fd = self.fds.get(rel)
            if fd is not None:
                os.fsync(fd)


def _remove(dirs: _Dirs, c: Change) -> None:
    parent, _, name = c.path.rpartition("/")
    pfd = dirs.get(parent, create=False)
    if pfd is None:
        return
    try:
        if c.before is not None and c.before.t == "d":
            os.rmdir(name, dir_fd=pfd)
        else:
            os.unlink(name, dir_fd=pfd)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR):
            raise
        return  # a directory holding ignored files stays (a write there is then refused)
    dirs.touched.add(parent)


def _prune(dirs: _Dirs, removed: list[Change], keep: set[str]) -> None:
    """Remove the directories the removals emptied that the snapshot does not have (if empty)."""
    cands: set[str] = set()
    for c in removed:
        head = c.path.rpartition("/")[0]
        while head and head not in cands:
            cands.add(head)
            head = head.rpartition("/")[0]
    for d in sorted(cands - keep, key=lambda s: s.count("/"), reverse=True):
        fd = dirs.fds.pop(d, None)
        if fd is not None:
            os.close(fd)
        parent, _, name = d.rpartition("/")
        pfd = dirs.get(parent, create=False)
        if pfd is None:
            continue
        try:
            os.rmdir(name, dir_fd=pfd)
            dirs.touched.add(parent)
        except OSError:
            pass  # not empty (ignored files) or gone


def _copy(src: int, dst: int) -> None:
    """Copy an open file's content to another (in the kernel where it can)."""
    try:
        while os.copy_file_range(src, dst, 1 << 30):
            pass
        return
    except (OSError, AttributeError):
        os.lseek(src, 0, os.SEEK_SET)
        os.lseek(dst, 0, os.SEEK_SET)
        os.ftruncate(dst, 0)
    while True:
        b = os.read(src, BLOCK)
        if not b:
            return
        view = memoryview(b)
        while view:
            view = view[os.write(dst, view):]


def _write(store: Store, dirs: _Dirs, path: str, e: Entry, sync: bool) -> None:
    parent, _, name = path.rpartition("/")
    pfd = dirs.get(parent, create=True)
    assert pfd is not None
    dirs.touched.add(parent)
    if e.t == "d":
        try:
            os.mkdir(name, 0o777, dir_fd=pfd)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(name, dir_fd=pfd, follow_symlinks=False).st_mode):
                raise WorkspaceError(f"cannot make the directory {dirs.root / path}: a file is in its place") from None
        return
    tmp = f".ws-{os.urandom(6).hex()}.tmp"
    if e.t == "l":
        os.symlink(e.target or "", tmp, dir_fd=pfd)
    else:
        if e.sha256 is None:
            raise WorkspaceError(f"cannot write {dirs.root / path}: its content was not recorded (over the cap)")
        src = os.open(store.object_path(e.sha256), os.O_RDONLY | os.O_CLOEXEC)
        try:
            dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                          0o666 | (e.mode & 0o111), dir_fd=pfd)
            try:
                _copy(src, dst)
                if sync:
                    os.fsync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
    try:
        os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
    except OSError as err:
        os.unlink(tmp, dir_fd=pfd)
        raise WorkspaceError(f"cannot write {dirs.root / path} ({err.strerror}): a directory holding ignored "
                             "files is in its place; move it aside and try again") from None


def apply_changes(store: Store, root: Path, changes: list[Change], target: Manifest, *, sync: bool) -> None:
    """Make ``root`` hold what ``changes`` lead to (the ``after`` sides, from ``store``'s objects): removals
    deepest first, then the directories they emptied, then writes parents first. ``sync``: each written file
    and every changed directory is fsynced (a restore in place must be durable before it is recorded)."""
    for c in changes:
        if c.after is not None and c.after.t == "f" and c.after.sha256 and not store.has(c.after.sha256):
            raise WorkspaceError(f"{store.dir}: the object of {c.path} is missing; nothing was written")
    dirs = _Dirs(root)
    try:
        removed = [c for c in changes if c.before is not None and (c.after is None or c.before.t != c.after.t)]
        for c in sorted(removed, key=_key, reverse=True):
            _remove(dirs, c)
        _prune(dirs, removed, dirs_needed(target))
        for c in sorted((c for c in changes if c.after is not None), key=_key):
            assert c.after is not None
            _write(store, dirs, c.path, c.after, sync)
        if sync:
            dirs.sync()
    finally:
        dirs.close()
