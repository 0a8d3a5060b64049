"""The standby spawner: a small process already in the run's cgroup that starts each restarted attempt.

Starting an attempt with ``Popen`` costs more than a bare respawn: the child enters the
run's cgroup between fork and exec (writing ``cgroup.procs`` waits for an RCU grace
period of the kernel, 9 to 15 ms here), and the function run there (``PR_SET_PDEATHSIG``,
the cgroup) makes ``subprocess`` fork the whole supervisor instead of ``vfork``. The
standby pays both once per run: it is ``python -I -S -c _CODE``, started as an attempt is
(its own session, PDEATHSIG, in the cgroup) once the first attempt has run 0.2 s, and
waits on a socket. For a restart the supervisor sends it the command, the environment
and the attempt's pipes (``SCM_RIGHTS``); it forks twice, and the grandchild, born in
the cgroup, is adopted by the supervisor (a child subreaper) as its intermediate parent
exits. Once adopted it sets PDEATHSIG, reports its pid on a status pipe, starts a
session and execs the agent: the agent is the supervisor's own child, as a ``Popen``
one is. A failed exec comes back on the status pipe as ``Popen`` reports it (an
``OSError`` with the errno); a standby that died or cannot be used is dropped, and the
attempt is spawned with ``Popen``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import IO

from ..core.redact import ENV_SECRETS_FD
from .process import Cgroup, _make_preexec
from .secrets import SecretsPipe

__all__ = ["ANSWER_S", "Spawned", "Standby"]

ANSWER_S = 10.0
"""How long a restart waits for the standby's child to report its pid before it spawns with ``Popen``."""

_CODE = r"""
import ctypes, json, os, signal, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
sup = int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)

def child(m, fds):
    out, err, status = fds[0], fds[1], fds[2]
    deadline = time.monotonic() + 5
    while os.getppid() != sup:  # the intermediate exits at once: adopted by the supervisor (a subreaper)
        if time.monotonic() > deadline:
            os._exit(1)
        time.sleep(0.0002)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG, as the supervisor's own children get
    if os.getppid() != sup:
        os._exit(1)
    os.write(status, b"p%d\n" % os.getpid())
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    keep = {0, 1, 2, status}
    env = m["env"]
    if len(fds) > 3:
        keep.add(fds[3])
        os.set_inheritable(fds[3], True)
        env[m["fd_env"]] = str(fds[3])
    for fd in os.listdir("/proc/self/fd"):
        if int(fd) not in keep:
            try:
                os.close(int(fd))
            except OSError:
                pass  # the listing's own descriptor, closed already: nothing else can fail here
    os.set_inheritable(status, False)
    for s in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(s, signal.SIG_DFL)
    try:
        if m["cwd"] is not None:
            os.chdir(m["cwd"])
        os.execvpe(m["argv"][0], m["argv"], env)
    except OSError as e:
        os.write(status, json.dumps([e.errno, e.strerror or str(e)]).encode())
    os._exit(127)

while True:
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
    except OSError:
        os._exit(0)
    if not msg:
        os._exit(0)
    m = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        try:
            if os.fork() == 0:
                child(m, fds)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    for fd in fds:
        os.close(fd)
"""
"""The standby's program (standard library only): a loop of requests, each a double fork whose grandchild execs."""

class Spawned:
    """An agent the standby started, our child by adoption: the parts of ``Popen`` an attempt uses."""

    def __init__(self, pid: int, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """The exit code (``-N`` for signal N, as ``Popen``'s); ``subprocess.TimeoutExpired`` past ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            try:
                pid, st = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: unknown, as Popen says it
                self.returncode = 0
                break
            if pid:
                self.returncode = os.waitstatus_to_exitcode(st)
            elif deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            else:
                time.sleep(0.005)
        return self.returncode

    def poll(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.wait(0)
        return None


class Standby:
    """The run's standby spawner (``None`` where it cannot run): :meth:`spawn` starts an attempt in it."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.proc = proc
        self._sock = sock

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def make(cls, cwd: str | None, cgroup: Cgroup | None) -> Standby | None:
        """Start the standby as an attempt is started (in the cgroup); ``None`` if it cannot be."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _CODE, str(theirs.fileno()), str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                cwd=cwd, start_new_session=True,
                preexec_fn=_make_preexec(os.getpid(), cgroup.procs_file if cgroup else None),
                close_fds=True, pass_fds=(theirs.fileno(),),
            )
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        standby = cls(proc, ours)
        if cgroup is not None and not cgroup.contains(proc.pid) and not cgroup.add(proc.pid):
            standby.drop()  # outside the cgroup its attempts would be too
            return None
        return standby

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str | None, secrets: SecretsPipe) -> Spawned | None:
        """Start ``argv`` through the standby: the agent, our child; ``None`` if the standby could not (it is
        dropped: spawn with ``Popen``). Raises ``OSError`` where the command cannot be executed, as ``Popen``."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        env = {k: v for k, v in env.items() if k != ENV_SECRETS_FD}  # set to the agent's own fd number there
        msg = json.dumps({"argv": argv, "env": env, "cwd": cwd, "fd_env": ENV_SECRETS_FD}).encode()
        try:
            socket.send_fds(self._sock, [msg], [out_w, err_w, st_w, *secrets.pass_fds])
        except OSError:  # gone, or the message is too large for one datagram
            for fd in (out_r, err_r, st_r):
                os.close(fd)
            self.drop()
            return None
        finally:
            for fd in (out_w, err_w, st_w):  # each closed once: the standby has its copies (or none)
                os.close(fd)
        said = _read_all(st_r, time.monotonic() + ANSWER_S)
        os.close(st_r)  # past the deadline: a child that still comes fails to write its pid, and exits
        pid_line, _, rest = said.partition(b"\n")
        if not pid_line.startswith(b"p") or not pid_line[1:].isdigit():  # the standby died before its child
            os.close(out_r)
            os.close(err_r)
            self.drop()
            return None
        spawned = Spawned(int(pid_line[1:]), os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0))
        if rest:  # the exec failed: the child exits 127
            code, text = json.loads(rest)
            spawned.wait()
            for f in (spawned.stdout, spawned.stderr):
                if f is not None:
                    f.close()
            raise OSError(code, text, argv[0])
        return spawned

    def drop(self) -> None:
        """End the standby (killed and reaped) and close its socket."""
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session and group: its requests' children are not
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.proc.kill()
            self.proc.wait()
        self._sock.close()


def _read_all(fd: int, deadline: float) -> bytes:
    """Everything until end of file (the status pipe closes on the child's exec or exit), or what came by
    ``deadline`` (a stopped or starved standby must not stall the supervisor: without its pid line the
    attempt is spawned with ``Popen``)."""
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return b"".join(chunks)
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
