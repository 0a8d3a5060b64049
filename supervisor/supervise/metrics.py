"""psutil figures for the agent's whole process tree: CPU %, RSS, threads, open files.

``cpu_percent`` needs two readings of the same process, so ``Process`` objects
are kept across samples (keyed by pid and create time: a reused pid is a new
process). Sampled about once a second by the supervisor's loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass
class TreeSample:
    """One sample of the tree rooted at the agent."""

    processes: int = 0
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    threads: int = 0
    open_files: int = 0


class TreeSampler:
    """Samples the tree of one root pid, plus extra pids (orphans reparented to the supervisor)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self._procs: dict[tuple[int, float], psutil.Process] = {}
        self.last = TreeSample()

    def _tree(self, extra: list[int]) -> list[psutil.Process]:
        roots: list[psutil.Process] = []
        for pid in [self.root, *extra]:
            try:
                roots.append(psutil.Process(pid))
            except psutil.Error:
                continue
        seen: dict[int, psutil.Process] = {}
        for r in roots:
            seen[r.pid] = r
            try:
                for c in r.children(recursive=True):
                    seen.setdefault(c.pid, c)
            except psutil.Error:
                continue
        return list(seen.values())

    def _members(self, pids: list[int]) -> list[psutil.Process]:
        out = []
        for pid in dict.fromkeys([self.root, *pids]):
            try:
                out.append(psutil.Process(pid))
            except psutil.Error:
                continue
        return out

    def sample(self, extra: list[int] | None = None, *, members: list[int] | None = None) -> TreeSample:
        """Read the figures now; processes that vanish mid-read are skipped.

        ``members``: the whole tree is known already (the run's cgroup): no walk of
        ``/proc`` for descendants (one walk per extra root would cost a full scan each).
        """
        s = TreeSample()
        keep: dict[tuple[int, float], psutil.Process] = {}
        procs = self._members(members) if members is not None else self._tree(extra or [])
        for p in procs:
            try:
                key = (p.pid, p.create_time())
                p = self._procs.get(key, p)
                with p.oneshot():
                    cpu = p.cpu_percent(None)
                    rss = p.memory_info().rss
                    threads = p.num_threads()
                    try:
                        files = len(p.open_files())
                    except psutil.AccessDenied:
                        files = 0
            except psutil.Error:
                continue
            keep[key] = p
            s.processes += 1
            s.cpu_percent += cpu
            s.rss_bytes += rss
            s.threads += threads
            s.open_files += files
        self._procs = keep
        s.cpu_percent = round(s.cpu_percent, 1)
        self.last = s
        return s


_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
          "G": 1024**3, "GB": 1024**3, "GIB": 1024**3, "T": 1024**4, "TB": 1024**4, "TIB": 1024**4}


def parse_size(text: str) -> int:
    """``512M``, ``2G``, ``1.5GiB``, ``1048576`` -> bytes (binary units, as ``ps`` and ``top`` show)."""
    t = text.strip().upper().replace(" ", "")
    num = t.rstrip("BKMGTI")
    unit = t[len(num) :]
    if unit not in _UNITS or not num:
        raise ValueError(f"not a size: {text!r} (use e.g. 512M, 2G or a number of bytes)")
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 512M, 2G or a number of bytes)") from None
    if value <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return int(value * _UNITS[unit])


def format_size(n: int) -> str:
    """A byte count for people: ``512 B``, ``1.5 KiB`` ... ``3.0 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
