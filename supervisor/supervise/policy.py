"""The restart policy: options, backoff with jitter, what counts as progress, and ``decide``.

Pure functions and dataclasses, so the policy is tested without processes:
``decide`` takes the facts of an attempt that ended and returns what to do; the
``Supervisor`` only carries the decision out.
"""

from __future__ import annotations

import enum
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ..core import rundir
from ..core.records import Kind, Record
from .agentlog import DEFAULT_KEEP, DEFAULT_MAX_BYTES
from .process import ExitStatus


@dataclass
class Options:
    """What ``supervise`` was asked to do (the CLI's options, with their defaults)."""

    resume_flag: str | None = "--resume"
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    backoff_factor: float = 2.0
    backoff_jitter: float = 0.25
    rollback_after: int = 3
    give_up_after: int = 5
    hang_timeout: float | None = None
    max_rss: int | None = None
    stop_grace: float = 10.0
    quiet: bool = False
    tee: bool = True
    log_max_bytes: int = DEFAULT_MAX_BYTES
    log_keep: int = DEFAULT_KEEP


@dataclass
class Attempt:
    """What the supervisor knows of one attempt, for the exit event and the give-up summary."""

    number: int
    pid: int
    progress: int = 0
    rollbacks: int = 0
    """Rollback records the attempt committed (an exit 75 without one is a crash)."""
    flying: dict[int, str] = field(default_factory=dict)
    """Steps begun and not finished, by position: several at once for concurrent steps (asyncio.gather, threads)."""
    failed: tuple[int, str, str] | None = None
    """The last step that failed for good (position, name, error type) with no step finished after it: concurrent
    steps, one raising, leave the others in flight: that one is where the attempt died."""
    last_activity: float = field(default_factory=time.monotonic)
    status: ExitStatus | None = None
    uptime_s: float = 0.0
    reason: str | None = None
    records_at_start: int = -1
    """The journal's records when it was spawned (none more at its exit: it ended before its first record)."""
    stderr_tail: list[str] = field(default_factory=list)
    """Its last stderr lines, at its exit (why it failed, for the give-up lines and ``status``)."""

    @property
    def last_error(self) -> str:
        """Its last non-blank stderr line (``""``: it said nothing)."""
        return next((ln.strip() for ln in reversed(self.stderr_tail) if ln.strip()), "")

    @property
    def in_flight(self) -> str | None:
        """The step in flight (the first by position, and how many more), for messages and events."""
        if not self.flying:
            return None
        first = self.flying[min(self.flying)]
        more = len(self.flying) - 1
        return f"{first} (+{more} more in flight)" if more else first

    @property
    def ended_in(self) -> str | None:
        """Where the attempt ended, for its exit line and event: the step that failed last (not the first of
        the steps it left in flight), else the step in flight."""
        if self.failed is None:
            return self.in_flight
        pos, name, kind = self.failed
        more = len(self.flying)
        return f"{name} #{pos} (it raised {kind}" + (f"; {more} more in flight)" if more else ")")


def backoff_delay(opts: Options, failures: int, rng: random.Random | None = None) -> float:
    """Seconds to wait after ``failures`` attempts in a row without progress (>= 1)."""
    base = min(opts.backoff_max, opts.backoff_initial * opts.backoff_factor ** max(0, failures - 1))
    j = opts.backoff_jitter
    r = (rng or random).uniform(1 - j, 1 + j) if j > 0 else 1.0
    return round(min(opts.backoff_max, base * r), 3)


def is_progress(rec: Record) -> bool:
    """A record that moves the run forward: a successful step or a checkpoint (not ``start``/``begin``/``note``)."""
    kind = rec.get("kind", Kind.STEP)
    return (kind == Kind.STEP and rec.get("error") is None) or kind in (Kind.CHECKPOINT, Kind.FORK)


# --------------------------------------------------------------------------- the decision


class Action(enum.StrEnum):
    """What the supervisor does once an attempt has ended."""

    SUCCEED = "succeed"
    """Exit 0 with nothing pending: the run succeeded."""
    FAIL = "fail"
    """Exit 78: the agent reported a permanent failure; no restart."""
    GIVE_UP = "give-up"
    """Too many attempts in a row without progress."""
    STOP = "stop"
    """A stop was requested: the run is stopped (resumable)."""
    RESTART = "restart"
    """Start the next attempt now."""
    BACKOFF = "backoff"
    """Wait ``delay_s`` seconds, then start the next attempt."""
    PAUSE = "pause"
    """Restarts are paused: wait for ``resume``."""


class Rollback(enum.StrEnum):
    """A rollback to carry out before the next attempt."""

    REQUESTED = "requested"
    """The one a control request asked for (it stopped the agent first)."""
    CRASH_LOOP = "crash-loop"
    """The automatic one to the latest checkpoint, once, after ``rollback_after`` attempts without progress."""


class Pending(enum.StrEnum):
    """Why the supervisor stopped the agent itself: what to do once the child is gone."""

    STOP = "stop"
    RESTART = "restart"
    ROLLBACK = "rollback"
    HANG = "hang"
    MEMORY_LIMIT = "memory-limit"


@dataclass(frozen=True)
class Facts:
    """Everything ``decide`` looks at, about the attempt that ended and the attempts before it."""

    code: int | None
    """The exit code, ``None`` if a signal killed the attempt."""
    signal: str | None = None
    progress: int = 0
    """Progress records (successful steps, checkpoints) the attempt committed."""
    no_progress: int = 0
    """Attempts in a row without progress before this one."""
    crash_loop_rolled_back: bool = False
    """The automatic crash-loop rollback was already made in this streak."""
    paused: bool = False
    pending: Pending | None = None
    """What the supervisor stopped the agent for, if it did."""
    high_water: int | None = None
    """Effective steps before the crash-loop rollback: only getting past them is progress."""
    effective_steps: int = 0
    """Effective successful steps now (the journal folded)."""
    rolled_back: bool = False
    """The attempt committed a rollback record: only then is an exit 75 a rollback, not a crash."""
    in_flight: bool = False
    """A step of the attempt was in flight when it ended (a ``begin`` without its ``step``): an exit 0 then is
    a crash (``os._exit(0)`` inside a step), never a success."""


@dataclass(frozen=True)
class Decision:
    """What to do after an attempt, and the counters to keep for the next one."""

    action: Action
    reason: str | None = None
    """The restart reason (``crash``, ``rollback requested``, ``request``, ``hang``...) or why the run failed."""
    delay_s: float = 0.0
    rollback: Rollback | None = None
    no_progress: int = 0
    crash_loop_rolled_back: bool = False
    high_water: int | None = None
    progress: bool = False
    """Whether the attempt counted as progress (after the high-water check)."""

    @property
    def event_fields(self) -> dict[str, Any]:
        """The fields of the event that records the decision (``backoff``, ``give-up``...)."""
        if self.action is Action.BACKOFF:
            return {"delay_s": self.delay_s, "attempts_without_progress": self.no_progress}
        if self.action is Action.FAIL or self.action is Action.GIVE_UP:
            return {"reason": self.reason}
        if self.action is Action.PAUSE:
            return {"after": self.reason}
        if self.action is Action.RESTART:
            return {"reason": self.reason}
        return {}


def decide(facts: Facts, opts: Options, rng: random.Random | None = None) -> Decision:
    """The restart decision from the facts alone (the policy is in the docstring of ``supervisor.py``)."""
    f = facts
    same = Decision(Action.STOP, no_progress=f.no_progress, crash_loop_rolled_back=f.crash_loop_rolled_back,
                    high_water=f.high_water)
    by_request = _by_request(f, same)
    if by_request is not None:
        return by_request
    # a crash, or a stop by the hang or memory watchdog: progress decides between now and a backoff
    # exit 75 says "I appended a rollback, restart me": without the record it is a crash like any other,
    # or an agent that only exits 75 would be restarted at once, forever
    asked_rollback = f.code == rundir.EXIT_ROLLBACK and f.rolled_back
    progress, high_water = _progress(f, f.progress > 0 or asked_rollback)
    no_progress = 0 if progress else f.no_progress + 1
    rolled_back = False if progress else f.crash_loop_rolled_back
    d = Decision(Action.RESTART, no_progress=no_progress, crash_loop_rolled_back=rolled_back,
                 high_water=high_water, progress=progress)
    if no_progress >= opts.give_up_after:
        return replace(d, action=Action.GIVE_UP, reason=f"{no_progress} attempts without progress")
    if no_progress >= opts.rollback_after and not rolled_back:
        d = replace(d, rollback=Rollback.CRASH_LOOP, crash_loop_rolled_back=True)
    reason = f.pending.value if f.pending else ("rollback requested" if asked_rollback else "crash")
    d = replace(d, reason=reason)
    if f.paused:
        return replace(d, action=Action.PAUSE)
    if progress:
        return d
    return replace(d, action=Action.BACKOFF, delay_s=backoff_delay(opts, no_progress, rng))


def _by_request(f: Facts, same: Decision) -> Decision | None:
    """The decision a stop request or the agent's own exit code settles (else ``None``: progress decides).

    A request the supervisor stopped the agent for wins over how the agent exited. An exit 0 with a step in
    flight settles nothing: the step never finished, so it is a crash (restarted, the step runs again).
    """
    if f.pending is Pending.STOP:
        return replace(same, reason="stopped")
    if f.pending is Pending.ROLLBACK:
        return replace(same, action=Action.PAUSE if f.paused else Action.RESTART, reason="rollback",
                       rollback=Rollback.REQUESTED)
    if f.pending is Pending.RESTART:
        return replace(same, action=Action.PAUSE if f.paused else Action.RESTART, reason="request")
    if f.pending is None and f.code == 0 and not f.in_flight:
        return replace(same, action=Action.SUCCEED, reason="succeeded")
    if f.pending is None and f.code == rundir.EXIT_ABORTED:
        return replace(same, reason="aborted by a person at a pause")
    if f.pending is None and f.code == rundir.EXIT_FAILED:
        return replace(same, action=Action.FAIL, reason=f"the agent exited {rundir.EXIT_FAILED} (permanent failure)")
    return None


def _progress(f: Facts, progress: bool) -> tuple[bool, int | None]:
    """Whether the attempt counts as progress, and the high-water mark kept for the next one.

    After a crash-loop rollback, re-running the abandoned steps is not new ground: only steps past the mark count.
    """
    high_water = f.high_water
    if progress and high_water is not None:
        progress = f.effective_steps > high_water
        if progress:
            high_water = None
    return progress, high_water
