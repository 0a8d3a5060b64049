"""What a screen does when one of its workers dies: a notification, never a silent pass.

A module of its own so that the screens need not import the app that imports them.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.worker import Worker, WorkerState


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
