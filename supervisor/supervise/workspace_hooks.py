"""The supervisor's part of a run's workspace (``docs/workspace.md``), in a few calls from its loop.

- before every spawn (:meth:`WorkspaceHooks.before_spawn`): a rollback's restore left pending is finished
  (the supervisor's own, the SDK's, one a killed process left), and before the first one the ``start``
  snapshot of a new run is taken and the live watch started;
- at each journal poll (:meth:`drain`, then :meth:`journal`): the changes the watch saw are attributed to the
  steps by their times and recorded as ``files`` events, and a checkpoint record with no snapshot (an agent that
  does not use the SDK, which takes its own before its record) gets one, taken in a worker thread;
- at the end (:meth:`close`): the last changes, then the watch stops.

Everything that writes ``supervisor.jsonl`` happens on the supervisor's thread: the watch's thread only queues.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..core import rundir, workspace
from ..core.journal_reader import Entry
from ..core.records import Kind
from ..errors import WorkspaceError
from .step_clock import StepClock
from .workspace_watch import Seen, WorkspaceWatch

__all__ = ["BY", "WorkspaceHooks"]

BY = "supervisor"
"""The ``by`` of the snapshots the supervisor takes."""


class WorkspaceHooks:
    """One supervisor's workspace: its snapshots, restores, live watch and ``files`` events."""

    def __init__(self, run_dir: Path, settings: workspace.Settings, *, emit: Callable[..., None],
                 say: Callable[[str], None]) -> None:
        self.run_dir = run_dir
        self.settings = settings
        self._emit = emit
        self._say = say
        self.watch: WorkspaceWatch | None = None
        """Started before the first spawn."""
        self.clock: StepClock | None = None
        self._taken: list[Seen] = []
        self._snapper: ThreadPoolExecutor | None = None
        self._snaps: list[Future[None]] = []
        self._notes: deque[str] = deque()

    def env(self) -> dict[str, str]:
        """The agent's environment for its workspace."""
        return {rundir.ENV_WORKSPACE: str(self.settings.root)}

    # ------------------------------------------------------------------ before a spawn
    def before_spawn(self, records: int) -> None:
        """Make the workspace ready for the next attempt (``records``: the journal's records read so far).

        Raises ``WorkspaceError`` (a cap passed, an unreadable file, a restore refused): the agent must not
        start; nothing is lost, the run resumes once it is fixed."""
        self._wait_snapshots()  # a restore may need the snapshot of a checkpoint just seen
        if self.watch is None:
            self._first(records)
            return
        self.watch.reconcile()  # the last attempt's last writes, not handed over yet
        self.drain()
        self.journal([], running=False)
        with self.watch.quiet():  # the restore's writes are no step's changes
            msg = workspace.finish_rollback(self.run_dir)
        if msg:
            self._say(msg)

    def _first(self, records: int) -> None:
        """Before the first spawn: a pending restore, the ``start`` snapshot of a new run, the watch started."""
        msg = workspace.finish_rollback(self.run_dir)
        if msg:
            self._say(msg)
        store = workspace.Store(self.run_dir)
        base: workspace.Manifest | None = None
        # only a run with no record gets one: a snapshot taken after records would claim to be the workspace
        # before them (a rollback to the start of such a run says its files are not restored)
        if records == 0:
            start = next((ref for ref in reversed(store.index()) if ref.for_ == "start"), None)
            if start is None:
                start = workspace.take(self.run_dir, self.settings, for_="start", seq=None, by=BY)
            base = store.manifest(start.snapshot)
        else:
            try:
                base = workspace.in_effect(self.run_dir, records - 1)
            except WorkspaceError:
                base = None  # every file read once instead
        watch = WorkspaceWatch(self.run_dir, self.settings)
        watch.baseline(base)
        watch.start()
        self.watch = watch
        self.clock = StepClock(records - 1 if records > 0 else None)
        self._say_notes()

    # ------------------------------------------------------------------ at each journal poll
    def drain(self) -> None:
        """Take the changes seen so far (before the journal is read: every one of them happened before the
        records that read brings, so the steps they belong to are known)."""
        if self.watch is not None:
            self._taken.extend(self.watch.take())

    def journal(self, new: list[Entry], *, running: bool) -> None:
        """The records just read (``running``: the agent still runs): steps timed, checkpoints snapshotted,
        then the changes drained attributed and recorded."""
        clock = self.clock
        if clock is None:
            return
        now = time.time_ns()
        for ent in new:
            if isinstance(ent, dict):
                clock.add(ent, now)
                if ent.get("kind") == Kind.CHECKPOINT:
                    self._checkpoint(ent)
        if not running:
            clock.end_all(now)  # its agent is gone: no step of it is in flight any more
        taken, self._taken = self._taken, []
        if taken:
            self._record(clock, taken)
        self._say_notes()

    def _record(self, clock: StepClock, seen: list[Seen]) -> None:
        """One ``files`` event per step (or group of steps in flight together, or gap between steps)."""
        groups: dict[tuple[Any, ...], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        for s in seen:
            spans = clock.during(s.lo_ns, s.hi_ns)
            fields: dict[str, Any]
            if len(spans) == 1:
                sp = spans[0]
                key: tuple[Any, ...] = ("step", sp.seq)
                fields = {"seq": sp.seq, "during": "step", "step": sp.name, "pos": sp.pos}
            elif spans:
                key = ("concurrent", *(sp.seq for sp in spans))
                fields = {"seq": spans[0].seq, "during": "concurrent",
                          "steps": [{"step": sp.name, "pos": sp.pos} for sp in spans]}
            else:
                seq = clock.seq_before(s.lo_ns)
                key = ("between", seq)
                fields = {"seq": seq, "during": "between"}
            groups.setdefault(key, (fields, []))[1].append(s.to_json())
        for fields, changes in groups.values():
            self._emit("files", **fields, changes=changes)

    def _checkpoint(self, rec: dict[str, Any]) -> None:
        """A checkpoint record without its snapshot (the agent does not use the SDK): take one now, in a
        worker thread (the workspace as it is when the record is seen: as near to it as can be)."""
        seq, name = rec.get("seq"), rec.get("name")
        if not isinstance(seq, int):
            return
        try:
            if any(ref.seq == seq and ref.for_ == "checkpoint" for ref in workspace.Store(self.run_dir).index()):
                return  # the SDK's, written before its record
        except WorkspaceError as e:
            self._notes.append(f"cannot read the workspace's snapshots: {e}")
            return
        if self._snapper is None:
            self._snapper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workspace-snapshot")
        label = name if isinstance(name, str) else None
        self._snaps.append(self._snapper.submit(self._take_checkpoint, seq, label))

    def _take_checkpoint(self, seq: int, name: str | None) -> None:
        """In the worker: the snapshot of the checkpoint at ``seq``; a failure is said, the run goes on."""
        try:
            workspace.take(self.run_dir, self.settings, for_="checkpoint", seq=seq, name=name, by=BY)
        except (WorkspaceError, OSError) as e:
            what = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self._notes.append(f"checkpoint {name!r} (seq {seq}) has no workspace snapshot: {what}; "
                               "a rollback to it will not restore its files")

    def _wait_snapshots(self) -> None:
        snaps, self._snaps = self._snaps, []
        for f in snaps:
            f.result()  # the worker catches what it expects; anything else is a bug, raised here

    def _say_notes(self) -> None:
        for q in (self._notes, self.watch.notes if self.watch is not None else None):
            while q:
                self._say(q.popleft())

    # ------------------------------------------------------------------ the end
    def close(self) -> None:
        """The last changes recorded, the snapshots in the worker finished, the watch stopped."""
        try:
            if self.watch is not None:
                self.watch.reconcile()
                self.drain()
                self.journal([], running=False)
            self._wait_snapshots()
        except OSError as e:  # the end of the run is recorded all the same
            self._say(f"could not record the workspace's last changes: {e.strerror or e}")
        finally:
            if self._snapper is not None:
                self._snapper.shutdown(wait=True)
                self._snapper = None
            if self.watch is not None:
                self.watch.close()
                self._say_notes()
                self.watch = None
