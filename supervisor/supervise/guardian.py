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
line that still have the same start time. What it cannot find: a process that
left the session and cleared its environment less than a second before the
supervisor died, where no cgroup is available (docs/supervise.md's section on
process-tree cleanup lists what is caught where).

The supervisor's side is ``Guardian`` below; the script part (``main``) uses the
standard library only, so it starts without the package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

SWEEP_S = 5.0
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


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def sweep_once(supervisor: int, run_dir: str, child: int | None, cgroup: str | None,
               known: dict[int, int] | None = None) -> set[int]:
    """One round: SIGKILL to every live process of the dead supervisor's tree; return the pids hit."""
    me = os.getpid()
    hit: set[int] = set()
    for pid, start in (known or {}).items():
        if pid != me and not _zombie(pid) and start_time(pid) == start and _kill(pid):
            hit.add(pid)
    if cgroup:
        hit |= _sweep_cgroup(cgroup, me)
    sup = str(supervisor).encode()
    target = run_dir.encode()
    for pid in _pids():
        if pid in (me, supervisor) or pid in hit or _zombie(pid):
            continue
        if _of_the_tree(pid, child, sup, target) and _kill(pid):
            hit.add(pid)
    return hit


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
          known: dict[int, int] | None = None) -> set[int]:
    """Rounds of ``sweep_once`` until one finds nothing (a process started during a round is caught by the next)."""
    killed: set[int] = set()
    deadline = time.monotonic() + SWEEP_S
    while time.monotonic() < deadline:
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
        try:
            proc = subprocess.Popen(argv, stdin=r, stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        except OSError:
            os.close(w)
            return None
        finally:
            os.close(r)
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
    told = _Told()
    buf = b""
    while True:
        try:
            data = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if told.take(line):
                return 0
    killed = sweep(args.supervisor, args.run_dir, told.child, args.cgroup, told.known)
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


class _Told:
    """What the supervisor told the guardian so far: the current child, the tree outside its session."""

    def __init__(self) -> None:
        self.child: int | None = None
        self.known: dict[int, int] = {}

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
        elif word == b"tree":
            self.known = {}
            for item in rest.split():
                pid, _, start = item.partition(b":")
                if pid.isdigit() and start.isdigit():
                    self.known[int(pid)] = int(start)
        return False


if __name__ == "__main__":
    raise SystemExit(main())
