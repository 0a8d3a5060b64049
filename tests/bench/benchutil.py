"""What the benchmarks share: the floor of a durable step, measured beside the figures it divides."""

from __future__ import annotations

import os
import time
from pathlib import Path

LINE = b"x" * 299 + b"\n"


def raw_sync_floor(path: Path, n: int = 300, line: bytes = LINE) -> float:
    """Seconds per raw ``O_APPEND`` write of ``line`` plus ``fdatasync`` to ``path`` (on the disk under test):
    the least a durable step can cost. The file is left for the caller (it may sit in a tmp dir)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(fd, line)
            os.fdatasync(fd)
        return (time.perf_counter() - t0) / n
    finally:
        os.close(fd)
