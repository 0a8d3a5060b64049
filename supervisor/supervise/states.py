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
    S.RUNNING: frozenset({S.STOPPING, S.BACKOFF, S.STARTING, S.PAUSED, S.SUCCEEDED, S.FAILED}),
    S.BACKOFF: frozenset({S.STARTING, S.PAUSED, S.STOPPED, S.FAILED}),
    # a stop on the way to a restart (hang, memory limit, rollback, restart request) goes to STARTING
    S.STOPPING: frozenset({S.STARTING, S.BACKOFF, S.PAUSED, S.STOPPED, S.SUCCEEDED, S.FAILED}),
    S.PAUSED: frozenset({S.STARTING, S.STOPPED}),
    S.STOPPED: frozenset(),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
}



@dataclass(frozen=True)
class StateChange:
    """One transition, as listeners receive it."""

    old: ProcessState
    new: ProcessState
    at: float
    info: dict[str, Any]


@dataclass
class StateMachine:
    """Holds the current state; ``change`` guards the transition and notifies listeners."""

    state: ProcessState = ProcessState.STARTING
    since: float = field(default_factory=time.monotonic)
    listeners: list[Callable[[StateChange], None]] = field(default_factory=list)

    def can(self, new: ProcessState) -> bool:
        return new in TRANSITIONS[self.state]

    def change(self, new: ProcessState, **info: Any) -> StateChange:
        """Move to ``new``; raise ``InvalidTransition`` if it is not allowed from here."""
        if new not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"supervisor bug: no transition from {self.state.value} to {new.value}")
        ev = StateChange(self.state, new, time.monotonic(), info)
        self.state = new
        self.since = ev.at
        for fn in self.listeners:
            fn(ev)
        return ev
