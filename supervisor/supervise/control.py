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
import errno
import os
import re
import selectors
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..core import rundir
from ..errors import ControlBusy, ControlTimeout, ControlUnavailable, SupervisorError

if TYPE_CHECKING:
    from ..core.status import RunStatus

MAX_REQUEST = 64 * 1024
"""The longest request line, blank lines before it included; a connection over it gets one error and is closed."""
MAX_CONNECTIONS = 64
"""Control connections open at once; more are answered with an error and closed (descriptors are finite)."""
MAX_LINES_PER_TICK = 32
"""Requests of one connection handled per wake-up of the loop; the rest wait for the next turn."""
ACCEPT_BACKOFF_S = 0.2
"""How long the socket is left alone after ``accept`` failed for want of descriptors or memory."""
IDLE_TIMEOUT_S = 10.0
"""A connection that sent no byte for this long and waits for no answer is closed (a slow or idle client
never holds a slot for good); when all ``MAX_CONNECTIONS`` are open, the longest idle such one makes room."""
_SUN_PATH_MAX = 100
_TOO_MANY = (b'{"ok": false, "busy": true, "error": "the supervisor is busy: it has too many control connections '
             b'waiting for answers; try again"}\n')




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
        self.buf = bytearray()
        """Bytes received since the last request taken out (blank lines before it are dropped as they come)."""
        self.scanned = 0
        """How far ``buf`` is known to hold no newline: each byte is scanned once (no quadratic re-scan)."""
        self.junk = 0
        """Blank bytes received since the last request: they count toward ``MAX_REQUEST`` too."""
        self.closed = False
        self.last = time.monotonic()
        """When a byte last came in (or the connection was accepted)."""
        self.awaiting = 0
        """Requests handed to the handler and not answered yet: such a connection is never idle."""

    def idle_since(self) -> float | None:
        """When the connection went idle, ``None`` while it waits for an answer."""
        return None if self.awaiting else self.last

    def send(self, resp: dict[str, Any]) -> None:
        self.awaiting = max(0, self.awaiting - 1)
        if self.closed:
            return
        try:
            self.sock.sendall(orjson.dumps(resp, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n")
        except OSError:
            self.closed = True  # the client went away (or its buffer is full): nothing to answer to

    def next_line(self) -> bytes | None:
        """The next request line, ``None`` if no whole one is buffered; ``ValueError`` past ``MAX_REQUEST``.

        Linear in the bytes received: a run of blank lines is skipped with one C-level
        search, the front of the bytearray is dropped in place, and a partial line is
        never scanned twice.
        """
        buf = self.buf
        m = _NON_BLANK.search(buf)
        if m is None:
            self.junk += len(buf)
            buf.clear()
            self.scanned = 0
        elif m.start():
            self.junk += m.start()
            del buf[: m.start()]
            self.scanned = max(0, self.scanned - m.start())
        nl = buf.find(b"\n", self.scanned)
        if nl < 0:
            self.scanned = len(buf)
            if self.junk + len(buf) > MAX_REQUEST:
                raise ValueError(_TOO_LONG)
            return None
        if self.junk + nl > MAX_REQUEST:
            raise ValueError(_TOO_LONG)
        line = bytes(buf[:nl])
        del buf[: nl + 1]
        self.scanned = 0
        self.junk = 0
        return line


_TOO_LONG = f"request longer than {MAX_REQUEST} bytes; send one JSON object per line"
_NON_BLANK = re.compile(rb"[^ \t\r\n]")


class ControlServer:
    """The listening socket and its connections, driven by the supervisor's selector loop.

    Bounded so that no client can stall or starve the loop: at most ``MAX_CONNECTIONS``
    at once (more are answered with an error and closed at once), at most ``MAX_REQUEST``
    bytes per request line (blank lines before it included: over it, one error and the
    connection is closed), at most ``MAX_LINES_PER_TICK`` requests of a connection handled
    per wake-up (the rest waits in ``backlog`` for ``pump``). When ``accept`` fails for
    want of resources (no descriptors, no memory) the socket is left alone for
    ``ACCEPT_BACKOFF_S``, and the supervisor goes on supervising.
    """

    def __init__(self, run_dir: Path, sel: selectors.BaseSelector, handler: Handler,
                 on_error: Callable[[str, OSError], None] | None = None) -> None:
        self.run_dir = run_dir
        self.path = run_dir / rundir.CONTROL_SOCK
        self._sel = sel
        self._handler = handler
        self._on_error = on_error or (lambda what, e: None)
        self._conns: dict[int, _Conn] = {}
        self.backlog: set[_Conn] = set()
        """Connections holding whole request lines not handled yet (``pump`` takes them)."""
        self.refused = 0
        """Connections closed at once because ``MAX_CONNECTIONS`` were open."""
        self._accept_paused_until: float | None = None
        self.path.unlink(missing_ok=True)  # left by a supervisor killed with -9; we hold the lock
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)  # created 0600 from the start: no window where others could connect
            try:
                with _sock_path(run_dir) as p:
                    self._sock.bind(p)
            finally:
                os.umask(old)
            os.chmod(self.path, rundir.FILE_MODE)
            self._sock.listen(64)
            self._sock.setblocking(False)
        except BaseException:
            self._sock.close()
            raise
        sel.register(self._sock, selectors.EVENT_READ, self._accept)

    @property
    def wake_at(self) -> float | None:
        """When ``pump`` has work: now (a backlog), the end of an accept pause, an idle connection's timeout, or never."""
        if self.backlog:
            return 0.0
        idle = [t for c in self._conns.values() if (t := c.idle_since()) is not None]
        at = [t for t in (self._accept_paused_until, min(idle) + IDLE_TIMEOUT_S if idle else None) if t is not None]
        return min(at) if at else None

    def _accept(self) -> None:
        try:
            conn, _ = self._sock.accept()
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # the connection waits in the backlog; without a pause the loop would spin on it
                self._on_error(f"accepting a control connection (paused {ACCEPT_BACKOFF_S:g} s)", e)
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(self._sock)
                self._accept_paused_until = time.monotonic() + ACCEPT_BACKOFF_S
                return
            if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR):
                return  # the client gave up before we accepted
            raise
        if len(self._conns) >= MAX_CONNECTIONS:
            self._make_room()
        if len(self._conns) >= MAX_CONNECTIONS:  # every one waits for an answer: busy, said as such
            self.refused += 1
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.send(_TOO_MANY)
            conn.close()
            return
        conn.setblocking(False)
        c = _Conn(conn)
        self._conns[conn.fileno()] = c
        self._sel.register(conn, selectors.EVENT_READ, lambda: self._read(c))

    def _make_room(self) -> None:
        """Close the connection idle the longest (none waiting for an answer: those are never closed)."""
        idle = [(t, c) for c in self._conns.values() if (t := c.idle_since()) is not None]
        if idle:
            self._drop(min(idle, key=lambda tc: tc[0])[1])

    def _read(self, c: _Conn) -> None:
        c.last = time.monotonic()
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
        self._handle(c)

    def _handle(self, c: _Conn) -> None:
        """Handle up to ``MAX_LINES_PER_TICK`` buffered requests of ``c``; note it in ``backlog`` if more wait."""
        self.backlog.discard(c)
        for _ in range(MAX_LINES_PER_TICK):
            if c.closed:
                self._drop(c)
                return
            try:
                line = c.next_line()
            except ValueError as e:
                c.send({"ok": False, "error": str(e)})
                self._drop(c)
                return
            if line is None:
                return
            self._dispatch(c, line)
        if b"\n" in c.buf:
            self.backlog.add(c)

    def pump(self) -> None:
        """Called on every turn of the loop: the requests left over from a busy connection, the end of an accept
        pause, the idle connections' timeouts."""
        for c in list(self.backlog):
            self._handle(c)
        now = time.monotonic()
        for c in [c for c in self._conns.values() if (t := c.idle_since()) is not None and now - t >= IDLE_TIMEOUT_S]:
            self._drop(c)
        if self._accept_paused_until is not None and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = None
            with contextlib.suppress(KeyError, ValueError):
                self._sel.register(self._sock, selectors.EVENT_READ, self._accept)

    def _dispatch(self, c: _Conn, line: bytes) -> None:
        try:
            req = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            c.send({"ok": False, "error": f"request is not JSON ({e}); send one JSON object per line"})
            return
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            c.send({"ok": False, "error": 'request must be a JSON object with a "cmd" string, e.g. {"cmd": "status"}'})
            return
        c.awaiting += 1
        self._handler(req, c.send)

    def _drop(self, c: _Conn) -> None:
        c.closed = True
        self.backlog.discard(c)
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
        if resp.get("busy") is True:  # it lives: never taken for "no supervisor"
            raise ControlBusy(f"the supervisor of {self.run_dir} is busy ({resp.get('error')})")
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
