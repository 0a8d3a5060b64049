"""The one app factory (``make_app``) used by the CLI, the tests and the snapshot entry file.

``path`` may be a run directory, a bare ``.jsonl`` journal (the minimal
format, no ``run.json``), or a runs root (a directory of runs, default ``./runs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from ..errors import RunDirError
from ..rundir import check_readable_run_dir
from .runs_model import is_runs_root


class SupervisorApp(App[int]):
    """The agent-supervisor TUI; returns an exit code."""

    CSS_PATH = "app.tcss"
    TITLE = "agent-supervisor"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+q", "quit", "Quit", show=False, priority=True)]

    def __init__(self, path: Path, *, replay: bool = False, on_exit: Any = None) -> None:
        super().__init__()
        self.path = path
        self.replay = replay
        self._on_exit = on_exit

    def on_mount(self) -> None:
        from .dashboard import DashboardScreen
        from .runs_screen import RunsScreen

        if self.path.is_dir() and is_runs_root(self.path) and not self.replay:
            self.push_screen(RunsScreen(self.path))
        else:
            self.push_screen(DashboardScreen(self.path, replay=self.replay))

    def on_unmount(self) -> None:
        if self._on_exit is not None:
            self._on_exit()


def make_app(path: Path, *, replay: bool = False, on_exit: Any = None) -> SupervisorApp:
    """Validate ``path`` (one clear error, no traceback) and build the app.

    A missing ``./runs`` root is fine for ``tui`` (the list says how to start a
    run); anything else missing is a ``RunDirError``.
    """
    path = Path(path)
    if path.is_dir() and is_runs_root(path):
        if replay:
            raise RunDirError(f"{path} holds no journal: pass a run directory (one that holds journal.jsonl) to replay")
    else:
        check_readable_run_dir(path)
    return SupervisorApp(path, replay=replay, on_exit=on_exit)


def run_tui(path: Path, *, replay: bool = False) -> int:
    """Run the TUI in the terminal until the user quits; the exit code."""
    app = make_app(path, replay=replay)
    result = app.run()
    return int(result or 0)
