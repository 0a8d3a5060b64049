"""The one app factory (``make_app``) used by the CLI, the tests and the snapshot entry file.

``path`` may be a run directory, a bare ``.jsonl`` journal (the minimal
format, no ``run.json``), or a runs root (a directory of runs, default ``./runs``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from rich.terminal_theme import TerminalTheme
from textual.actions import parse as parse_action
from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.reactive import Reactive
from textual.screen import Screen
from textual.theme import Theme

from ..core.rundir import check_readable_run_dir, is_run_dir
from ..errors import RunDirError
from . import settings as settings_mod
from .gc_pause import pause_gc as pause_gc  # (tests use them from here)
from .gc_pause import resume_gc as resume_gc  # (tests use them from here)
from .settings import DARK, LAYOUTS, LIGHT, TIMES, WIDE_COLUMNS, Settings
from .textual_hooks import FirstFrameApp

THEMES = (
    # Every text colour on its background is at least 4.5:1 (WCAG AA): tests/tui/test_look_contrast.py computes it.
    Theme(
        name=DARK,
        primary="#4d9de0",
        secondary="#7cb7ff",
        accent="#e0b04d",
        warning="#f2c14e",
        error="#ff7b72",
        success="#56d364",
        foreground="#e6edf3",
        background="#0d1117",
        surface="#161b22",
        panel="#1f2630",
        dark=True,
        variables={
            "text": "#e6edf3",
            "text-muted": "#9da7b3",
            "text-disabled": "#8b949e",
            "block-cursor-background": "#1f4e80",
            "block-cursor-foreground": "#ffffff",
            "block-cursor-text-style": "bold",
            "block-cursor-blurred-background": "#2d3a4a",
            "block-cursor-blurred-foreground": "#e6edf3",
            "block-cursor-blurred-text-style": "none",
            "footer-key-foreground": "#e0b04d",
            "footer-description-foreground": "#e6edf3",
            "footer-background": "#1f2630",
            "input-selection-background": "#1f4e80",
        },
    ),
    Theme(
        name=LIGHT,
        primary="#0b5cad",
        secondary="#0a58ca",
        accent="#8a5a00",
        warning="#8a5a00",
        error="#b42318",
        success="#116329",
        foreground="#1f2328",
        background="#ffffff",
        surface="#f6f8fa",
        panel="#eaeef2",
        dark=False,
        variables={
            "text": "#1f2328",
            "text-muted": "#4f5760",
            "text-disabled": "#5c6570",
            "block-cursor-background": "#cfe3ff",
            "block-cursor-foreground": "#0d1117",
            "block-cursor-text-style": "bold",
            "block-cursor-blurred-background": "#e4ecf5",
            "block-cursor-blurred-foreground": "#1f2328",
            "block-cursor-blurred-text-style": "none",
            "footer-key-foreground": "#0b5cad",
            "footer-description-foreground": "#1f2328",
            "footer-background": "#eaeef2",
            "input-selection-background": "#cfe3ff",
        },
    ),
)

ANSI_DARK = TerminalTheme(
    (13, 17, 23), (230, 237, 243),
    [(110, 118, 129), (255, 123, 114), (86, 211, 100), (227, 179, 65), (121, 192, 255), (210, 168, 255), (86, 212, 221), (230, 237, 243)],
    [(139, 148, 158), (255, 161, 152), (126, 231, 135), (242, 204, 96), (165, 214, 255), (226, 197, 255), (135, 232, 239), (255, 255, 255)],
)
"""Named colours (``"red"``, rich's JSON and table styles) as this app's dark theme shows them: each at least
4.5:1 on the theme's background, surface and panel."""
ANSI_LIGHT = TerminalTheme(
    (255, 255, 255), (31, 35, 40),
    [(31, 35, 40), (164, 14, 38), (17, 99, 41), (125, 78, 0), (5, 80, 174), (110, 64, 201), (14, 106, 115), (87, 96, 106)],
    [(87, 96, 106), (130, 7, 30), (10, 80, 30), (99, 60, 1), (3, 65, 143), (90, 50, 170), (10, 85, 93), (31, 35, 40)],
)
"""The same for the light theme (dark colours on white, surface and panel)."""


def is_runs_root(path: Path) -> bool:
    """A directory that is not a run itself but holds runs (or is empty: a fresh ``./runs``).

    Here, not in ``views.runs``: the dashboard's start does not import the runs list's model."""
    return path.is_dir() and not is_run_dir(path)


class SupervisorApp(FirstFrameApp):
    """The agent-supervisor TUI; returns an exit code."""

    CSS_PATH = "app.tcss"
    TITLE = "agent-supervisor"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+q", "quit", "Quit", show=False, priority=True)]
    # this app's defaults as the reactives' own: set in __init__, each would make Textual parse every
    # stylesheet again after the start (a watcher's refresh_css), before the first frame
    theme: Reactive[str] = Reactive(DARK)
    ansi_theme_dark: Reactive[TerminalTheme] = Reactive(ANSI_DARK, init=False)
    ansi_theme_light: Reactive[TerminalTheme] = Reactive(ANSI_LIGHT, init=False)

    def __init__(self, path: Path, *, replay: bool = False, on_exit: Any = None, settings_path: Path | None = None,
                 compare: Path | None = None) -> None:
        super().__init__()
        self.path = path
        self.replay = replay
        self.compare = compare
        """``tui RUN_A --compare RUN_B``: the compare view first."""
        self._on_exit = on_exit
        self.settings_path = settings_path
        self.settings: Settings = settings_mod.load(settings_path)
        for theme in THEMES:
            self.register_theme(theme)
        # App.__init__ took the variables before this app's themes were registered: take them again (nothing is parsed yet)
        self.stylesheet.set_variables(self.get_css_variables())
        if self.settings.theme != DARK and self.settings.theme in self.available_themes:
            self.theme = self.settings.theme  # another theme than the default: the CSS is refreshed once for it
        self._apply_layout()
        self._save_warned = False
        self.first_frame_shown = False
        """The first frame is on the terminal (``after_first_frame`` callbacks have run)."""
        self._after_first: list[Any] = []

    # ------------------------------------------------------------------ the theme, looked up once
    _theme_cache: tuple[str, Theme] | None = None

    @property
    def current_theme(self) -> Theme:
        """Textual's, kept until the theme changes: Textual (8.2.8) looks the name up in a new copy of every
        registered theme, twice, for every line it renders (``ansi_theme``): some 190 times for the first frame."""
        name = self.theme
        cached = self._theme_cache
        if cached is None or cached[0] != name:
            cached = self._theme_cache = (name, super().current_theme)
        return cached[1]

    def register_theme(self, theme: Theme) -> None:
        self._theme_cache = None  # a theme registered again under the current name
        super().register_theme(theme)

    def unregister_theme(self, theme_name: str) -> None:
        self._theme_cache = None
        super().unregister_theme(theme_name)

    # ------------------------------------------------------------------ settings: theme, layout, time
    def _save_settings(self) -> None:
        problem = settings_mod.save(self.settings, self.settings_path)
        if problem and not self._save_warned:  # once: a read-only home should not nag at every key
            self._save_warned = True
            self.notify(problem, severity="warning", timeout=6)

    def watch_theme(self, theme: str) -> None:
        """Any theme change (``T``, or the palette's "Change theme") is kept."""
        if getattr(self, "settings", None) is not None and self.settings.theme != theme:
            self.settings.theme = theme
            self._save_settings()

    def action_toggle_theme(self) -> None:
        """Dark or light (both of this app's themes meet WCAG AA contrast)."""
        self.theme = LIGHT if self.theme == DARK else DARK
        self.notify(f"theme: {self.theme}", timeout=2)

    def _apply_layout(self) -> None:
        """Screen class ``-wide`` puts timeline and detail side by side (app.tcss); ``auto`` sets it by width."""
        layout = self.settings.layout
        self.HORIZONTAL_BREAKPOINTS = (  # read by each screen at every resize
            [(0, "-narrow"), (WIDE_COLUMNS, "-wide")] if layout == "auto" else [(0, "-wide" if layout == "side" else "-narrow")]
        )
        if self.is_running:
            wide = self._is_wide()
            for screen in self.screen_stack:
                screen.set_class(wide, "-wide")
                screen.set_class(not wide, "-narrow")

    def _is_wide(self) -> bool:
        layout = self.settings.layout
        return layout == "side" or (layout == "auto" and self.size.width >= WIDE_COLUMNS)

    def action_cycle_layout(self) -> None:
        """auto (side by side from 160 columns) → side by side → stacked."""
        self.settings.layout = settings_mod.next_in(LAYOUTS, self.settings.layout)
        self._apply_layout()
        self._save_settings()
        self.notify(
            f"layout: {self.settings.layout}"
            + (f" (side by side from {WIDE_COLUMNS} columns)" if self.settings.layout == "auto" else ""),
            timeout=2,
        )

    def action_toggle_time(self) -> None:
        """Absolute times or times relative to the run's first record."""
        self.settings.time = settings_mod.next_in(TIMES, self.settings.time)
        self._save_settings()
        from .timeline import TimelineView

        for view in self.screen.query(TimelineView):
            view.refresh()
        self.notify(
            f"times: {self.settings.time}" + (" (since the run's first record)" if self.settings.time == "relative" else ""),
            timeout=2,
        )

    def get_default_screen(self) -> Screen[Any]:
        """The first screen, the bottom of the stack: the runs list or the dashboard (not Textual's empty default
        screen under it, which is mounted, styled and laid out at the start for nothing: ~10 ms)."""
        screen: Screen[Any]
        if self.compare is not None:
            from .compare_screen import CompareScreen

            screen = CompareScreen(self.path, self.compare)
        elif self.path.is_dir() and is_runs_root(self.path) and not self.replay:
            from .runs_screen import RunsScreen

            screen = RunsScreen(self.path)
        else:
            from .dashboard import DashboardScreen  # its imports only: not the runs list's (DataTable)

            screen = DashboardScreen(self.path, replay=self.replay)
        # the layout class the first resize would set, set now: styles are computed once, not twice
        wide = self._is_wide()
        screen.add_class("-wide" if wide else "-narrow", update=False)  # styled when it mounts
        return screen

    # ------------------------------------------------------------------ the first frame
    # Textual starts inside a batch update: the frames drawn before its end (the whole first screen) are not
    # written, and a screen's call_after_refresh callbacks run then without any frame. Work started from them
    # (the journal scan, a watcher's imports, hidden widgets) ran before anything was on the terminal, and the
    # scan's thread took the GIL from the first frame's rendering (measured: 200 ms later on a 1M-record run).
    def start_ready(self) -> None:
        self.call_later(self._paint_first_frame)  # processed once the start's batch is over

    def _paint_first_frame(self) -> None:
        screen: Any = self.screen
        if getattr(screen, "when_drawn", None) is not None:  # the dashboard draws its first frame once complete
            if screen.holding:
                screen.refresh()  # the trigger, if all it waits for came inside the batch
            screen.when_drawn(self._first_frame_drawn)
            return
        self.screen.refresh()
        self.screen.call_after_refresh(self._first_frame_drawn)

    def _first_frame_drawn(self) -> None:
        self.first_frame_shown = True
        resume_gc()
        callbacks, self._after_first = self._after_first, []
        for callback in callbacks:
            callback()

    def after_first_frame(self, callback: Any) -> None:
        """Call ``callback`` once the first frame is on the terminal (at once if it is)."""
        if self.first_frame_shown:
            callback()
        else:
            self._after_first.append(callback)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every key of the current screen is also a command in the palette (ctrl+p)."""
        yield from super().get_system_commands(screen)
        from .dashboard import DashboardScreen
        from .timeline import TimelineView

        # each key with the widget that runs it: the screen's own, and on the dashboard the timeline's (found when
        # its first key is listed, None until then)
        keys: list[tuple[BindingType, Any]] = [(b, screen) for b in type(screen).BINDINGS]
        if isinstance(screen, DashboardScreen):
            keys += [(b, None) for b in TimelineView.BINDINGS]
        seen: set[str] = set()
        for item, owner in keys:
            # a key without a name (dashboard ``_why``: it only says why its action is off) is no command
            if not isinstance(item, Binding) or not item.description or item.action in seen or item.action in ("app.quit", "app.back"):
                continue
            if owner is None:
                owner = screen.query_one(TimelineView)
            namespace, name, params = parse_action(item.action)
            if not namespace and owner.check_action(name, params) is False:
                continue  # off here, as in the footer (a diff's Files without a workspace)
            seen.add(item.action)
            key = item.key_display or item.key.split(",")[0]
            yield SystemCommand(f"{item.description} ({key})", item.tooltip or item.description, partial(owner.run_action, item.action))

    def on_unmount(self) -> None:
        if self._on_exit is not None:
            self._on_exit()


def make_app(path: Path, *, replay: bool = False, on_exit: Any = None, settings_path: Path | None = None,
             compare: Path | None = None) -> SupervisorApp:
    """Validate ``path`` (one clear error, no traceback) and build the app.

    A missing ``./runs`` root is fine for ``tui`` (the list says how to start a
    run); anything else missing is a ``RunDirError``.
    """
    path = Path(path)
    if compare is not None:
        check_readable_run_dir(path)
        check_readable_run_dir(Path(compare))
    elif path.is_dir() and is_runs_root(path):
        if replay:
            raise RunDirError(f"{path} holds no journal: pass a run directory (one that holds journal.jsonl) to replay")
    else:
        check_readable_run_dir(path)
    return SupervisorApp(path, replay=replay, on_exit=on_exit, settings_path=settings_path,
                         compare=None if compare is None else Path(compare))


def run_tui(path: Path, *, replay: bool = False, compare: Path | None = None) -> int:
    """Run the TUI in the terminal until the user quits; the exit code."""
    pause_gc()
    try:
        app = make_app(path, replay=replay, compare=compare)
        result = app.run()
    finally:
        resume_gc()  # an app that stopped before its first frame
    return int(result or 0)
