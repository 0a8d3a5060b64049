"""The agent's process tree as the supervisor keeps it across attempts.

Each attempt's tree sits in a cgroup of its own where Linux lets us (else: its
process group, its session and the subreaper's adopted orphans). The guardian
process is told what a kill -9 of the supervisor would leave, and the lock
records it for the next supervisor (in case the guardian died too); the tree's figures
(CPU, RSS, threads, files) are sampled for the status; at the end anything left
is swept and the cgroup removed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from .guardian import Guardian
from .guardian import start_time as guardian_start_time
from .lock import SupervisorLock
from .metrics import TreeSample, TreeSampler
from .process import CGROUP_PREFIX, Cgroup, Child, kill_leftovers, own_orphans, reap_orphans

__all__ = ["ENV_NO_CGROUP", "AgentTree", "is_ours"]

ENV_NO_CGROUP = "AGENT_SUPERVISOR_NO_CGROUP"
"""Set to 1 to keep the agent out of a cgroup (the group, session and subreaper sweep only): tests, odd hosts."""


class AgentTree:
    """The run's cgroup and guardian, the current attempt's figures, and the last process group for the final sweep."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.cgroup: Cgroup | None = None
        self.guardian: Guardian | None = None
        self.sampler: TreeSampler | None = None
        self.sample = TreeSample()
        """The latest figures of the current attempt's tree (the live status shows them)."""
        self._say = say
        self._last_pgid = 0
        self._told_tree = ""
        self._lock: SupervisorLock | None = None
        self.helpers: set[int] = set()
        """Our own children that are no part of the agent (the notification runner): never swept as leftovers."""

    def start(self, run_dir: Path, lock: SupervisorLock) -> None:
        """Create the cgroup (recorded in the lock, for a supervisor after a kill -9) and start the guardian."""
        self._lock = lock
        if os.environ.get(ENV_NO_CGROUP) != "1":
            self.cgroup = Cgroup.create(f"{CGROUP_PREFIX}.{os.getpid()}.{int(time.time() * 1000)}")
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                lock.record_cgroup(self.cgroup.path)
        self.guardian = Guardian.start(run_dir, self.cgroup)

    def spawned(self, child: Child) -> None:
        """An attempt started: the guardian is told, its figures are sampled from now on."""
        self._last_pgid = child.pgid
        self._told_tree = ""  # the lock's record was cleared with the last attempt: record this one's anew
        if self.guardian is not None:
            self.guardian.tell(f"child {child.pid}")
        self.sampler = TreeSampler(child.pid)

    def not_orphans(self, child: Child | None) -> set[int]:
        """Our own children that are not adopted leftovers: the current agent, the guardian and the ``helpers``."""
        out = set(self.helpers)
        if child is not None:
            out.add(child.pid)
        if self.guardian is not None:
            out.add(self.guardian.pid)
        return out

    def measure(self, child: Child) -> TreeSample | None:
        """Sample the attempt's tree (its cgroup, else its group plus adopted orphans); ``None`` between attempts."""
        if self.sampler is None:
            return None
        mine = self.not_orphans(child)
        reap_orphans(mine)  # adopted grandchildren that died meanwhile: no zombies
        extra = {p.pid for p in own_orphans(mine)}
        if child.cgroup is not None:
            # the cgroup is the whole tree; orphans outside it (none, unless they moved out) are added
            members = [pid for pid in child.cgroup.procs() if pid not in self.helpers]  # not the standby
            self.sample = self.sampler.sample(members=sorted(extra.union(members)))
        else:
            extra.discard(child.pid)
            self.sample = self.sampler.sample(sorted(extra))
            self._tell_tree(extra)
        return self.sample

    def _tell_tree(self, roots: set[int]) -> None:
        """The processes outside the agent's session (adopted orphans and what they started): guardian and lock.

        Without a cgroup they are what a kill -9 of ours would leave that the guardian
        cannot find by session or environment (a double-forked daemon with a cleared one);
        the lock keeps them for the next supervisor, should the guardian die with us.
        """
        pids: list[int] = sorted(roots)  # roots first: what they fork is found from them
        for pid in sorted(roots):
            with contextlib.suppress(psutil.Error):
                pids += sorted(c.pid for c in psutil.Process(pid).children(recursive=True))
        items = []
        for pid in dict.fromkeys(pids):
            start = guardian_start_time(pid)
            if start is not None:
                items.append(f"{pid}:{start}")
        line = "tree " + " ".join(items)
        if line == self._told_tree:
            return
        self._told_tree = line
        if self.guardian is not None:
            self.guardian.tell(line)
        if self._lock is not None:
            with contextlib.suppress(OSError, ValueError):
                self._lock.record_tree(items)  # a full disk: the guardian still knows them

    def release(self, child: Child | None) -> None:
        """At the end: a last sweep of anything left of the agent's tree, the cgroup removed, the guardian let go."""
        try:
            if self._last_pgid or self.cgroup is not None:
                kill_leftovers(self._last_pgid, 0.5, exclude=self.not_orphans(child), log=self._say, cgroup=self.cgroup)
            if self.cgroup is not None:
                if not self.cgroup.remove():
                    self._say(f"could not remove the cgroup {self.cgroup.path}: processes are still in it")
                self.cgroup = None
        except OSError as e:
            self._say(f"could not sweep the agent's process tree: {e}")
        finally:
            if self.guardian is not None:
                self.guardian.done()
                self.guardian = None


def is_ours(child: Child | None, attempt_no: int, pid: Any, supervisor: Any = None, attempt: Any = None) -> bool:
    """Whether a ``start`` record was written by the current attempt: its process or a descendant.

    ``supervisor`` and ``attempt`` are the record's fields of those names (an SDK
    that records its supervisor's pid): they answer even when the writer is gone
    already; else the pid must still be found in the attempt's tree.
    """
    if child is None or not isinstance(pid, int) or pid <= 0:
        return False
    if pid == child.pid:
        return True
    if isinstance(supervisor, int):
        return supervisor == os.getpid() and attempt == attempt_no
    if child.cgroup is not None and child.cgroup.contains(pid):
        return True
    with contextlib.suppress(OSError):
        if os.getsid(pid) == child.pgid:
            return True
    try:
        return any(p.pid == child.pid for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False  # gone already: nothing says it was ours
