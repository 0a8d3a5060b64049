"""Durable writes off the restart path: one background thread runs fsync-heavy work in order.

Writing ``run.json`` atomically costs two fsyncs (10-20 ms on a busy disk); done
inline after a spawn it would delay noticing the next crash of a short-lived
agent. The loop hands such work here; ``drain`` waits for it (before the final
status is written, and at exit), so the order of writes is kept.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

RESOURCE_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG,  # the disk
    errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.EAGAIN,  # descriptors, memory, processes
})
"""Errors of the machine, not of the user's input: the supervisor backs off and retries, and keeps supervising."""


def is_resource_error(e: BaseException) -> bool:
    """An ``OSError`` that says a resource ran out (disk, quota, descriptors, memory), not that the input is wrong."""
    return isinstance(e, OSError) and e.errno in RESOURCE_ERRNOS


def cut_torn_tail(path: Path) -> None:
    """Cut ``path`` back to its last complete line (a write that failed half-way, on a full disk)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - 256 * 1024)
            tail = os.pread(fd, size - start, start)
            nl = tail.rfind(b"\n")
            end = start + nl + 1 if nl >= 0 else (0 if start == 0 else size)
            if end < size:
                os.ftruncate(fd, end)
        finally:
            os.close(fd)


class Persister:
    """A single worker thread with a FIFO of callables; failures are kept for the loop to report."""

    def __init__(self) -> None:
        self._q: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._work, name="agent-supervisor-persist", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            fn = self._q.get()
            try:
                if fn is None:
                    return
                fn()
            except BaseException as e:
                self.errors.append(e)
            finally:
                self._q.task_done()

    def submit(self, fn: Callable[[], None]) -> None:
        self._q.put(fn)

    def drain(self) -> None:
        """Wait until everything submitted so far is done."""
        if self._thread.is_alive():
            self._q.join()

    def take_errors(self) -> list[BaseException]:
        errs, self.errors = self.errors, []
        return errs

    def close(self) -> None:
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()
