"""No cyclic garbage collection from the command's start until the dashboard's first frame.

A module of its own, without Textual: ``agent-supervisor tui RUN`` pauses the collector before it imports the
dashboard (Textual and the dashboard's modules: the collector's passes over what they allocate cost about 4%
of the start, measured in instructions), and the app resumes it once the first frame is drawn.
"""

from __future__ import annotations

import gc

__all__ = ["pause_gc", "resume_gc"]

_gc_paused = False


def pause_gc() -> None:
    """No cyclic garbage collection until the first frame (``resume_gc``).

    The start allocates some 60,000 objects that live as long as the app (modules, widgets, styles, the
    tail's records) and leaves little cyclic garbage (about 2,000 objects): the collector's passes over
    them cost 40-70 ms before the first frame (measured, 117 collections), a third of the dashboard's own
    start. Only the command line's run pauses it (tests and embedders keep their collector as it is).
    """
    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True


def resume_gc() -> None:
    """Collect again, the objects of the start set apart for good (``gc.freeze``: no later full collection
    walks them again, which keeps the pauses of a long live session short)."""
    global _gc_paused
    if _gc_paused:
        _gc_paused = False
        gc.freeze()
        gc.enable()
