"""The runs under a runs root, for the runs list (no Textual).

A directory is a run when it holds ``journal.jsonl``, a sealed segment or
``run.json``. Step counts are the one fold (``history.Fold``) over the marker
scan of the raw bytes (no step line is parsed): exact for any spacing, and a
root with big runs lists quickly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core import rundir
from ..core.history import Fold, Marker
from ..core.rundir import is_run_dir
from ..core.segments import segment_paths
from ..core.status import RunStatus, offline_status
from ..errors import SupervisorError
from .scan import ScanResult, iter_new_regions, scan_bytes

_COUNT_LIMIT = 256 * 1024 * 1024
"""Past this many journal bytes the step count is not computed (shown as ``-``).

Measured on 2 busy shared cores: the marker scan reads about 180 MB/s (three
64 MB segments of a 1,000,000-step journal: 1.2 s), so a first count of 256 MB
takes 1.5 to 2 s in the runs list's worker; then each file's markers are cached
until it changes (a sealed segment never does): 0.1 ms.
"""
_SCAN_CACHE_MAX = 512
_scan_cache: dict[tuple[str, int, int, int, int], tuple[int, list[Marker]]] = {}
"""(path, inode, size, mtime, first seq) -> (lines, markers) of one journal file."""


@dataclass
class RunInfo:
    """One row of the runs list."""

    path: Path
    id: str
    command: str
    status: str
    attempts: str
    steps: str
    last_activity: float
    live: bool

    @property
    def name(self) -> str:
        """What the runs list calls the run: its directory's name (``id``, ``run.json``'s, may be one word for many
        runs, such as ``run`` for every run an agent started by hand)."""
        return self.path.name


def _count_steps(run: Path, paths: list[Path]) -> str:
    """Effective successful steps of ``run``: its marker scan, folded (``-`` past ``_COUNT_LIMIT``)."""
    try:
        stats = [p.stat() for p in paths]
    except OSError:
        return "-"
    if sum(st.st_size for st in stats) > _COUNT_LIMIT:
        return "-"
    fold = Fold(keep=False)
    seq = 0
    for p, st in zip(paths, stats, strict=True):
        key = (str(p), st.st_ino, st.st_size, st.st_mtime_ns, seq)
        got = _scan_cache.get(key)
        if got is None:
            try:
                got = _scan_file(p, seq)
            except (OSError, SupervisorError):  # unreadable, or refused (a symlink, another user's file)
                return "-"
            if len(_scan_cache) >= _SCAN_CACHE_MAX:
                _scan_cache.pop(next(iter(_scan_cache)))
            _scan_cache[key] = got
        lines, markers = got
        fold.extend(markers)
        seq += lines
    return str(fold.step_count)


def _scan_file(path: Path, first_seq: int) -> tuple[int, list[Marker]]:
    """The number of committed lines of one journal file and its markers (a few: steps are counted, not kept)."""
    found = ScanResult()
    seq = first_seq
    for _region, data in iter_new_regions(path, 0, seq):
        seq += scan_bytes(data, seq, found)
    return seq - first_seq, found.markers


def run_info(path: Path, *, status_of: Callable[[Path], RunStatus] = offline_status) -> RunInfo:
    """The row for one run directory; never raises for a damaged run (it says so instead).

    ``status_of`` gives the run's status: the files' by default; the front ends pass
    ``tui.control.live_status`` to ask a live supervisor first (views import nothing of the supervisor process).
    """
    try:
        meta = rundir.read_run_json(path)
    except SupervisorError:
        meta = {"format": 0}  # the status says "damaged run.json"
    segs = segment_paths(path)
    try:
        mtimes = [p.stat().st_mtime for p in segs] + [path.stat().st_mtime]
    except OSError:
        mtimes = [0.0]
    cmd = meta.get("command")
    command = " ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd or "")
    status = status_of(path)
    state, live = status.state, status.live
    attempts = meta.get("attempts")
    return RunInfo(
        path=path,
        id=str(meta.get("id") or path.name),
        command=command,
        status=state,
        attempts=str(attempts) if attempts is not None else "-",
        steps=_count_steps(path, segs),
        last_activity=max(mtimes),
        live=live,
    )


def list_runs(root: Path, *, status_of: Callable[[Path], RunStatus] = offline_status) -> list[RunInfo]:
    """Runs under ``root``, newest activity first (``status_of`` as for ``run_info``)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = [run_info(root / n, status_of=status_of) for n in names if is_run_dir(root / n)]
    out.sort(key=lambda r: r.last_activity, reverse=True)
    return out
