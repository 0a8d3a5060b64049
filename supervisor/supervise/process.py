"""One attempt of the agent as an OS process: spawn, learn of its exit at once, stop its whole tree.

The child runs in its own session (``setsid``), so its process group is the
agent and everything it started: a stop or a crash is cleaned up with one
``killpg``, and a Ctrl-C meant for the supervisor does not hit the agent
directly (the supervisor forwards it, then escalates, as systemd does). The
child also gets ``PR_SET_PDEATHSIG(SIGKILL)``: if the supervisor is killed with
-9, the agent dies with it instead of running on unsupervised. The exit is
learned through a ``pidfd`` in the supervisor's selector, not on a polling tick.

A process can leave the group and the session (``setsid``, a double fork), so
where Linux offers it the child is also put in a cgroup v2 of its own
(``Cgroup``): nothing started inside can leave it, and ``cgroup.kill`` ends all
of it. Without a writable cgroup the supervisor is a child subreaper, and the
sweep after an exit (``kill_leftovers``) repeats until no process of the tree is
left: a grandchild re-parented to us while the sweep runs is caught too.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # not glibc/musl: no prctl, PDEATHSIG is skipped (Linux is the supported platform)
    _libc = None


def _make_preexec(parent: int, cgroup_procs: str | None = None) -> Callable[[], None]:
    """The function run in the child between fork and exec: die with the parent, enter the cgroup.

    Entering the cgroup here, before ``exec``, means nothing the agent starts can
    be outside it (moving it from the parent after ``Popen`` would race its first fork).
    """
    libc = _libc

    def preexec() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # the supervisor died between fork and prctl: the signal will never come, so go now
        if os.getppid() != parent:
            os._exit(1)
        if cgroup_procs is not None:
            try:
                fd = os.open(cgroup_procs, os.O_WRONLY)
                try:
                    os.write(fd, b"0")  # "0": the writing process itself
                finally:
                    os.close(fd)
            except OSError:
                pass  # the parent checks, moves it itself or falls back to the process group

    return preexec


# --------------------------------------------------------------------------- cgroup v2


CGROUP_PREFIX = "agent-supervisor"


def cgroup2_base() -> Path | None:
    """The directory of this process's own cgroup v2 (mount point + path), or ``None`` without cgroup v2."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            rel = next((ln.rstrip("\n")[3:] for ln in f if ln.startswith("0::")), None)
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [ln.split() for ln in f]
    except OSError:
        return None
    if rel is None or rel.endswith(" (deleted)"):
        return None
    for parts in mounts:
        try:
            fstype = parts[parts.index("-") + 1]
        except (ValueError, IndexError):
            continue
        if fstype != "cgroup2":
            continue
        root, mount = parts[3], parts[4]
        if root != "/" and not (rel == root or rel.startswith(root + "/")):
            continue  # a bind mount of another part of the tree
        sub = rel[len(root):] if root != "/" else rel
        return Path(mount) / sub.lstrip("/")
    return None


class Cgroup:
    """A cgroup v2 directory that holds one agent's whole tree (whatever sessions or groups it makes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, name: str) -> Cgroup | None:
        """Make ``name`` under our own cgroup; ``None`` where cgroup v2 is missing or not writable by us."""
        base = cgroup2_base()
        if base is None:
            return None
        path = base / name
        try:
            path.mkdir(mode=0o755)
        except FileExistsError:
            pass  # ours from before (same name): it is emptied before use
        except OSError:
            return None  # not delegated to us, read-only: the subreaper sweep does the work
        cg = cls(path)
        if not os.access(path / "cgroup.procs", os.W_OK):
            cg.remove()
            return None
        return cg

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def procs(self) -> list[int]:
        """The processes in it now (empty if it is gone)."""
        try:
            with open(self.path / "cgroup.procs", "rb") as f:
                return [int(x) for x in f.read().split()]
        except (FileNotFoundError, ValueError):
            return []

    def add(self, pid: int) -> bool:
        try:
            with open(self.path / "cgroup.procs", "wb") as f:
                f.write(str(pid).encode())
            return True
        except OSError:
            return False

    def contains(self, pid: int) -> bool:
        return pid in self.procs()

    def kill(self) -> None:
        """SIGKILL to every process in it at once (``cgroup.kill``, Linux 5.14), else one by one."""
        try:
            with open(self.path / "cgroup.kill", "wb") as f:
                f.write(b"1")
            return
        except FileNotFoundError:
            if not self.path.exists():
                return
        except OSError:
            pass  # no cgroup.kill (a kernel before 5.14): SIGKILL each member, below
        with contextlib.suppress(OSError):
            self.signal(signal.SIGKILL)

    def signal(self, sig: int) -> None:
        for pid in self.procs():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def remove(self) -> bool:
        """Remove the directory (it must be empty); ``True`` if it is gone."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


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


# --------------------------------------------------------------------------- the agent's trace context

TRACEPARENT = "TRACEPARENT"
TRACESTATE = "TRACESTATE"
TRACEPARENT_MODES = ("auto", "on", "replace", "off")
"""``supervise --traceparent``: ``auto`` is ``on`` with ``--otlp-endpoint``, else ``off`` (the CLI decides)."""


def set_traceparent(env: dict[str, str], run_dir: Path, attempt: int, mode: str) -> None:
    """Give the agent the W3C ``TRACEPARENT`` of attempt ``attempt``'s span, so its own spans join the run's trace.

    ``on``: unless ``env`` already has one (the user's: their trace wins, the agent's spans nest there);
    ``replace``: whatever it has (its ``TRACESTATE``, another trace's, goes too); ``off``: untouched."""
    if mode == "off" or (mode == "on" and env.get(TRACEPARENT)):
        return
    from ..export.otlp import attempt_span_context  # orjson only, no OpenTelemetry: cheap, and only when asked

    trace_hex, span_hex = attempt_span_context(run_dir, attempt)
    env[TRACEPARENT] = f"00-{trace_hex}-{span_hex}-01"
    env.pop(TRACESTATE, None)


class Proc(Protocol):
    """What an attempt uses of its ``Popen`` (or of ``standby.Spawned``)."""

    pid: int
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def wait(self, timeout: float | None = None) -> int: ...


class Child:
    """A spawned attempt: the ``Popen``, its pidfd and its output pipes."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None = None, *,
                 cgroup: Cgroup | None = None, pass_fds: tuple[int, ...] = (),
                 proc: Proc | None = None) -> None:
        """Spawn ``argv``; or, with ``proc``, take the agent the standby (``standby.Standby``) has just started."""
        self.argv = argv
        self.started = time.monotonic()
        self.proc: Proc = proc or subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_make_preexec(os.getpid(), cgroup.procs_file if cgroup else None),
            close_fds=True,
            pass_fds=pass_fds,  # the secrets pipe's write end (supervise.secrets)
        )
        self.pid = self.proc.pid
        self.pgid = self.pid  # setsid made it the leader of its own group and session
        self.cgroup = cgroup
        self.pidfd = -1
        try:
            if cgroup is not None and not cgroup.contains(self.pid) and not cgroup.add(self.pid):
                self.cgroup = None  # the group, the session and the subreaper sweep still hold it
            self.pidfd = os.pidfd_open(self.pid)
        except BaseException:
            # out of descriptors: a child we cannot watch must not run on; the caller retries later
            self.signal_group(signal.SIGKILL)
            if cgroup is not None:
                cgroup.kill()
            with contextlib.suppress(ChildProcessError):
                self.proc.wait()
            self.close()
            raise
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
        pass  # no /proc children file (a kernel without it): psutil's slower walk, below
    try:
        return [c.pid for c in psutil.Process().children()]
    except (OSError, psutil.Error):
        return []  # no descriptor left to look: the next look finds them


Exclude = int | Collection[int] | None
"""Our own children that are not orphans: the current agent, the guardian."""


def _excluded(exclude: Exclude) -> Collection[int]:
    if exclude is None:
        return ()
    return (exclude,) if isinstance(exclude, int) else exclude


def own_orphans(exclude: Exclude = None) -> list[psutil.Process]:
    """Our children other than ``exclude`` (the current agent, the guardian): descendants adopted as subreaper."""
    skip = _excluded(exclude)
    out = []
    for pid in _child_pids():
        if pid not in skip:
            with contextlib.suppress(psutil.Error):
                out.append(psutil.Process(pid))
    return out


def reap_orphans(exclude: Exclude = None) -> None:
    """Collect the exit status of adopted orphans that died, so no zombie stays behind."""
    skip = _excluded(exclude)
    for pid in _child_pids():
        if pid not in skip:
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


SWEEP_ROUNDS_S = 3.0
"""How long the sweep after an exit keeps looking for processes re-parented to us meanwhile."""


def tree_leftovers(pgid: int, exclude: Exclude = None, cgroup: Cgroup | None = None) -> dict[int, psutil.Process]:
    """What is left of an agent's tree: its group and session, our adopted orphans and their descendants, its cgroup."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    skip = set(_excluded(exclude)) | {me}

    def add(pid: int) -> None:
        if pid not in skip and pid not in found:
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)

    if cgroup is not None:
        for pid in cgroup.procs():
            add(pid)
    if pgid > 0 and group_alive(pgid):  # 0 would be our own group
        for p in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.pid) == pgid or os.getsid(p.pid) == pgid:
                    add(p.pid)
    for p in own_orphans(skip):
        add(p.pid)
        with contextlib.suppress(psutil.Error):
            for c in p.children(recursive=True):
                add(c.pid)
    return {pid: p for pid, p in found.items() if _alive(p)}


def kill_leftovers(pgid: int, grace: float, exclude: Exclude = None, log: Callable[[str], None] | None = None,
                   cgroup: Cgroup | None = None) -> list[int]:
    """After the agent's exit, stop what it left: its group, its cgroup, orphans adopted by us (``stop_tree``).

    The first round gets SIGTERM and ``grace`` seconds; then the sweep repeats with
    SIGKILL until a look finds nothing (a grandchild whose parent died in the first
    round is re-parented to us only then), for at most ``SWEEP_ROUNDS_S`` seconds.
    Returns the pids signalled; returns at once when nothing is left (the usual case).
    """
    def reap() -> None:
        reap_orphans(exclude)

    group = pgid if pgid > 0 else None  # 0 would be our own group
    reap()
    targets = tree_leftovers(pgid, exclude, cgroup)
    if not targets:
        return []
    stopped = list(targets)
    stop_tree(list(targets.values()), grace, pgid=group, on_wait=reap, log=log, what="leftovers")
    deadline = time.monotonic() + SWEEP_ROUNDS_S
    while True:
        if cgroup is not None:
            cgroup.kill()
        reap()
        more = tree_leftovers(pgid, exclude, cgroup)
        if not more or time.monotonic() >= deadline:
            break
        stopped += [pid for pid in more if pid not in stopped]
        stop_tree(list(more.values()), 0.0, pgid=group, sig=signal.SIGKILL, kill_wait=0.5, on_wait=reap, log=log,
                  what="leftovers re-parented meanwhile")
    return stopped


def _alive(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
