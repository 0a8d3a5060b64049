"""One attempt of the agent as an OS process: spawn, learn of its exit at once, stop its whole tree.

The child runs in its own session (``setsid``), so its process group is the
agent and everything it started: a stop or a crash is cleaned up with one
``killpg``, and a Ctrl-C meant for the supervisor does not hit the agent
directly (the supervisor forwards it, then escalates, as systemd does). The
child also gets ``PR_SET_PDEATHSIG(SIGKILL)``: if the supervisor is killed with
-9, the agent dies with it instead of running on unsupervised. The exit is
learned through a ``pidfd`` in the supervisor's selector, not on a polling tick.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # not glibc/musl: no prctl, PDEATHSIG is skipped (Linux is the supported platform)
    _libc = None


def _make_preexec(parent: int) -> Callable[[], None]:
    """The function run in the child between fork and exec: die with the parent."""
    libc = _libc

    def preexec() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # the supervisor died between fork and prctl: the signal will never come, so go now
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def become_subreaper() -> bool:
    """Adopt orphaned descendants (a grandchild whose parent, the agent, crashed), so none escapes cleanup."""
    if _libc is None:
        return False
    return bool(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


@dataclass
class ExitStatus:
    """How an attempt ended: ``code`` for a normal exit, ``signal`` (a name) if killed."""

    code: int | None
    signal: str | None

    def describe(self) -> str:
        return f"signal {self.signal}" if self.signal else f"code {self.code}"


class Child:
    """A spawned attempt: the ``Popen``, its pidfd and its output pipes."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None = None) -> None:
        self.argv = argv
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_make_preexec(os.getpid()),
            close_fds=True,
        )
        self.pid = self.proc.pid
        self.pgid = self.pid  # setsid made it the leader of its own group and session
        self.pidfd = os.pidfd_open(self.pid)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.out_fd = self.proc.stdout.fileno()
        self.err_fd = self.proc.stderr.fileno()
        os.set_blocking(self.out_fd, False)
        os.set_blocking(self.err_fd, False)
        try:
            self.create_time = psutil.Process(self.pid).create_time()
        except psutil.Error:
            self.create_time = time.time()
        self.status: ExitStatus | None = None

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started

    def reap(self) -> ExitStatus:
        """Collect the exit status (call when the pidfd is readable: it does not block then)."""
        rc = self.proc.wait()
        self.status = ExitStatus(None, signal_name(-rc)) if rc < 0 else ExitStatus(rc, None)
        return self.status

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the child's whole process group; ``False`` if the group is empty."""
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return False

    def read_available(self, fd: int) -> bytes | None:
        """What the pipe holds now; ``None`` at end of file."""
        chunks: list[bytes] = []
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EBADF:
                    return None
                raise
            if not data:
                return b"".join(chunks) if chunks else None
            chunks.append(data)
            if len(chunks) >= 16:
                break  # let the loop breathe; the selector calls again
        return b"".join(chunks)

    def close(self) -> None:
        """Close the pidfd and the pipes (after the child was reaped)."""
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies included) is still in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _child_pids() -> list[int]:
    """Our direct children, from ``/proc/self/task/*/children`` (cheap), else psutil (a full scan)."""
    pids: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids.extend(int(x) for x in f.read().split())
        return pids
    except OSError:
        return [c.pid for c in psutil.Process().children()]


def own_orphans(exclude: int | None = None) -> list[psutil.Process]:
    """Our children other than the current agent: descendants adopted as subreaper."""
    out = []
    for pid in _child_pids():
        if pid != exclude:
            with contextlib.suppress(psutil.Error):
                out.append(psutil.Process(pid))
    return out


def reap_orphans(exclude: int | None = None) -> None:
    """Collect the exit status of adopted orphans that died, so no zombie stays behind."""
    for pid in _child_pids():
        if pid != exclude:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def kill_leftovers(pgid: int, grace: float, exclude: int | None = None) -> list[int]:
    """After the agent's exit, stop what it left: its group, and orphans adopted by us.

    SIGTERM, up to ``grace`` seconds, then SIGKILL. Returns the pids signalled.
    Blocks at most ``grace`` + 2 s; returns at once when nothing is left (the usual case).
    """
    reap_orphans(exclude)
    targets: dict[int, psutil.Process] = {}
    if group_alive(pgid):
        for p in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.pid) == pgid:
                    targets[p.pid] = p
    for p in own_orphans(exclude):
        targets.setdefault(p.pid, p)
    if not targets:
        return []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    for p in targets.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap_orphans(exclude)
        if not any(_alive(p) for p in targets.values()) and not group_alive(pgid):
            return list(targets)
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    for p in targets.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(_alive(p) for p in targets.values()):
        reap_orphans(exclude)
        time.sleep(0.01)
    return list(targets)


def _alive(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
