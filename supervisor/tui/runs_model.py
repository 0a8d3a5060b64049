"""The runs under a runs root, for the runs list (no Textual).

A directory is a run when it holds ``journal.jsonl``, a sealed segment or
``run.json``. Counts come from the raw bytes (no parsing), so a root with big
runs lists quickly.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import history as history_mod
from ..core import rundir
from ..core.journal import segment_paths
from ..errors import SupervisorError
from .status import offline_status, run_status

_STEP = b'"kind":"step"'
_COUNT_LIMIT = 64 * 1024 * 1024
"""Past this many journal bytes the step count is not computed (shown as ``-``)."""
_FOLD_LIMIT = 8 * 1024 * 1024
"""Up to this many bytes the journal is folded for an exact count of effective steps."""


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


def is_run_dir(path: Path) -> bool:
    if not path.is_dir():
        return False
    if (path / rundir.JOURNAL).exists() or (path / rundir.RUN_JSON).exists():
        return True
    return any(p.name.startswith("journal.") and p.suffix == ".jsonl" for p in segment_paths(path))


def is_runs_root(path: Path) -> bool:
    """A directory that is not a run itself but holds runs (or is empty: a fresh ``./runs``)."""
    if not path.is_dir() or is_run_dir(path):
        return False
    return True


def _count_steps(run: Path, paths: list[Path]) -> str:
    """Effective steps (folded) for a small journal; a raw count of step records (``~``) for a big one."""
    total = sum(p.stat().st_size for p in paths if p.exists())
    if total > _COUNT_LIMIT:
        return "-"
    if total <= _FOLD_LIMIT:
        try:
            return str(len(history_mod.load(run).steps))
        except OSError:
            return "-"
    n = 0
    for p in paths:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        n += data.count(_STEP) - data.count(b'"error":{')
    return f"~{n}"


def run_info(path: Path, *, ask_supervisor: bool = True) -> RunInfo:
    """The row for one run directory; never raises for a damaged run (it says so instead)."""
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
    status = run_status(path, timeout=0.5) if ask_supervisor else offline_status(path)
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


def list_runs(root: Path) -> list[RunInfo]:
    """Runs under ``root``, newest activity first."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = [run_info(root / n) for n in names if is_run_dir(root / n)]
    out.sort(key=lambda r: r.last_activity, reverse=True)
    return out


def ago(ts: float, now: float | None = None) -> str:
    """``12s ago``, ``5m ago``, ``3h ago``, or the date."""
    d = (now or time.time()) - ts
    if d < 60:
        return f"{int(d)}s ago"
    if d < 3600:
        return f"{int(d // 60)}m ago"
    if d < 86400:
        return f"{int(d // 3600)}h ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))
