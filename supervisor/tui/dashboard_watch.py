"""How the dashboard learns that the run changed: a file watcher, and polling only while the run changes by itself.

A run that may be running (a supervisor answers, or ``run.json`` says running) is watched with a 5 ms step, read
at least every 2 s (the reading worker's safety net) and its status asked every second, as ``tail -f`` would.
A finished run (``run.json`` says succeeded, failed or stopped and no supervisor runs it) changes only when
someone starts it again or rolls it back, and both write its files: it is watched with a 200 ms step and nothing
else runs until the watcher wakes (no status poll, no safety-net read, no usage round, no timeline tick). Idle,
the dashboard then costs about what a bare Textual app costs (``tests/bench/bench_idle.py``); the watcher's 5 ms
step alone is about 1 % of a core, its 200 ms step 0.02 %. A change seen while quiet asks for the status at once: a run
started again is polled and watched as a live one from then on.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from textual import work

from .dashboard_state import DashboardState
from .status_bar import StatusBar

if TYPE_CHECKING:
    from textual.timer import Timer

    from ..core.status import RunStatus

STATUS_POLL_S = 1.0
"""A run that may be running has its status asked this often (its process figures change by themselves)."""
QUIET_STATES = ("succeeded", "failed", "stopped")
"""The offline states only a new ``supervise`` (or an offline rollback) changes, by writing the run's files."""
LIVE_WATCH = (5, 500)
"""The watcher's step and timeout (ms) for a run that may be running: a record is on screen within ~10 ms."""
QUIET_WATCH = (200, 5000)
"""The same for a finished run: each step takes the GIL, so a short one costs CPU even when nothing changes; a long
one delays the exit (the app waits for the watcher's thread, which sees its stop at its next step: +0.35 s at
500 ms, measured)."""


class FileWatch(DashboardState):
    """The watcher worker and the switch between a live run's polling and a finished run's quiet."""

    quiet: bool
    """The run is finished: nothing polls (``quiet_for``)."""
    _wake: threading.Event
    _stop_watch: asyncio.Event
    _status_timer: Timer | None
    _watching: bool
    _watch_failed: bool

    def quiet_for(self, status: RunStatus) -> bool:
        """Whether ``status`` is a finished run's that only a change of its files can change (and the watcher
        works: without it, the polling is all there is)."""
        return (not status.live and status.state in QUIET_STATES and self._start_proc is None
                and self.run_dir.is_dir() and not self._watch_failed)

    def start_status_poll(self) -> None:
        """Ask for the status every ``STATUS_POLL_S`` (paused while quiet)."""
        self._status_timer = self.set_interval(STATUS_POLL_S, self.poll_status)
        if self.quiet:
            self._status_timer.pause()

    def set_quiet(self, quiet: bool) -> None:
        """Stop polling (a finished run) or poll again (it was started again, or the watcher failed)."""
        if quiet == self.quiet:
            return
        self.quiet = quiet
        if self._status_timer is not None:
            if quiet:
                self._status_timer.pause()
            else:
                self._status_timer.resume()
        self.query_one(StatusBar).set_polling(not quiet)
        if not quiet:
            self._wake.set()  # the reading worker waits for the watcher only: it reads, then polls again
        if self._watching:
            self.start_watch()  # again, with this step

    def start_watch(self) -> None:
        """(Re)start the watcher with the step for the run's state; the previous one, if any, stops within its step."""
        self._stop_watch.set()
        self._stop_watch = asyncio.Event()
        self._watching = True
        self.watch_files(self._stop_watch, QUIET_WATCH if self.quiet else LIVE_WATCH)

    @work(exclusive=True, group="watch", exit_on_error=False)
    async def watch_files(self, stop: asyncio.Event, step_timeout: tuple[int, int]) -> None:
        """Wake the reading worker when a file of the run changes (watchfiles, a few ms); while quiet, ask for
        the status and the usage totals too (``run.json`` changed: started again?)."""
        import watchfiles

        if not self.run_dir.is_dir() or stop.is_set():
            return
        step, timeout = step_timeout
        async for _changes in watchfiles.awatch(
            self.run_dir, debounce=5, step=step, stop_event=stop, recursive=False, rust_timeout=timeout
        ):
            self.files_changed()
            if self.quiet:
                self.poll_status()
                self.query_one(StatusBar).wake_usage()

    def tick_while(self, running: bool) -> None:
        """The timeline repaints a running step's row each second (its elapsed time): no timer while none runs."""
        timer = getattr(self.timeline, "tick_timer", None)  # none in replay mode
        if timer is not None:
            if running:
                timer.resume()
            else:
                timer.pause()

    def watch_failed(self) -> None:
        """The watcher died (its error is shown): poll as for a live run, since nothing else would see a change."""
        self._watch_failed = True
        self.set_quiet(False)
