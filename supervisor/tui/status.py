"""The run's status for the status bar and the runs list (no Textual), and the control requests the TUI sends.

The status itself is the one ``RunStatus`` of the CLI too: ``run_status`` asks
the live supervisor on its socket, else reads the files (``core.status`` says
what each offline word means).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.status import RunStatus, offline_status
from ..errors import ControlUnavailable, SupervisorError
from ..supervise.control import ControlClient, run_status

__all__ = ["RunStatus", "control_request", "fmt_bytes", "fmt_duration", "offline_status", "run_status"]


def control_request(run_dir: Path, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one request to the live supervisor; raise ``SupervisorError`` with a readable message."""
    try:
        resp = ControlClient(run_dir, timeout=timeout).request(request)
    except ControlUnavailable as e:
        raise SupervisorError(f"no supervisor is running {run_dir}: {e}") from e
    if not isinstance(resp, dict) or not resp.get("ok"):
        err = resp.get("error") if isinstance(resp, dict) else resp
        raise SupervisorError(f"the supervisor refused {request.get('cmd')!r}: {err}")
    return resp


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
