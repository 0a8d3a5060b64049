"""``supervisor.lock``: one supervisor per run directory, and cleanup after one killed with -9.

The lock is an ``flock`` on the file, so it is released by the kernel whatever
way its holder dies: a lock we can take is never held by a live process. The
file's content says who holds it (pid, create time) and which child it runs
(pid, create time, session), so the next supervisor can find a leftover of the
old attempt with psutil and stop it before starting: never two agents on one
run directory. Without a cgroup it also holds the tree the supervisor last saw
outside the agent's session (``pid:start`` items, as told to the guardian): the
next supervisor stops those still alive with the same start time, and all they forked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psutil

from ..core import rundir
from ..errors import LockedError, SupervisorError
from .guardian import freeze_tree
from .guardian import start_time as proc_start_time
from .process import CGROUP_PREFIX, Cgroup, stop_tree

_SIZE = 16384
"""The content is padded to this size and written with one ``pwrite``: never torn, no truncate needed."""


class SupervisorLock:
    """The flock on ``supervisor.lock`` plus its JSON content."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / rundir.SUPERVISOR_LOCK
        self._fd = -1
        self.info: dict[str, Any] = {}

    def acquire(self, purpose: str = "supervise") -> dict[str, Any] | None:
        """Take the lock; return what the previous (dead) holder left in it, or ``None``.

        Raises ``LockedError`` naming the live holder's pid.
        """
        while True:
            fd = rundir.open_run_file(self.path, os.O_RDWR | os.O_CREAT)  # no link, ours
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _parse(os.pread(fd, _SIZE, 0))
                os.close(fd)
                raise LockedError(_held_message(self.run_dir, holder)) from None
            # the previous holder may have unlinked the file between our open and flock: retry on the new one
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        previous = _parse(os.pread(fd, _SIZE, 0))
        me = psutil.Process()
        self.info = {
            "pid": os.getpid(),
            "create_time": me.create_time(),
            "since": rundir.utc_now(),
            "purpose": purpose,
            "child": None,
        }
        self._write()
        return previous

    def record_child(self, pid: int, create_time: float) -> None:
        """Remember the running child (its session id is its pid: it is started with setsid)."""
        self.info["child"] = {"pid": pid, "create_time": create_time, "sid": pid}
        self._write()

    def clear_child(self) -> None:
        self.info["child"] = None
        self.info.pop("tree", None)  # swept with the attempt
        self._write()

    def record_tree(self, items: list[str]) -> None:
        """Remember the agent's processes outside its session (``pid:start``, roots first): what only we knew of.

        As many as fit (the roots come first: what they fork is found from them).
        """
        while True:
            self.info["tree"] = items
            try:
                self._write()
                return
            except ValueError:
                if not items:
                    raise
                items = items[: len(items) // 2]

    def record_cgroup(self, path: Path | None) -> None:
        """Remember the run's cgroup: after a kill -9 the next supervisor empties and removes it."""
        self.info["cgroup"] = str(path) if path is not None else None
        self._write()

    def _write(self) -> None:
        data = orjson.dumps(self.info)
        if len(data) >= _SIZE:
            raise ValueError("lock content too large")
        os.pwrite(self._fd, data + b" " * (_SIZE - len(data) - 1) + b"\n", 0)

    def release(self) -> None:
        """Remove the file, then drop the lock (in that order, so nobody locks a file about to vanish)."""
        if self._fd < 0:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = -1


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(data.strip() or b"null")
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _held_message(run_dir: Path, holder: dict[str, Any] | None) -> str:
    if not holder:
        return f"{run_dir} is locked by another supervisor that is starting; try again in a moment"
    pid = holder.get("pid")
    if holder.get("purpose") == "rollback":
        return f"{run_dir} is being rolled back by pid {pid}; try again in a moment"
    child = holder.get("child") or {}
    agent = f", agent pid {child.get('pid')}" if child.get("pid") else ""
    return (
        f"{run_dir} is already supervised by pid {pid} (since {holder.get('since')}{agent}); "
        f"use 'agent-supervisor status {run_dir}', or stop it with 'kill {pid}' first"
    )


# --------------------------------------------------------------------------- leftovers


def _same_process(p: psutil.Process, create_time: Any) -> bool:
    try:
        return isinstance(create_time, (int, float)) and abs(p.create_time() - create_time) < 0.05
    except psutil.Error:
        return False


def find_leftovers(run_dir: Path, previous: dict[str, Any] | None) -> list[psutil.Process]:
    """Processes of the previous holder's attempt that still run.

    Four ways in: every process in the recorded cgroup (nothing started inside can
    leave it), the recorded child (pid + create time, so a reused pid is not
    mistaken for it), every process in the child's session (its grandchildren,
    started no earlier than the child), and every process whose environment
    names this run directory and the dead supervisor (grandchildren that left the
    session with setsid).
    """
    if not previous:
        return []
    found = _recorded_processes(previous)
    child = previous.get("child") or {}
    cpid, ctime = child.get("pid"), child.get("create_time")
    session = (cpid, ctime) if isinstance(cpid, int) and isinstance(ctime, (int, float)) else None
    old_sup = str(previous.get("pid", ""))
    target = str(run_dir.resolve())
    me = os.getpid()
    for p in psutil.process_iter(["pid", "create_time", "uids"]):
        if p.pid == me or p.pid in found:
            continue
        try:
            if _in_session(p, session) or _names_the_run(p, old_sup, target):
                found[p.pid] = p
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # gone, or not ours to read
    return [p for p in found.values() if _running(p)]


def _recorded_processes(previous: dict[str, Any]) -> dict[int, psutil.Process]:
    """The members of the recorded cgroup, and the recorded child if it is still the same process."""
    found: dict[int, psutil.Process] = {}
    cg = recorded_cgroup(previous)
    if cg is not None:
        for pid in cg.procs():
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)
    child = previous.get("child") or {}
    cpid = child.get("pid")
    if isinstance(cpid, int):
        try:
            p = psutil.Process(cpid)
            if _same_process(p, child.get("create_time")):
                found[p.pid] = p
        except psutil.Error:
            pass  # the recorded child is gone: nothing of it to stop
    return found


def _in_session(p: psutil.Process, session: tuple[int, float] | None) -> bool:
    """In the recorded child's session, and started no earlier than the child (not a reused session id)."""
    if session is None:
        return False
    sid, ctime = session
    return bool(os.getsid(p.pid) == sid and p.info["create_time"] >= ctime - 0.05)


def _names_the_run(p: psutil.Process, old_sup: str, target: str) -> bool:
    """Our user's process whose environment names the dead supervisor and this run directory."""
    if p.info["uids"] is None or p.info["uids"].real != os.getuid():
        return False
    env = p.environ()
    return env.get(rundir.ENV_SUPERVISED) == old_sup and env.get(rundir.ENV_RUN_DIR) == target


def recorded_cgroup(previous: dict[str, Any] | None) -> Cgroup | None:
    """The cgroup a dead supervisor recorded, if it still exists and is one of ours (by its name)."""
    path = (previous or {}).get("cgroup")
    if not isinstance(path, str) or not Path(path).name.startswith(CGROUP_PREFIX + ".") or not Path(path).is_dir():
        return None
    return Cgroup(Path(path))


def _running(p: psutil.Process) -> bool:
    """Alive and not a zombie (a dead process its new parent has not reaped yet runs nothing)."""
    try:
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def stop_processes(procs: list[psutil.Process], grace: float, log: Callable[[str], None] | None = None) -> list[int]:
    """Stop leftovers of a dead supervisor with ``process.stop_tree``; return the pids that were stopped.

    They may sit in several sessions (a grandchild that left with setsid), so
    each is signalled by pid. Raises if one survives SIGKILL.
    """
    alive = stop_tree(procs, grace, kill_wait=5.0, log=log, what="leftover processes")
    if alive:
        raise SupervisorError(
            f"could not stop leftover processes {alive} of the previous attempt; "
            "stop them by hand before supervising this run again"
        )
    return [p.pid for p in procs]


def kill_recorded_tree(previous: dict[str, Any] | None, wait_s: float = 2.0) -> list[int]:
    """SIGKILL the recorded tree of a dead supervisor (start times checked) and its descendants; return the pids.

    They left the agent's session and cleared their environment (else the session or
    environment finds them): the guardian's sweep would have killed them. Stopped
    first and then walked (``guardian.freeze_tree``), so what they fork meanwhile is caught.
    """
    roots: dict[int, int] = {}
    for item in (previous or {}).get("tree") or []:
        head, _, tail = str(item).partition(":")
        if head.isdigit() and tail.isdigit():
            roots[int(head)] = int(tail)
    frozen = freeze_tree(roots, skip={os.getpid()})
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while any(proc_start_time(pid) == start and _live(pid) for pid, start in frozen.items()):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return sorted(frozen)


def _live(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def remove_recorded_cgroup(previous: dict[str, Any] | None, wait_s: float = 2.0) -> None:
    """Empty (SIGKILL) and remove the cgroup a dead supervisor left; a no-op when there is none."""
    cg = recorded_cgroup(previous)
    if cg is None:
        return
    deadline = time.monotonic() + wait_s
    while True:
        cg.kill()
        if not cg.procs() or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    cg.remove()
