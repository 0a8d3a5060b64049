"""The run's workspace from the agent's side: which directory it is, and the snapshots the SDK takes of it.

Which directory: the supervisor's ``AGENT_SUPERVISOR_WORKSPACE`` (so a fork's agent works in the fork's
workspace even if its code names the original's), else the one ``run.json`` declares (a run keeps its
workspace however its agent is started), else ``Run.open(workspace=...)``, which a new run then declares.

What the SDK takes (never in a replay, which only reads): before any agent code, the restore a killed
rollback left unfinished and the ``start`` snapshot of a new run; the snapshot of each checkpoint, just
before its record; the ``abandoned`` snapshot, just before the SDK's own rollback record.

:mod:`supervisor.core.workspace` is imported here, on first use: an agent without a workspace never
imports it, and ``from supervisor import Run`` stays as fast as it was.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import rundir
from ..core.records import Record
from ..errors import WorkspaceError

if TYPE_CHECKING:
    from ..core.workspace import Settings, SnapshotRef

BY = "sdk"
"""The ``by`` of the snapshots the SDK takes."""


def resolve(
    run_dir: Path, meta: dict[str, Any], argument: str | os.PathLike[str] | None, *, write: bool
) -> Settings | None:
    """The run's workspace settings, or ``None``: none declared, named by the environment or given.

    ``write`` (not in a replay): a workspace given here or by the environment and not the one ``run.json``
    declares is declared (the declared ignore rules and caps kept), its directory made if missing.
    """
    env = os.environ.get(rundir.ENV_WORKSPACE) or None
    if env is None and argument is None and "workspace" not in meta:
        return None  # the common case: nothing imported, nothing read
    from ..core import workspace

    declared = workspace.settings_of(run_dir)
    wanted = _root(env, "the environment's " + rundir.ENV_WORKSPACE) if env else None
    if wanted is None and argument is not None:
        given = _root(os.fspath(argument), "Run.open(workspace=...)")
        if declared is not None and given != declared.root:
            # run.json's wins over the code's: the run's snapshots are of that directory (a fork's agent run
            # by hand names the original's workspace, which it must not write)
            print(
                f"agent-supervisor: {run_dir} declares the workspace {declared.root}: "
                f"Run.open(workspace={os.fspath(argument)!r}) is not used",
                file=sys.stderr,
            )
        wanted = given if declared is None else None
    if wanted is None:
        return declared
    settings = (
        workspace.Settings(root=wanted) if declared is None else dataclasses.replace(declared, root=wanted)
    )
    if write:
        _make_dir(wanted)
        if settings != declared:
            workspace.declare(run_dir, settings)
    return settings


def _root(raw: str, where: str) -> Path:
    """A workspace path as an absolute, resolved one (relative paths from the current directory)."""
    try:
        return Path(raw).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as e:
        raise WorkspaceError(f"{where} names {raw!r}, which is not a usable path ({e}); give a directory") from None


def _make_dir(root: Path) -> None:
    """Make a new workspace's directory (an agent's first run may name one that does not exist yet)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise WorkspaceError(f"the workspace {root} is a file, not a directory; give a directory") from None
    except OSError as e:
        raise WorkspaceError(f"cannot make the workspace directory {root}: {e.strerror or e}") from None


def at_start(run_dir: Path, settings: Settings, *, new_run: bool) -> None:
    """Before any agent code runs: finish a rollback's restore a killed process left undone (its message to
    stderr, as the supervisor would print it), then take a new run's ``start`` snapshot.

    Only a run with no record yet gets one: a snapshot taken after records would claim to be the workspace
    before them (a checkpoint from before the workspace was declared is restored with a warning instead).
    """
    from ..core import workspace

    msg = workspace.finish_rollback(run_dir)
    if msg:
        print(f"agent-supervisor: {msg}", file=sys.stderr)
    if new_run and not any(ref.for_ == "start" for ref in workspace.Store(run_dir).index()):
        workspace.take(run_dir, settings, for_="start", seq=None, by=BY)


def checkpoint(run_dir: Path, settings: Settings, seq: int, name: str) -> SnapshotRef:
    """The snapshot of the checkpoint record about to be written at ``seq`` (committed once the record is)."""
    from ..core import workspace

    return workspace.take(run_dir, settings, for_="checkpoint", seq=seq, name=name, by=BY)


def abandoned(run_dir: Path, seq: int) -> Callable[[Record], None]:
    """Save the workspace a rollback record about to be written at ``seq`` abandons; returns what to call with
    the record once written (it indexes the snapshot again if the record got another seq)."""
    from ..core import workspace

    ref = workspace.prepare_rollback(run_dir, seq, by=BY)
    return lambda rec: recommit(run_dir, ref, rec.get("seq"))


def recommit(run_dir: Path, ref: SnapshotRef | None, seq: object) -> None:
    """Index ``ref`` again at ``seq`` if its record got another seq than foreseen (a note from another thread
    came in between): a line whose record never came is never used, so the record would have no snapshot."""
    if ref is None or not isinstance(seq, int) or seq == ref.seq:
        return
    from ..core import workspace

    manifest = workspace.Store(run_dir).manifest(ref.snapshot)
    workspace.write_manifest(run_dir, manifest, for_=ref.for_, seq=seq, name=ref.name, by=BY)
