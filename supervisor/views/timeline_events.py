"""The supervisor's events as timeline rows: each placed between the journal's records by its process attempt.

``supervisor.jsonl`` says when an attempt started, exited, backed off or was rolled back; the journal's ``start``
records say where each attempt's records begin. An event goes before the start record of the attempt it leads to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Event:
    """A supervisor event shown between records; ``before`` is the seq it precedes."""

    data: dict[str, Any]
    before: int
    order: int


def place(
    raw: list[dict[str, Any]], starts: dict[int, int], count: int, scanned: bool,
    refine: Callable[[int, dict[str, Any]], int],
) -> list[Event]:
    """The events of ``raw`` (all of ``supervisor.jsonl``) that can be placed, in row order.

    ``starts``: attempt -> seq of its start record; ``count``: the records known; ``scanned``: the whole
    journal was scanned (every start record is known); ``refine`` moves an event up past the records just
    before it that are later in time.
    """
    last_attempt = max(starts) if starts else None
    placed: list[Event] = []
    for i, ev in enumerate(raw):
        name = ev.get("event")
        if name == "supervisor-start" or name == "files":
            continue  # ``files`` events are no rows: they mark their steps' rows (``views.files``)
        att = ev.get("attempt")
        if not isinstance(att, int):
            before = count
        else:
            # spawn and restart carry the attempt they start; exit, backoff, rollback... the one that ended
            nxt = att if name in ("spawn", "restart") else att + 1
            if nxt in starts:
                before = starts[nxt]
            elif last_attempt is not None and last_attempt >= nxt:
                continue  # its start record is not read yet (before the scan): place it later
            elif scanned or last_attempt is not None or count == 0:
                before = count
            else:
                continue
        placed.append(Event(ev, refine(before, ev), i))
    placed.sort(key=lambda e: (e.before, e.order))
    # an event placed at the end stays there until the next start record: keep ``before`` = count
    return placed
