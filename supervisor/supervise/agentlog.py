"""``agent.log``: the child's stdout and stderr, teed to the terminal and to a file.

The terminal gets the raw bytes as they come (no line buffering: a progress bar
still works). The file gets whole lines, each prefixed with the time, the
attempt and the stream, with secrets redacted (``supervisor.core.redact.Redactor``):

    2026-11-29T19:20:00.123Z [2:stderr] research_agent: crashing hard in search:q2

Redaction sees every secret whole: complete lines are redacted before they are
split, a PEM private key is followed across lines and chunks, and a line longer
than ``MAX_LINE`` is cut only where no secret is (``_safe_cut``): the last
``overlap`` bytes (the longest token shape or secret value) are held back until
the next chunk shows whether a secret runs across the cut.

Rotation seals ``agent.log`` as ``agent.000001.log``, ``agent.000002.log`` ... when
it passes ``max_bytes``, and keeps the newest ``keep`` sealed files (``supervise
--log-keep``, default ``DEFAULT_KEEP``, as supervisord keeps ``stdout_logfile_backups``
and logrotate ``rotate N``); ``keep=0`` keeps them all. Only ``agent.log``'s own
sealed files are ever removed: never the journal, never a checkpoint.
"""

from __future__ import annotations

import os
import re
import select
import stat
import sys
import time
from collections import deque
from pathlib import Path

from ..core import rundir
from ..core.redact import REDACTED, Redactor, StreamState

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_KEEP = 10
"""Sealed ``agent.log`` files kept: with 16 MiB each, at most 176 MiB of agent output per run."""
MAX_LINE = 64 * 1024
"""A line longer than this is written in pieces (a child printing megabytes without a newline)."""
MAX_HOLD = 1024 * 1024
"""A secret-shaped run still growing at this length is cut anyway (nothing real is that long): bounded memory."""
TEE_BUFFER = 4 * 1024 * 1024
"""Output held for a slow terminal or pipe reader; past this it is dropped from the terminal only."""


_SEALED = re.compile(r"agent\.\d{6,}\.log")


def _nonblocking_if_pipe(fd: int) -> bool:
    """Make our stdout/stderr non-blocking when it is a pipe, so a reader that never reads cannot stall us.

    What the pipe cannot take is buffered (``TEE_BUFFER``) and written as the
    reader catches up (``| tee``, ``| less`` lose nothing); only a reader that
    stops reading altogether loses terminal output. A terminal or a file is left
    alone (O_NONBLOCK on a tty would be shared with the shell). Returns whether
    the fd is usable at all.
    """
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        os.set_blocking(fd, False)
    return True


def _pieces(redacted: bytes) -> list[bytes]:
    """Redacted whole lines, a long one in ``MAX_LINE`` pieces (cutting is safe once its secrets are gone)."""
    out: list[bytes] = []
    for ln in redacted.split(b"\n"):
        while len(ln) > MAX_LINE:
            cut = MAX_LINE
            mark = ln.rfind(REDACTED, cut - len(REDACTED) + 1, cut + len(REDACTED) - 1)
            if 0 < mark < cut:
                cut = mark  # not inside a [REDACTED] marker
            out.append(ln[:cut])
            ln = ln[cut:]
        out.append(ln)
    return out


class _Stream:
    """One output stream of the current attempt: the bytes not written yet, and the redaction state."""

    __slots__ = ("partial", "state")

    def __init__(self) -> None:
        self.partial = b""
        self.state = StreamState()


class AgentLog:
    """Tees child output; keeps the last stderr lines of the current attempt for the exit event."""

    def __init__(
        self,
        run_dir: Path,
        *,
        redact: Redactor | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
        tee: bool = True,
        tail_lines: int = 20,
    ) -> None:
        self.run_dir = run_dir
        self.path = run_dir / rundir.AGENT_LOG
        self.max_bytes = max_bytes
        self.keep = keep
        self._redact = redact
        self._fd = -1
        self._open()
        self.attempt = 0
        self._streams = {"stdout": _Stream(), "stderr": _Stream()}
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._tee_fds: dict[str, int] = {}
        self._tee_pending: dict[str, bytearray] = {}
        if tee:
            for name, f in (("stdout", sys.stdout), ("stderr", sys.stderr)):
                try:
                    fd = f.fileno() if f is not None else -1
                except (OSError, ValueError):
                    fd = -1
                if fd >= 0 and _nonblocking_if_pipe(fd):
                    self._tee_fds[name] = fd

    def _open(self) -> None:
        self._fd = rundir.open_run_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # no link, ours
        self._size = os.fstat(self._fd).st_size

    def begin_attempt(self, attempt: int, pid: int, argv: list[str]) -> None:
        """Start a new attempt: a marker line in the file, an empty stderr tail."""
        self.attempt = attempt
        self._tail.clear()
        self._streams = {"stdout": _Stream(), "stderr": _Stream()}
        line = f"attempt {attempt} started, pid {pid}: {' '.join(argv)}".encode(errors="surrogateescape")
        if self._redact is not None:
            line = self._redact(line)
        self._write_file(self._prefix("supervisor") + line + b"\n")

    def _prefix(self, stream: str) -> bytes:
        return f"{rundir.utc_now()} [{self.attempt}:{stream}] ".encode()

    def feed(self, stream: str, data: bytes) -> None:
        """Bytes read from the child's ``stream`` (``stdout`` or ``stderr``)."""
        self._tee(stream, data)
        st = self._streams[stream]
        buf = st.partial + data
        lines: list[bytes] = []
        cut = buf.rfind(b"\n") + 1
        if cut:  # whole lines: redacted as one block, then split (a long one in pieces: its secrets are gone)
            lines.extend(_pieces(self._clean(st, buf[: cut - 1])))
            buf = buf[cut:]
        hold = MAX_LINE + self._overlap()
        while len(buf) >= hold:
            piece = self._safe_cut(buf)
            if not piece:
                break  # a secret runs to the end of what we have: wait for its end
            lines.append(self._clean(st, buf[:piece]))
            buf = buf[piece:]
        st.partial = buf
        if lines:
            self._write_lines(stream, lines)

    def _overlap(self) -> int:
        """Bytes a long line holds back past a cut: the longest secret that could run across it."""
        return 0 if self._redact is None else self._redact.overlap()

    def _safe_cut(self, buf: bytes) -> int:
        """Where to cut a long unfinished line: at ``MAX_LINE``, or before (or after) a secret across it; 0 to wait."""
        cut = MAX_LINE
        if self._redact is None:
            return cut
        for start, end in self._redact.spans(buf):
            if end <= cut:
                continue
            if start >= cut:
                break
            if start > 0:
                return start
            if end < len(buf):
                return end  # a secret longer than a line, complete: one piece, redacted whole
            return len(buf) if len(buf) >= MAX_HOLD else 0
        return cut

    def _clean(self, st: _Stream, data: bytes) -> bytes:
        return data if self._redact is None else self._redact.redact_stream(data, st.state)

    def end_attempt(self) -> None:
        """The child exited: write its unfinished last lines."""
        for stream in ("stdout", "stderr"):
            st = self._streams[stream]
            rest, st.partial = st.partial, b""
            if rest:
                self._write_lines(stream, _pieces(self._clean(st, rest)))
            st.state = StreamState()

    def _write_lines(self, stream: str, lines: list[bytes]) -> None:
        """Write redacted lines with their prefix; stderr lines also go to the tail (so it holds redacted text only)."""
        prefix = self._prefix(stream)
        lines = [ln.rstrip(b"\r") for ln in lines]
        if stream == "stderr":
            self._tail.extend(ln.decode("utf-8", "replace") for ln in lines)
        self._write_file(b"".join(prefix + ln + b"\n" for ln in lines))

    def stderr_tail(self, n: int = 10) -> list[str]:
        """The last ``n`` stderr lines of the current attempt (redacted, without prefix)."""
        return list(self._tail)[-n:]

    def _tee(self, stream: str, data: bytes) -> None:
        fd = self._tee_fds.get(stream)
        if fd is None:
            return
        pending = self._tee_pending.setdefault(stream, bytearray())
        if len(pending) + len(data) > TEE_BUFFER:
            return  # the reader is stuck: the terminal loses these bytes, the file still gets everything
        pending += data
        self.flush_tee()

    def flush_tee(self) -> bool:
        """Write what the terminal could not take yet; ``True`` if something is still waiting."""
        waiting = False
        for stream, pending in self._tee_pending.items():
            fd = self._tee_fds.get(stream)
            if fd is None:
                pending.clear()
                continue
            try:
                while pending:
                    n = os.write(fd, pending)
                    del pending[:n]
            except BlockingIOError:
                waiting = True
            except OSError:
                self._tee_fds.pop(stream, None)  # the terminal went away; the file still gets everything
                pending.clear()
        return waiting

    def _write_file(self, data: bytes) -> None:
        rundir.write_all(self._fd, data)
        self._size += len(data)
        if self._size >= self.max_bytes:
            self.rotate()

    def rotate(self) -> Path:
        """Seal ``agent.log`` as the next numbered file and start a new one."""
        sealed = rundir.next_sealed(self.run_dir, "agent", ".log")
        os.close(self._fd)
        os.rename(self.path, sealed)
        self._open()
        self.prune()
        return sealed

    def prune(self) -> list[Path]:
        """Remove the oldest sealed ``agent.NNNNNN.log`` files past ``keep``; return them (``keep=0``: none)."""
        if self.keep <= 0:
            return []
        sealed = sorted((p for p in self.run_dir.glob("agent.*.log") if _SEALED.fullmatch(p.name)),
                        key=lambda p: int(p.name[6:-4]))
        gone = sealed[: max(0, len(sealed) - self.keep)]
        for p in gone:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass  # removed by hand meanwhile
        return gone

    def close(self, drain_s: float = 2.0) -> None:
        """Write the unfinished lines; give a slow terminal reader up to ``drain_s`` to take what is held."""
        deadline = time.monotonic() + drain_s
        while self.flush_tee() and time.monotonic() < deadline:
            fds = [self._tee_fds[s] for s, p in self._tee_pending.items() if p and s in self._tee_fds]
            select.select([], fds, [], max(0.0, deadline - time.monotonic()))
        if self._fd >= 0:
            self.end_attempt()
            os.close(self._fd)
            self._fd = -1
