"""The standby: the next attempt's process, made while the current attempt runs, so a restart is one ``exec``.

Starting an attempt costs more than a bare ``Popen``: the child enters the run's
cgroup between fork and exec (writing ``cgroup.procs`` waits for an RCU grace period
of the kernel, 9 to 15 ms here), and the function run there (``PR_SET_PDEATHSIG``,
the cgroup) makes ``subprocess`` fork the whole supervisor instead of ``vfork``.
A standby pays both ahead: it is ``python -I -S -c _CODE`` started exactly as an
attempt is (its own session, PDEATHSIG, in the cgroup, the next attempt's output
and secrets pipes), waiting on a pipe. At the restart the supervisor writes it the
attempt's argv and environment; it execs them, so the agent keeps the standby's
pid and pipes. A failed exec comes back on a status pipe as ``Popen`` reports it
(an ``OSError`` with the errno); a standby that died meanwhile is dropped, and the
attempt is spawned the usual way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

from .process import Cgroup, _make_preexec
from .secrets import SecretsPipe

__all__ = ["Standby"]

_CODE = r"""
import json, os, signal, sys
go, status = int(sys.argv[1]), int(sys.argv[2])
chunks = []
while True:
    b = os.read(go, 1 << 16)
    if not b:
        break
    chunks.append(b)
os.close(go)
if not chunks:
    os._exit(0)
m = json.loads(b"".join(chunks))
os.write(status, b"x")
os.set_inheritable(status, False)
for s in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(s, signal.SIG_DFL)
try:
    os.execvpe(m["argv"][0], m["argv"], m["env"])
except OSError as e:
    os.write(status, json.dumps([e.errno, e.strerror or str(e)]).encode())
os._exit(127)
"""
"""The standby's program (standard library only): read the command, say so, reset what Python ignores
(``subprocess`` restores SIGPIPE and SIGXFSZ before an exec too), exec; a failed exec is written back."""


class Standby:
    """A made-ahead attempt process; :meth:`go` execs the agent in it, :meth:`drop` ends it unused."""

    def __init__(self, proc: subprocess.Popen[bytes], go_fd: int, status_fd: int, secrets: SecretsPipe) -> None:
        self.proc = proc
        self.secrets = secrets
        """The pipe the next attempt reports secrets on (its write end is the standby's already)."""
        self._go = go_fd
        self._status = status_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def make(cls, cwd: str | None, cgroup: Cgroup | None, secrets: SecretsPipe) -> Standby | None:
        """Start a standby as an attempt is started; ``None`` if it cannot be (the restart then spawns anew)."""
        go_r, go_w = os.pipe()
        st_r, st_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _CODE, str(go_r), str(st_w)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_make_preexec(os.getpid(), cgroup.procs_file if cgroup else None),
                close_fds=True,
                pass_fds=(go_r, st_w, *secrets.pass_fds),
            )
        except OSError:
            for fd in (go_w, st_r):
                os.close(fd)
            return None
        finally:
            os.close(go_r)
            os.close(st_w)
        if cgroup is not None and not cgroup.contains(proc.pid) and not cgroup.add(proc.pid):
            standby = cls(proc, go_w, st_r, secrets)
            standby.drop()  # outside the cgroup: an attempt started the usual way gets the fallbacks
            return None
        return cls(proc, go_w, st_r, secrets)

    def go(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes] | None:
        """Exec ``argv`` with ``env`` in the standby: its ``Popen``, now the agent's; ``None`` if the standby is
        gone (dropped: spawn the attempt anew). Raises ``OSError`` where the command cannot be executed, as
        ``Popen`` does (the standby is reaped)."""
        msg = json.dumps({"argv": argv, "env": env}).encode()  # lone surrogates (undecodable bytes) escaped
        try:
            view = memoryview(msg)
            while view:
                view = view[os.write(self._go, view):]
        except OSError:  # it died (killed by a person, the OOM killer): nothing was started
            self.drop()
            return None
        os.close(self._go)
        self._go = -1
        said = _read_all(self._status)
        os.close(self._status)
        self._status = -1
        if not said:  # it died before it read the command
            self.drop()
            return None
        if len(said) > 1:  # the exec failed: the standby exits 127
            code, text = json.loads(said[1:])
            self.proc.wait()
            self._close_pipes()
            raise OSError(code, text, argv[0])
        return self.proc

    def drop(self) -> None:
        """End an unused standby (killed and reaped) and close its pipes; its secrets pipe too."""
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session and group: nothing else is in it
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.proc.kill()
            self.proc.wait()
        for fd in (self._go, self._status):
            if fd >= 0:
                os.close(fd)
        self._go = self._status = -1
        self._close_pipes()
        self.secrets.close()

    def _close_pipes(self) -> None:
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


def _read_all(fd: int) -> bytes:
    """Everything until end of file (the status pipe closes on the standby's exec or exit)."""
    chunks: list[bytes] = []
    while True:
        try:
            b = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        if not b:
            return b"".join(chunks)
        chunks.append(b)
