"""The run's status for the status bar and the runs list, from the control socket or the files (no Textual).

With a live supervisor the socket is the truth (state, pid, CPU, RSS). Without
one the files tell what happened: ``run.json``'s final status, the last
supervisor event (a crash), the last journal record (a rollback).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import rundir
from ..errors import SupervisorError


@dataclass
class RunStatus:
    """What the status bar shows."""

    state: str = "unknown"
    live: bool = False
    fields: dict[str, Any] = field(default_factory=dict)


def control_status(run_dir: Path, timeout: float = 1.0) -> dict[str, Any] | None:
    """The supervisor's ``status`` answer, or ``None`` when no supervisor lives."""
    if not (run_dir / rundir.CONTROL_SOCK).exists():
        return None
    from ..errors import ControlUnavailable
    from ..supervise.control import ControlClient

    try:
        resp = ControlClient(run_dir, timeout=timeout).request({"cmd": "status"})
    except ControlUnavailable:
        return None
    except (OSError, SupervisorError, ValueError):
        return None
    return resp if isinstance(resp, dict) and resp.get("ok", True) else None


def control_request(run_dir: Path, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one request to the live supervisor; raise ``SupervisorError`` with a readable message."""
    from ..errors import ControlUnavailable
    from ..supervise.control import ControlClient

    try:
        resp = ControlClient(run_dir, timeout=timeout).request(request)
    except ControlUnavailable as e:
        raise SupervisorError(f"no supervisor is running {run_dir}: {e}") from e
    if not isinstance(resp, dict) or not resp.get("ok"):
        err = resp.get("error") if isinstance(resp, dict) else resp
        raise SupervisorError(f"the supervisor refused {request.get('cmd')!r}: {err}")
    return resp


def offline_state(meta: dict[str, Any], last_event: dict[str, Any] | None, last_kind: str | None) -> str:
    """The state word when no supervisor answers."""
    status = str(meta.get("status") or "")
    if status in ("succeeded", "failed", "stopped"):
        return status
    if last_kind == "rollback":
        return "rolled back"
    if last_event is not None:
        ev = last_event.get("event")
        if ev == "exit" and (last_event.get("code") not in (0, None) or last_event.get("signal")):
            return "crashed"
        if ev in ("give-up",):
            return "failed"
        if ev in ("stop",):
            return "stopped"
        if ev == "succeeded":
            return "succeeded"
    pid = meta.get("supervisor_pid")
    if status == "running" and isinstance(pid, int) and not _pid_alive(pid):
        return "crashed"
    return status or "unknown"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fmt_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return "-"


def fmt_duration(s: Any) -> str:
    if not isinstance(s, (int, float)):
        return "-"
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
