"""``control.sock``: newline-delimited JSON requests and responses to a live supervisor.

Requests: ``{"cmd": "status"}``, ``stop``, ``restart``, ``pause``, ``resume``,
``{"cmd": "rollback", "checkpoint": NAME_OR_SEQ, "reason": TEXT}``. Responses:
``{"ok": true, ...}`` or ``{"ok": false, "error": "why, and what to do"}``.

The socket is mode 0600 in the run directory (0700): only its owner can talk
to it. A run-directory path too long for ``sockaddr_un`` (108 bytes) is reached
through ``/proc/self/fd/N/control.sock`` with an ``O_PATH`` descriptor of the
directory, so deep pytest temp dirs work too.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..core import rundir
from ..errors import ControlTimeout, ControlUnavailable, SupervisorError

if TYPE_CHECKING:
    from ..core.status import RunStatus

MAX_REQUEST = 64 * 1024
_SUN_PATH_MAX = 100




@contextlib.contextmanager
def _sock_path(run_dir: Path) -> Iterator[str]:
    """A path to ``control.sock`` short enough for ``sockaddr_un``."""
    full = str(run_dir / rundir.CONTROL_SOCK)
    if len(full.encode()) <= _SUN_PATH_MAX:
        yield full
        return
    dfd = os.open(run_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{dfd}/{rundir.CONTROL_SOCK}"
    finally:
        os.close(dfd)


Reply = Callable[[dict[str, Any]], None]
Handler = Callable[[dict[str, Any], Reply], None]
"""Called with a request and a ``reply`` function; it may reply at once or later (e.g. after a stop)."""


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.closed = False

    def send(self, resp: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            self.sock.sendall(orjson.dumps(resp, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n")
        except OSError:
            self.closed = True  # the client went away (or its buffer is full): nothing to answer to


class ControlServer:
    """The listening socket and its connections, driven by the supervisor's selector loop."""

    def __init__(self, run_dir: Path, sel: selectors.BaseSelector, handler: Handler) -> None:
        self.run_dir = run_dir
        self.path = run_dir / rundir.CONTROL_SOCK
        self._sel = sel
        self._handler = handler
        self._conns: dict[int, _Conn] = {}
        self.path.unlink(missing_ok=True)  # left by a supervisor killed with -9; we hold the lock
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # created 0600 from the start: no window where others could connect
        try:
            with _sock_path(run_dir) as p:
                self._sock.bind(p)
        finally:
            os.umask(old)
        os.chmod(self.path, rundir.FILE_MODE)
        self._sock.listen(16)
        self._sock.setblocking(False)
        sel.register(self._sock, selectors.EVENT_READ, self._accept)

    def _accept(self) -> None:
        try:
            conn, _ = self._sock.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        c = _Conn(conn)
        self._conns[conn.fileno()] = c
        self._sel.register(conn, selectors.EVENT_READ, lambda: self._read(c))

    def _read(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(c)
            return
        c.buf += data
        while b"\n" in c.buf:
            line, c.buf = c.buf.split(b"\n", 1)
            if line.strip():
                self._dispatch(c, line)
        if len(c.buf) > MAX_REQUEST:
            c.send({"ok": False, "error": f"request longer than {MAX_REQUEST} bytes; send one JSON object per line"})
            self._drop(c)

    def _dispatch(self, c: _Conn, line: bytes) -> None:
        try:
            req = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            c.send({"ok": False, "error": f"request is not JSON ({e}); send one JSON object per line"})
            return
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            c.send({"ok": False, "error": 'request must be a JSON object with a "cmd" string, e.g. {"cmd": "status"}'})
            return
        self._handler(req, c.send)

    def _drop(self, c: _Conn) -> None:
        c.closed = True
        fd = c.sock.fileno()
        if fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(c.sock)
            self._conns.pop(fd, None)
        c.sock.close()

    def close(self) -> None:
        """Close every connection and the socket, and remove the file."""
        for c in list(self._conns.values()):
            self._drop(c)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(self._sock)
        self._sock.close()
        self.path.unlink(missing_ok=True)


class ControlClient:
    """Talks to the supervisor of ``run_dir``: one request, one response line."""

    def __init__(self, run_dir: Path, timeout: float = 2.0) -> None:
        self.run_dir = Path(run_dir)
        self.timeout = timeout

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        """Send ``req`` and return the response; ``ControlUnavailable`` if no supervisor listens."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            try:
                with _sock_path(self.run_dir) as p:
                    s.connect(p)
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as e:
                raise ControlUnavailable(
                    f"no supervisor is running for {self.run_dir} ({type(e).__name__}); "
                    f"start one with 'agent-supervisor supervise --run-dir {self.run_dir} -- CMD'"
                ) from None
            except PermissionError:
                raise ControlUnavailable(
                    f"{self.run_dir / rundir.CONTROL_SOCK}: permission denied; run as the user who owns the run directory"
                ) from None
            buf = b""
            try:
                s.sendall(orjson.dumps(req) + b"\n")
                while b"\n" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            except TimeoutError:
                raise ControlTimeout(
                    f"the supervisor of {self.run_dir} did not answer {req.get('cmd')!r} within {self.timeout:g} s; "
                    "it may be busy stopping the agent: try again, or check 'agent-supervisor status'"
                ) from None
            except ConnectionResetError:
                buf = b""
        finally:
            s.close()
        if b"\n" not in buf:
            raise ControlUnavailable(f"the supervisor of {self.run_dir} closed the connection without an answer (it is exiting)")
        resp = orjson.loads(buf.split(b"\n", 1)[0])
        if not isinstance(resp, dict):
            raise SupervisorError(f"the supervisor of {self.run_dir} sent a bad response: {resp!r}")
        return resp


def run_status(run_dir: Path, *, timeout: float = 2.0, details: bool = False) -> RunStatus:
    """A run's status: the live supervisor's answer on ``control.sock``, else from the files.

    The one status the CLI's ``status``, the TUI's status bar and its runs list
    show (the offline words are explained in ``core.status``). A supervisor that
    does not answer within ``timeout`` is described from the files (with a note
    that it lives). ``details`` adds the offline figures ``status`` prints.
    """
    # imported here: the supervisor process itself never asks (it would carry the module for nothing)
    from ..core.status import RunStatus, offline_status

    run_dir = Path(run_dir)
    if run_dir.is_dir() and (run_dir / rundir.CONTROL_SOCK).exists():
        try:
            resp: dict[str, Any] | None = ControlClient(run_dir, timeout=timeout).request({"cmd": "status"})
        except (ControlUnavailable, ControlTimeout):
            resp = None  # gone meanwhile, or busy: the files say which
        except (OSError, ValueError, SupervisorError):
            resp = None  # a broken answer: the files are the truth then
        if resp is not None and resp.get("ok", True):
            return RunStatus(str(resp.get("state", "unknown")), True, resp)
    return offline_status(run_dir, details=details)
