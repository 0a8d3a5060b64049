"""The requests the front ends send to the live supervisor, and the run's status as it says it (no Textual).

The status itself is the one ``RunStatus`` of the CLI too: ``run_status`` asks
the live supervisor on its socket, else reads the files (``core.status`` says
what each offline word means).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.status import RunStatus
from ..errors import ControlUnavailable, SupervisorError
from ..supervise.control import ControlClient, run_status

if TYPE_CHECKING:
    from ..views.runs import RunInfo

__all__ = ["RunStatus", "control_request", "list_runs", "live_status", "run_status"]


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


def live_status(path: Path) -> RunStatus:
    """A runs list row's status: the supervisor's word when one answers within half a second, else the files'."""
    return run_status(path, timeout=0.5)


def list_runs(root: Path) -> list[RunInfo]:
    """The runs list the TUI and the CLI show: ``views.runs.list_runs`` with each live supervisor's word."""
    from ..views import runs  # not with this module: the dashboard's start does not load the runs list's model

    return runs.list_runs(root, status_of=live_status)
