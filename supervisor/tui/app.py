"""The one app factory (``make_app``) used by the CLI, the tests and the snapshot entry file.

``path`` may be a run directory, a bare ``.jsonl`` journal (the minimal
format, no ``run.json``), or a runs root (a directory of runs, default ``./runs``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from ..core.rundir import check_readable_run_dir
from ..errors import RunDirError
from .runs_model import is_runs_root


def report_worker_error(screen: Screen[Any], event: Worker.StateChanged, consequence: str = "") -> str:
    """Notify about a worker that died (never a silent pass); return the text shown, ``""`` if it did not die.

    Worker state messages do not bubble: every screen that runs workers calls this from its handler.
    """
    err = event.worker.error
    if event.state != WorkerState.ERROR or err is None:
        return ""
    text = f"{event.worker.name}: {type(err).__name__}: {err}" + (f" ({consequence})" if consequence else "")
    screen.notify(text, severity="error", timeout=10)
    return text


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

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every key of the current screen is also a command in the palette (ctrl+p)."""
        yield from super().get_system_commands(screen)
        from .dashboard import DashboardScreen
        from .timeline import TimelineView

        bindings: list[BindingType] = list(type(screen).BINDINGS)
        target: Any = screen
        if isinstance(screen, DashboardScreen):
            bindings += [(b, "timeline") for b in TimelineView.BINDINGS]  # type: ignore[misc]
        seen: set[str] = set()
        for item in bindings:
            owner = target
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Binding):
                item, owner = item[0], screen.query_one(TimelineView)
            if not isinstance(item, Binding) or item.action in seen or item.action.startswith("app."):
                continue
            seen.add(item.action)
            key = item.key_display or item.key.split(",")[0]
            yield SystemCommand(f"{item.description} ({key})", item.tooltip or item.description, partial(owner.run_action, item.action))

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
