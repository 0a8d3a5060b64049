"""Stop signals (SIGINT, SIGTERM, SIGHUP) delivered into the supervisor's selector loop.

The Python handler only queues the signal; ``set_wakeup_fd`` wakes the selector,
and the loop handles the signal between two events, never inside one.
SIGHUP (the terminal closed) stops like SIGTERM: an agent left without its
supervisor would be worse than a clean stop that resumes later.
"""

from __future__ import annotations

import contextlib
import selectors
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalInbox:
    """Installs the handlers; calls ``on_signal(signum)`` from the loop."""

    def __init__(self, sel: selectors.BaseSelector, on_signal: Callable[[int], None]) -> None:
        self._sel = sel
        self._on_signal = on_signal
        self._pending: list[int] = []
        self._r, self._w = socket.socketpair()
        self._old_wakeup = -1
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        self._r.setblocking(False)
        self._w.setblocking(False)
        self._old_wakeup = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._handler)
        self._sel.register(self._r, selectors.EVENT_READ, self._drain)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signum)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._r.recv(512):
                pass
        sigs, self._pending = self._pending, []
        for sig in sigs:
            self._on_signal(sig)

    def restore(self) -> None:
        """Put the previous handlers back and close the wakeup socket."""
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self._old_wakeup)
        for sig, h in self._old.items():
            signal.signal(sig, h)
        self._old.clear()
        with contextlib.suppress(KeyError, ValueError, RuntimeError):
            self._sel.unregister(self._r)
        self._r.close()
        self._w.close()
