"""The guardian: a tiny process that stops the agent's tree if its supervisor is killed with -9.

``PR_SET_PDEATHSIG`` reaches only the supervisor's direct child: an agent started
through ``sh -c``, a grandchild that left the session or a double-forked daemon
would run on unsupervised. The supervisor starts this script once (``python -I -S
guardian.py``: the standard library only, about 40 ms and a few MiB), in a session
of its own so a Ctrl-C or a hang-up meant for the supervisor does not reach it,
with the read end of a pipe as its stdin. The supervisor keeps the write end and
tells it, one line each:

    child PID        the attempt now running (its session id is PID: it is started with setsid)
    tree PID:START.. the agent's processes outside its session the supervisor saw on its last look
                     (about once a second), with their start times (so a reused pid is not hit)
    done             the supervisor stopped everything itself: exit quietly

End of file without ``done`` means the supervisor died. The guardian then sends
SIGKILL, round after round until a round finds nothing (at most ``SWEEP_S``), to:
every process in the run's cgroup (``cgroup.kill``; the cgroup is removed after),
every process in the last child's session, every process whose environment
names this supervisor and run directory, and the processes of the last ``tree``
line that still have the same start time, with their descendants (stopped with
SIGSTOP first, so none forks while the tree is walked).

Without a cgroup, where it may (root: ``CAP_NET_ADMIN`` in the initial
namespaces), the guardian also listens to the kernel's fork and exit events (the
proc connector, ``ForkWatch``): every process forked from the child or from a
``tree`` process is known the moment it exists, so a daemon that left the session
and cleared its environment a moment before the supervisor died is caught too.
Elsewhere it cannot find such a daemon born less than a second (the ``tree``
line's period) before the supervisor died (docs/supervise.md's section on
process-tree cleanup lists what is caught where).

The supervisor's side is ``Guardian`` below; the script part (``main``) uses the
standard library only, so it starts without the package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Protocol

SWEEP_S = 5.0
READY_S = 2.0
"""How long the supervisor waits for the guardian to listen to the kernel's fork events before the first attempt."""
ENV_SUPERVISED = "AGENT_SUPERVISOR_PID"
ENV_RUN_DIR = "AGENT_SUPERVISOR_RUN_DIR"


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _environ(pid: int) -> dict[bytes, bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env: dict[bytes, bytes] = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k] = v
    return env


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _cgroup_procs(cgroup: str) -> list[int]:
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "rb") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat``: the start time in clock ticks since boot (with the pid, a process's identity)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _state(pid: int) -> bytes:
    """The process's state letter (``R``, ``S``, ``T``, ``Z``...); ``b"Z"`` for one gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b"Z"


def _zombie(pid: int) -> bool:
    return _state(pid) == b"Z"


def _stopped(pid: int, wait_s: float = 0.2) -> None:
    """Wait (briefly) until a SIGSTOPped process has stopped: until then it may still fork."""
    deadline = time.monotonic() + wait_s
    while _state(pid) not in (b"T", b"t", b"Z", b"X") and time.monotonic() < deadline:
        time.sleep(0.0005)


def sweep_once(supervisor: int, run_dir: str, child: int | None, cgroup: str | None,
               known: dict[int, int] | None = None) -> set[int]:
    """One round: SIGKILL to every live process of the dead supervisor's tree; return the pids hit."""
    me = os.getpid()
    hit = _sweep_cgroup(cgroup, me) if cgroup else set()
    roots = dict(known or {})
    sup = str(supervisor).encode()
    target = run_dir.encode()
    for pid in _pids():
        if pid in (me, supervisor) or pid in hit or pid in roots or _zombie(pid):
            continue
        if _of_the_tree(pid, child, sup, target):
            start = start_time(pid)
            if start is not None:
                roots[pid] = start
    for pid in freeze_tree(roots, skip={me, supervisor}):
        if _kill(pid):
            hit.add(pid)
    return hit


def _children(pid: int) -> list[int]:
    """A process's children, from ``/proc/PID/task/*/children`` (empty if it is gone)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass  # gone, or a thread ended while we looked: what was read is kept
    return out


def freeze_tree(roots: dict[int, int], skip: set[int] | frozenset[int] = frozenset()) -> dict[int, int]:
    """SIGSTOP each live root whose start time matches, then all its descendants; return them (pid: start).

    Stopped first (waited for: until it has stopped it may still fork), then walked, so
    no child is orphaned to init between the look and the kill. A descendant of one of the run's processes is the run's.
    """
    frozen: dict[int, int] = {}
    todo = list(roots.items())
    while todo:
        pid, start = todo.pop()
        if pid in frozen or pid in skip or _zombie(pid) or start_time(pid) != start:
            continue
        try:
            os.kill(pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            continue  # gone, or not ours to stop
        frozen[pid] = start
        _stopped(pid)  # its children are all known only once it has stopped
        for kid in _children(pid):
            kid_start = start_time(kid)
            if kid_start is not None:
                todo.append((kid, kid_start))
    return frozen


def _sweep_cgroup(cgroup: str, me: int) -> set[int]:
    """The cgroup's members, killed by ``cgroup.kill`` and then one by one (what the first could not)."""
    hit: set[int] = set()
    # the members are read before cgroup.kill: once it has run they may be gone already, and
    # a sweep that counted nothing would say nothing (a loaded machine showed it)
    members = [pid for pid in _cgroup_procs(cgroup) if pid != me and not _zombie(pid)]
    try:
        with open(os.path.join(cgroup, "cgroup.kill"), "wb") as f:
            f.write(b"1")
        hit.update(members)
    except OSError:
        pass  # gone already, or no cgroup.kill: each member is killed one by one, below
    for pid in _cgroup_procs(cgroup):
        if pid != me and not _zombie(pid) and _kill(pid):
            hit.add(pid)
    return hit


def _of_the_tree(pid: int, child: int | None, sup: bytes, target: bytes) -> bool:
    """Whether a process is the agent's: in its session, or with the supervisor's pid and run dir in its environment."""
    try:
        if child is not None and os.getsid(pid) == child:
            return True
    except OSError:
        return False  # gone
    env = _environ(pid)
    return env.get(ENV_SUPERVISED.encode()) == sup and env.get(ENV_RUN_DIR.encode()) == target


def sweep(supervisor: int, run_dir: str, child: int | None, cgroup: str | None,
          known: dict[int, int] | None = None, watch: ForkWatch | None = None) -> set[int]:
    """Rounds of ``sweep_once`` until one finds nothing (a process started during a round is caught by the next).

    With ``watch``, each round also takes what the kernel reported forked from the tree meanwhile.
    """
    killed: set[int] = set()
    deadline = time.monotonic() + SWEEP_S
    while time.monotonic() < deadline:
        if watch is not None:
            watch.drain()
            known = {**(known or {}), **watch.tree}
        hit = sweep_once(supervisor, run_dir, child, cgroup, known)
        if not hit:
            break
        killed |= hit
        time.sleep(0.02)
    if cgroup:
        while _cgroup_procs(cgroup) and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            os.rmdir(cgroup)
        except OSError:
            pass  # still busy, or gone: the next supervise start removes it
    return killed


# --------------------------------------------------------------------------- the kernel's fork events

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
NLMSG_DONE = 3
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_NONE = 0
PROC_EVENT_FORK = 0x00000001
PROC_EVENT_EXIT = 0x80000000
SO_RCVBUFFORCE = 33
_EVENT = 36
"""Where the ``proc_event`` starts in a message: after ``nlmsghdr`` (16 bytes) and ``cn_msg`` (20)."""
_DATA = _EVENT + 16
"""Its union (fork: parent pid and tgid, child pid and tgid; exit: pid, tgid; ack: err), after what, cpu, time."""
_RECENT = 4096
DRAIN_S = 0.1
"""How often the guardian takes the queued fork events (the sweep takes all of them first, whatever the delay)."""
GONE = -1
_EXITED = -1
"""The start time of a tracked process that ended before we looked: no live process has it."""


def _cn_message(payload: bytes, seq: int) -> bytes:
    # the kernel's answer carries our ack + 1 (its seq is its own event counter): ack = seq tells ours apart
    cn = struct.pack("=IIIIHH", CN_IDX_PROC, CN_VAL_PROC, seq, seq, len(payload), 0) + payload
    return struct.pack("=IHHII", 16 + len(cn), NLMSG_DONE, 0, seq, 0) + cn


class ForkWatch:
    """The kernel's fork and exit events (the proc connector): the agent's tree as it grows, with no window.

    Root only (``CAP_NET_ADMIN``, initial pid and user namespaces): ``open`` returns
    ``None`` elsewhere and the guardian keeps to the supervisor's ``tree`` lines.
    Events name every process of the machine; only forks from a tracked process are kept.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.tree: dict[int, int] = {}
        """The tracked processes (pid: start time): the roots added and everything forked from them, until they exit."""
        self._recent: deque[tuple[int, int]] = deque(maxlen=_RECENT)
        """The machine's last forks (parent, child) and exits (``_EXITED``, pid): for a root told late."""

    @classmethod
    def open(cls, wait_s: float = 0.5) -> ForkWatch | None:
        """Subscribe; ``None`` where the kernel refuses or does not answer within ``wait_s``."""
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        except (OSError, AttributeError):
            return None
        watch = cls(sock)
        try:
            sock.bind((0, CN_IDX_PROC))
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)  # a fork storm must not overflow it
            seq = os.getpid()
            sock.send(_cn_message(struct.pack("=I", PROC_CN_MCAST_LISTEN), seq))
            if watch._acked(seq, time.monotonic() + wait_s):
                # Linux 6.6+: fork and exit events only from now on (older kernels ignore this message)
                sock.send(_cn_message(struct.pack("=II", PROC_CN_MCAST_LISTEN, PROC_EVENT_FORK | PROC_EVENT_EXIT), seq))
                sock.setblocking(False)
                return watch
        except OSError:
            pass  # not permitted (not root), or no connector in this kernel: the tree lines remain
        sock.close()
        return None

    def _acked(self, seq: int, deadline: float) -> bool:
        """Wait for the kernel's answer to our subscription (events that come first are taken)."""
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                return False
            if len(data) >= _DATA + 4 and struct.unpack_from("=I", data, 28)[0] == seq + 1 \
                    and struct.unpack_from("=I", data, _EVENT)[0] == PROC_EVENT_NONE:
                return bool(struct.unpack_from("=I", data, _DATA)[0] == 0)
            self.take(data)
        return False

    def close(self) -> None:
        self.sock.close()

    def add(self, pid: int, start: int | None = None) -> None:
        """Track ``pid``, and what it forked among the machine's last few thousand forks (since its birth).

        The agent forks before its ``child`` line reaches us: those forks are taken from the
        recent ones (an exit there ends a pid's part, so a reused pid is not followed).
        """
        start = start_time(pid) if start is None else start
        if start is None or self.tree.get(pid) == start:
            return
        self.tree[pid] = start
        recent = list(self._recent)
        # from its birth; born before the window (a standby that exec'd the agent): alive all through it
        born = max((i for i, (parent, kid) in enumerate(recent) if kid == pid and parent != _EXITED), default=-1)
        members = {pid}
        for parent, kid in recent[born + 1:]:
            if parent == _EXITED:
                members.discard(kid)
            elif parent in members:
                members.add(kid)
        for kid in members - self.tree.keys():
            self._track(kid)  # gone but with its exit still queued: kept until that exit is taken

    def _track(self, pid: int) -> None:
        # gone already (a double fork's middle process): kept as ``GONE``, never killed, so that the
        # fork it made before it went, reported after this one, is still known as the tree's
        start = start_time(pid)
        self.tree[pid] = GONE if start is None else start

    def drain(self) -> None:
        """Take every event the kernel queued."""
        while True:
            try:
                data = self.sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue  # ENOBUFS: events were lost; the tree lines and the sweep's walk remain
            self.take(data)

    def take(self, data: bytes) -> None:
        """One message: a fork from a tracked process adds the child, an exit ends the tracking."""
        if len(data) < _DATA + 16:
            return
        what = struct.unpack_from("=I", data, _EVENT)[0]
        if what == PROC_EVENT_FORK:
            _, parent, pid, tgid = struct.unpack_from("=IIII", data, _DATA)
            if pid != tgid:
                return  # a new thread, not a process
            self._recent.append((parent, pid))
            if parent in self.tree:
                self._track(pid)
        elif what == PROC_EVENT_EXIT:
            pid, tgid = struct.unpack_from("=II", data, _DATA)
            if pid == tgid:
                self._recent.append((_EXITED, pid))
                self.tree.pop(pid, None)


class Guardian:
    """The ``guardian.py`` process: stops the agent's tree if this supervisor is killed with -9.

    Fed one line per spawn (``child PID``) through a pipe only we hold; ``done``
    when we stopped everything ourselves. Its end of file without ``done`` is our death.
    """

    def __init__(self, proc: subprocess.Popen[bytes], fd: int) -> None:
        self.proc = proc
        self.fd = fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls, run_dir: Path, cgroup: _HasPath | None) -> Guardian | None:
        """Start it (in a session of its own); ``None`` if it cannot be (the subreaper and PDEATHSIG remain)."""
        if not sys.executable:
            return None
        script = Path(__file__)
        argv = [sys.executable, "-I", "-S", str(script), "--supervisor", str(os.getpid()), "--run-dir", str(run_dir)]
        if cgroup is not None:
            argv += ["--cgroup", str(cgroup.path)]
        try:
            r, w = os.pipe()  # not inheritable: the agent never holds our end, so our death is its EOF
        except OSError:
            return None
        # without a cgroup it listens to the kernel's fork events: the agent starts once it does (it says so on
        # stdout), else a daemon forked in the first moments would be known only from the first ``tree`` line
        out = subprocess.DEVNULL if cgroup is not None else subprocess.PIPE
        try:
            proc = subprocess.Popen(argv, stdin=r, stdout=out, start_new_session=True, close_fds=True)
        except OSError:
            os.close(w)
            return None
        finally:
            os.close(r)
        if proc.stdout is not None:
            with contextlib.suppress(OSError):
                select.select([proc.stdout], [], [], READY_S)  # a line or end of file; at worst we go on
            proc.stdout.close()
        return cls(proc, w)

    def tell(self, line: str) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.fd, line.encode() + b"\n")

    def done(self) -> None:
        """We stopped everything: let it exit quietly, and reap it."""
        self.tell("done")
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2.0)


class _HasPath(Protocol):
    path: Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agent-supervisor-guardian")
    p.add_argument("--supervisor", type=int, required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--cgroup", default=None)
    args = p.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # only the supervisor's end of the pipe ends us
    # a cgroup holds the whole tree already: the fork events are for the run without one
    told = _Told(ForkWatch.open() if args.cgroup is None else None)
    if args.cgroup is None:
        with contextlib.suppress(OSError):
            os.write(1, b"ready\n" if told.watch is not None else b"polling\n")
            os.close(1)
    if _listen(told):
        return 0
    killed = sweep(args.supervisor, args.run_dir, told.child, args.cgroup, told.known, told.watch)
    if killed:
        try:
            sys.stderr.write(
                f"agent-supervisor: the supervisor (pid {args.supervisor}) died without stopping its agent: "
                f"killed {len(killed)} process(es) of its tree {sorted(killed)}; "
                f"resume with 'agent-supervisor supervise --run-dir {args.run_dir}'\n"
            )
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # no stderr left to say it on: the sweep is done all the same
    return 0


def _listen(told: _Told) -> bool:
    """Take the supervisor's lines (and the kernel's events) until ``done`` (``True``) or end of file (``False``)."""
    buf = b""
    while True:
        if told.watch is not None:
            # the kernel queues the events (8 MiB): taken in batches, a few thousand a second cost little
            ready = select.select([0], [], [], DRAIN_S)[0]
            told.watch.drain()
            if not ready:
                continue
        try:
            data = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            return False
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if told.take(line):
                return True


class _Told:
    """What the supervisor told the guardian so far: the current child, the tree outside its session."""

    def __init__(self, watch: ForkWatch | None = None) -> None:
        self.child: int | None = None
        self.known: dict[int, int] = {}
        self.watch = watch

    def take(self, line: bytes) -> bool:
        """Take one line (``child PID``, ``tree PID:START ...``, ``done``); ``True`` for ``done``."""
        word, _, rest = line.partition(b" ")
        if word == b"done":
            return True
        if word == b"child":
            try:
                self.child = int(rest)
            except ValueError:
                self.child = None
            if self.child is not None and self.watch is not None:
                self.watch.add(self.child)
        elif word == b"tree":
            self.known = {}
            for item in rest.split():
                pid, _, start = item.partition(b":")
                if pid.isdigit() and start.isdigit():
                    self.known[int(pid)] = int(start)
                    if self.watch is not None:
                        self.watch.add(int(pid), int(start))
        return False


if __name__ == "__main__":
    raise SystemExit(main())
