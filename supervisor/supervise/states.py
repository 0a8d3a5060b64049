"""The supervised process's states, the transitions allowed between them, and change events.

Dependency-free on purpose (as Supervisor's ``states.py``): the supervisor, the
control socket and the TUI all speak these names.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidTransition


class ProcessState(str, enum.Enum):
    """Where the supervised agent is. The values are the strings of the control protocol."""

    STARTING = "starting"
    """A child is being spawned."""
    RUNNING = "running"
    """A child runs."""
    BACKOFF = "backoff"
    """The last child exited without progress; waiting before the next attempt."""
    STOPPING = "stopping"
    """The child (and its process group) is being stopped: grace period, then SIGKILL."""
    STOPPED = "stopped"
    """Stopped on request; the run directory is resumable."""
    PAUSED = "paused"
    """The child exited while restarts were paused; waiting for ``resume``."""
    SUCCEEDED = "succeeded"
    """The agent exited 0."""
    FAILED = "failed"
    """Permanent failure (exit 78) or gave up after a crash loop."""

    @property
    def terminal(self) -> bool:
        """No further transition: the supervisor exits."""
        return self in (ProcessState.STOPPED, ProcessState.SUCCEEDED, ProcessState.FAILED)


S = ProcessState
TRANSITIONS: dict[ProcessState, frozenset[ProcessState]] = {
    S.STARTING: frozenset({S.RUNNING, S.FAILED, S.BACKOFF, S.PAUSED, S.STOPPED}),
    # an agent a person aborted at a pause (exit 79) ends the run stopped, with no stop request before
    S.RUNNING: frozenset({S.STOPPING, S.BACKOFF, S.STARTING, S.PAUSED, S.SUCCEEDED, S.FAILED, S.STOPPED}),
    S.BACKOFF: frozenset({S.STARTING, S.PAUSED, S.STOPPED, S.FAILED}),
    # a stop on the way to a restart (hang, memory limit, rollback, restart request) goes to STARTING
    S.STOPPING: frozenset({S.STARTING, S.BACKOFF, S.PAUSED, S.STOPPED, S.SUCCEEDED, S.FAILED}),
    S.PAUSED: frozenset({S.STARTING, S.STOPPED}),
    S.STOPPED: frozenset(),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
}



ENTRY_EVENTS: dict[ProcessState, str | None] = {
    S.STARTING: "restart",  # the first start is the machine's initial state: no change, no event
    S.RUNNING: "spawn",
    S.BACKOFF: "backoff",
    # a stop by a watchdog names its event ("hang", "memory-limit"); a stop on request has none of its own:
    # the request is answered on the socket and the exit event says why (its reason)
    S.STOPPING: None,
    # "pause" was written when restarts were paused (``set_paused``), before the child exited
    S.PAUSED: None,
    S.STOPPED: "stop",
    S.SUCCEEDED: "succeeded",
    S.FAILED: "give-up",
}
"""The ``supervisor.jsonl`` event each state's entry writes (through the machine's listeners)."""


@dataclass(frozen=True)
class StateChange:
    """One transition (or a change of the machine's data: ``old is new``), as listeners receive it.

    ``event`` is the ``supervisor.jsonl`` event it writes (``None``: none) and
    ``info`` that event's fields.
    """

    old: ProcessState
    new: ProcessState
    at: float
    info: dict[str, Any]
    event: str | None = None


@dataclass
class StopRequest:
    """Why the supervisor is stopping the child, and what to do once it is gone (a policy ``Pending``)."""

    action: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StateMachine:
    """The state, the data that belongs to it, guarded transitions, and an event for every change.

    Besides the state it holds ``paused`` (restarts paused by request),
    ``pending`` (set on entering STOPPING: what to do once the child is gone)
    and ``backoff_until`` (set on entering BACKOFF). Every change goes through
    ``change``, ``stop`` or ``set_paused``, which notify the listeners with the
    event to record: no change can be made without its event.
    """

    state: ProcessState = ProcessState.STARTING
    since: float = field(default_factory=time.monotonic)
    listeners: list[Callable[[StateChange], None]] = field(default_factory=list)
    paused: bool = False
    pending: StopRequest | None = None
    backoff_until: float | None = None
    backoff_s: float = 0.0

    def change(self, new: ProcessState, *, event: str | None = None, **info: Any) -> StateChange:
        """Move to ``new`` and record its entry event; raise ``InvalidTransition`` if it is not allowed from here.

        ``info`` is the event's fields. ``event`` overrides the entry event only
        where the table has none (a watchdog's stop).
        """
        if new not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"supervisor bug: no transition from {self.state.value} to {new.value}")
        name = ENTRY_EVENTS[new]
        if event is not None:
            if name is not None:
                raise InvalidTransition(f"supervisor bug: entering {new.value} records {name!r}, not {event!r}")
            name = event
        ev = StateChange(self.state, new, time.monotonic(), info, name)
        if new is S.BACKOFF:
            self.backoff_s = float(info["delay_s"])
            self.backoff_until = ev.at + self.backoff_s
        else:
            self.backoff_until = None
        if new is not S.STOPPING:
            self.pending = None
        self.state = new
        self.since = ev.at
        self._notify(ev)
        return ev

    def stop(self, request: StopRequest, *, event: str | None = None, **info: Any) -> StopRequest | None:
        """Enter STOPPING for ``request`` (or, already stopping, replace the request); return the one replaced."""
        previous = self.pending
        if self.state is not S.STOPPING:
            self.change(S.STOPPING, event=event, **info)
        elif event is not None:
            self._notify(StateChange(self.state, self.state, time.monotonic(), info, event))
        self.pending = request
        return previous

    def take_pending(self) -> StopRequest | None:
        """The stop request, once the child is gone (it is answered by what comes next)."""
        pending, self.pending = self.pending, None
        return pending

    def set_paused(self, paused: bool) -> bool:
        """Pause or resume restarts; record ``pause``/``resume``; a backoff is cut short into PAUSED.

        Returns whether anything changed.
        """
        if paused == self.paused:
            return False
        self.paused = paused
        self._notify(StateChange(self.state, self.state, time.monotonic(), {}, "pause" if paused else "resume"))
        if paused and self.state is S.BACKOFF:
            self.change(S.PAUSED, after="backoff")
        return True

    def _notify(self, ev: StateChange) -> None:
        for fn in self.listeners:
            fn(ev)
