"""A fork's own workspace: the origin's files as of the fork point, in a new directory (see docs/workspace.md).

When the origin declares a workspace, :func:`supervisor.core.fork.fork` plans one here before it creates
anything (:func:`plan`: the directory is checked, nothing is written), then fills the fork's store
(:meth:`ForkWorkspace.fill_store`: the objects it needs, the snapshots its copied checkpoints had, and the
``fork`` snapshot), materialises the files into a hidden temporary directory beside the new workspace and
renames it into place (:meth:`ForkWorkspace.materialise`, :meth:`ForkWorkspace.move_into_place`): a crash
leaves no half-made workspace, at worst a ``.fork-ws-*.tmp`` directory to delete.

The default directory is ``<fork>.workspace`` beside the new run directory, or, when that would lie inside
the original's workspace (the run directories often do), ``<workspace>-<fork name>`` beside the original's
workspace: a fork never writes into the original's workspace.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ForkError, SupervisorError
from . import rundir
from .records import Kind, Record

if TYPE_CHECKING:
    from .workspace import Manifest, Settings

BY = "cli"
"""The ``by`` of the snapshots a fork writes (the command line and the dashboard fork alike)."""
SUFFIX = ".workspace"


@dataclass
class ForkWorkspace:
    """The workspace a fork gets: the origin's settings, the fork's (its new root), the files in effect."""

    origin: Settings
    settings: Settings
    manifest: Manifest | None
    """The origin's workspace as of the fork point; ``None``: no snapshot covers it (the fork's starts empty)."""
    existed: bool
    """The new root was an empty directory already (given back as it was if the fork fails)."""
    tmp: Path | None = None
    placed: bool = False

    @property
    def root(self) -> Path:
        return self.settings.root

    def run_json(self) -> dict[str, Any]:
        """The fork's ``run.json`` ``"workspace"``: the origin's ignore rules and caps, the new root."""
        return self.settings.to_json()

    def fill_store(self, origin_run: Path, fork_run: Path, path: list[Record], fork_seq: int, name: str) -> None:
        """Put into the fork's store (``fork_run``, still its temporary directory) what its rollbacks restore:
        the origin's ``start`` snapshot, the snapshot of each copied checkpoint (``path[i]`` is the fork's
        record ``i``), and the workspace as materialised (``fork``, and the checkpoint ``name`` at ``fork_seq``
        that the fork adds); ``restored.json`` says the copied rollbacks' restores are done."""
        from . import workspace as ws

        def put(m: Manifest, for_: str, seq: int | None, cp_name: str | None) -> None:
            ws.copy_objects(origin_run, fork_run, m)
            ws.write_manifest(fork_run, m, for_=for_, seq=seq, name=cp_name, by=BY)

        store = ws.Store(origin_run)
        start = next((r for r in reversed(ws.committed(origin_run)) if r.for_ == "start"), None)
        if start is not None:
            put(store.manifest(start.snapshot), "start", None, None)
        last_rollback = None
        for i, rec in enumerate(path):
            kind = rec.get("kind")
            if kind == Kind.ROLLBACK:
                last_rollback = i
            elif kind == Kind.CHECKPOINT and isinstance(rec.get("seq"), int):
                ref = ws.snapshot_at_checkpoint(origin_run, rec["seq"])
                if ref is not None:
                    put(store.manifest(ref.snapshot), "checkpoint", i, _str(rec.get("name")))
        if self.manifest is not None:
            mine = dataclasses.replace(self.manifest, root=str(self.root))
            put(mine, "fork", fork_seq, name)
            # the fork's checkpoint too: a rollback to it restores these files
            ws.write_manifest(fork_run, mine, for_="checkpoint", seq=fork_seq, name=name, by=BY)
        if last_rollback is not None:
            # the copied rollbacks were restored in the origin: the fork's first start must not restore again
            ws.Store(fork_run).write_restored(last_rollback)

    def materialise(self, origin_run: Path) -> None:
        """Write the files into a hidden temporary directory beside the new root (renamed by :meth:`move_into_place`)."""
        from . import workspace as ws

        parent = self.root.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp = parent / f".fork-ws-{os.urandom(4).hex()}.tmp"
            if self.manifest is None:
                self.tmp.mkdir(mode=0o755)
            else:
                ws.materialize(origin_run, self.manifest, self.tmp)
        except OSError as e:
            raise self._cannot(e) from None

    def move_into_place(self) -> None:
        """Rename the materialised directory to the new root (atomic; an empty directory there is replaced)."""
        assert self.tmp is not None
        try:
            os.rename(self.tmp, self.root)
        except OSError as e:
            raise self._cannot(e) from None
        self.placed = True
        self.tmp = None
        rundir.fsync_dir(self.root.parent)

    def discard(self) -> None:
        """The fork failed: remove what this made (an empty directory that was there is left as it was)."""
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self.placed:
            shutil.rmtree(self.root, ignore_errors=True)
            if self.existed:
                self.root.mkdir(exist_ok=True)

    def _cannot(self, e: OSError) -> ForkError:
        return ForkError(
            f"cannot create the fork's workspace at {self.root}: {e.strerror or e}; "
            "choose another --workspace (nothing was written there)"
        )


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def plan(origin_run: Path, at_seq: int, target: Path, workspace: Path | None) -> ForkWorkspace | None:
    """The fork's workspace, checked before anything is written; ``None`` if the origin declares none.

    ``workspace``: the directory asked for (``--workspace``), which must not exist or be empty, and lie
    outside the original's workspace and both run directories; default :func:`default_workspace`.
    """
    from . import workspace as ws

    origin = ws.settings_of(origin_run) if origin_run.is_dir() else None
    if origin is None:
        if workspace is not None:
            raise ForkError(
                f"{origin_run} has no workspace, so its fork has none to materialise: leave out --workspace "
                "(see docs/workspace.md to declare one)"
            )
        return None
    root = Path(os.path.abspath(workspace)).resolve() if workspace is not None else default_workspace(target, origin.root)
    _check(root, origin.root, origin_run, target, given=workspace is not None)
    try:
        manifest = ws.in_effect(origin_run, at_seq)
    except SupervisorError as e:
        raise ForkError(f"cannot read the workspace of {origin_run} at seq {at_seq}: {e}") from None
    return ForkWorkspace(origin, dataclasses.replace(origin, root=root), manifest, existed=root.is_dir())


def default_workspace(target: Path, origin_root: Path) -> Path:
    """``<fork>.workspace`` beside the fork, or ``<workspace>-<fork name>`` beside the original's workspace when
    the first lies in it; ``-2``, ``-3``... if taken (an empty directory is not taken)."""
    t = Path(os.path.abspath(target)).resolve()
    base = t.with_name(t.name + SUFFIX)
    if _inside(base, origin_root):
        base = origin_root.with_name(f"{origin_root.name}-{t.name}")
    cand, n = base, 1
    while _taken(cand):
        n += 1
        cand = base.with_name(f"{base.name}-{n}")
    return cand


def _taken(p: Path) -> bool:
    """Whether ``p`` holds anything (an empty directory can be the new root; a file or link cannot)."""
    if not os.path.lexists(p):
        return False
    try:
        return p.is_symlink() or not p.is_dir() or any(p.iterdir())
    except OSError:
        return True


def _inside(p: Path, d: Path) -> bool:
    return p == d or p.is_relative_to(d)


def _check(root: Path, origin_root: Path, origin_run: Path, target: Path, *, given: bool) -> None:
    """Refuse a new workspace that is the original's or lies in it, in a run directory, or holds anything."""
    what = f"--workspace {root}" if given else f"the fork's workspace {root}"
    if _inside(root, origin_root):
        raise ForkError(
            f"{what} is inside the original's workspace {origin_root}; choose a directory outside it "
            "(a fork never writes into the original's workspace)"
        )
    for run, whose in ((origin_run, "the run being forked"), (target, "the fork's run directory")):
        if _inside(root, Path(os.path.abspath(run)).resolve()):
            raise ForkError(f"{what} is inside {whose}; choose a directory outside {run}")
    if os.path.lexists(root):
        if not root.is_dir() or root.is_symlink():
            raise ForkError(f"{what} exists and is not a directory; choose a new directory for the fork's files")
        if any(root.iterdir()):
            raise ForkError(
                f"{what} exists and is not empty; choose a new directory for the fork's files (nothing was overwritten)"
            )
