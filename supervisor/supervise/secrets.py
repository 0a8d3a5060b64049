"""The supervisor's end of the secrets channel: values the agent registers, learned before its output is redacted.

Per attempt, a pipe: the child inherits the write end (its number in
``AGENT_SUPERVISOR_SECRETS_FD``); the SDK writes each new secret value as one
JSON string and a newline (``supervisor.core.redact.send_secrets``) before
``add_secret`` returns. The supervisor drains the read end (non-blocking) after
it reads each chunk of the agent's output and before it redacts that chunk, and
whenever the pipe is readable (an agent that registers many values and prints
nothing must not block on a full pipe). Values go into the supervisor's
``Redactor`` and stay there for the life of the supervisor process; they are
never written anywhere.
"""

from __future__ import annotations

import contextlib
import os

import orjson

from ..core.redact import ENV_SECRETS_FD, Redactor

MAX_VALUE_LINE = 1024 * 1024
"""A longer line is dropped (bounded memory): no real secret is that long."""


class SecretsPipe:
    """One attempt's pipe: ``env()`` and ``pass_fds`` for the spawn, then ``drain()`` into the redactor."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.read_fd, self.write_fd = os.pipe()  # both close-on-exec; Popen's pass_fds makes the write end inheritable
        os.set_blocking(self.read_fd, False)
        self._buf = bytearray()
        self._skipping = False  # inside an overlong line: drop up to its newline
        self.eof = False

    def env(self) -> dict[str, str]:
        return {ENV_SECRETS_FD: str(self.write_fd)}

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.write_fd,) if self.write_fd >= 0 else ()

    def spawned(self) -> None:
        """The child has its copy of the write end: close ours (EOF then means every writer is gone)."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def drain(self) -> int:
        """Read what the pipe holds now; add each complete value to the redactor. Returns how many were new."""
        if self.read_fd < 0:
            return 0
        new = 0
        while True:
            try:
                data = os.read(self.read_fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                self.eof = True
                break
            if not data:
                self.eof = True
                break
            new += self._take(data)
        return new

    def _take(self, data: bytes) -> int:
        new = 0
        self._buf += data
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                if len(self._buf) > MAX_VALUE_LINE:
                    self._buf.clear()
                    self._skipping = True
                return new
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            if self._skipping:
                self._skipping = False
                continue
            with contextlib.suppress(orjson.JSONDecodeError):
                value = orjson.loads(line)
                if isinstance(value, str) and self.redactor.add(value):
                    new += 1

    def close(self) -> None:
        """Take what is left, then close both ends."""
        self.drain()
        self.spawned()
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
