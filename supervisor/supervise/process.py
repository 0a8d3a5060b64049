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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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


Stoppable = psutil.Process | subprocess.Popen[Any]


def _gone(p: Stoppable) -> bool:
    if isinstance(p, subprocess.Popen):
        return p.poll() is not None
    return not _alive(p)


def _send(targets: Sequence[Stoppable], pgid: int | None, sig: int) -> None:
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)  # the group is empty, or not ours: the targets below are still signalled
    for p in targets:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            p.send_signal(sig)  # gone already: what we want


def _log_info(text: str) -> None:
    """The default log of ``stop_tree``: the ``logging`` module, imported only here.

    The supervisor passes its own progress lines; importing ``logging`` up front
    would cost it 0.6 MiB of RSS for nothing.
    """
    import logging

    logging.getLogger(__name__).info(text)


def stop_tree(
    targets: Sequence[Stoppable],
    grace: float,
    *,
    pgid: int | None = None,
    sig: int = signal.SIGTERM,
    kill_wait: float = 2.0,
    on_wait: Callable[[], None] | None = None,
    log: Callable[[str], None] | None = None,
    what: str = "process",
) -> list[int]:
    """Stop processes and their group: ``sig``, a timed wait of ``grace`` s, then SIGKILL; each step logged.

    ``sig`` goes to the whole process group ``pgid`` (if given: grandchildren
    included) and to each target; after ``grace`` seconds whatever still runs
    gets SIGKILL, and we wait up to ``kill_wait`` more. ``on_wait`` runs on each
    poll (the supervisor reaps its adopted orphans there). Returns the pids
    still alive at the end (normally none). What each caller passes as ``grace``:

    - the supervisor after an attempt exited (``kill_leftovers``): ``min(--stop-grace, 3)`` s: the agent
      is gone, these are its leftovers, and the restart waits for them;
    - the supervisor's emergency cleanup (leaving its loop with a child alive): 0.5 s after a SIGKILL;
    - leftovers of a supervisor killed with -9 (``lock.stop_processes``): ``--stop-grace`` before
      ``supervise`` starts its attempt (they may still be checkpointing), 5 s before an offline rollback;
    - ``replay --verify`` after Ctrl-C: its ``_STOP_GRACE_S`` after a first second for the terminal's SIGINT;
    - the TUI demo's supervisor: 5 s, after its stop request had 10 s (it stops its own agent meanwhile).
    """
    say = log or _log_info
    if not targets and (pgid is None or not group_alive(pgid)):
        return []
    pids = [p.pid for p in targets]
    where = f"process group {pgid} ({what} {pids})" if pgid is not None else f"{what} {pids}"
    say(f"stopping {where}: {signal_name(sig)}, up to {grace:g} s, then SIGKILL")
    _send(targets, pgid, sig)
    t0 = time.monotonic()
    if _wait_gone(targets, pgid, t0 + grace, on_wait):
        say(f"{where} exited {time.monotonic() - t0:.2f} s after {signal_name(sig)}")
        return []
    left = [p.pid for p in targets if not _gone(p)]
    say(f"{where}: {left or 'group members'} still running after {grace:g} s: SIGKILL")
    _send(targets, pgid, signal.SIGKILL)
    if _wait_gone(targets, pgid, time.monotonic() + kill_wait, on_wait):
        say(f"{where} killed")
        return []
    left = [p.pid for p in targets if not _gone(p)]
    say(f"{where}: {left} still alive {kill_wait:g} s after SIGKILL")
    return left


def _wait_gone(targets: Sequence[Stoppable], pgid: int | None, deadline: float, on_wait: Callable[[], None] | None) -> bool:
    """Poll until every target and the group are gone (``True``) or the deadline passes (``False``)."""
    while True:
        if on_wait is not None:
            on_wait()
        if all(_gone(p) for p in targets) and (pgid is None or not group_alive(pgid)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def kill_leftovers(pgid: int, grace: float, exclude: int | None = None, log: Callable[[str], None] | None = None) -> list[int]:
    """After the agent's exit, stop what it left: its group, and orphans adopted by us (``stop_tree``).

    Returns the pids signalled; returns at once when nothing is left (the usual case).
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
    stop_tree(list(targets.values()), grace, pgid=pgid, on_wait=lambda: reap_orphans(exclude), log=log,
              what="leftovers")
    return list(targets)


def _alive(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
