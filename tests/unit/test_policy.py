"""``policy.decide``: one row per case, the facts of an attempt that ended and the decision expected."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from supervisor.supervise.policy import (
    Action,
    Decision,
    Facts,
    Options,
    Pending,
    Rollback,
    decide,
)

OPTS = Options(backoff_initial=0.5, backoff_max=4.0, backoff_factor=2.0, backoff_jitter=0.0,
               rollback_after=3, give_up_after=5)
CRASH = Facts(code=1)
KILLED = Facts(code=None, signal="SIGKILL")

# (id, facts, expected: action, reason, delay, rollback, no_progress, crash_loop_rolled_back, high_water)
ROWS: list[tuple[str, Facts, tuple[Any, ...]]] = [
    ("exit 0 succeeds", Facts(code=0), (Action.SUCCEED, "succeeded", 0.0, None, 0, False, None)),
    ("exit 0 keeps the counters", Facts(code=0, no_progress=2, crash_loop_rolled_back=True, high_water=4),
     (Action.SUCCEED, "succeeded", 0.0, None, 2, True, 4)),
    ("exit 78 fails for good", Facts(code=78, progress=3),
     (Action.FAIL, "the agent exited 78 (permanent failure)", 0.0, None, 0, False, None)),
    ("exit 78 while paused still fails", Facts(code=78, paused=True),
     (Action.FAIL, "the agent exited 78 (permanent failure)", 0.0, None, 0, False, None)),
    ("exit 75 (the SDK rolled back) is progress: restart now", Facts(code=75, no_progress=2, rolled_back=True),
     (Action.RESTART, "rollback requested", 0.0, None, 0, False, None)),
    ("exit 75 without new ground after a crash-loop rollback backs off",
     Facts(code=75, no_progress=3, crash_loop_rolled_back=True, high_water=5, effective_steps=5, rolled_back=True),
     (Action.BACKOFF, "rollback requested", 4.0, None, 4, True, 5)),
    ("exit 75 without a rollback record is a crash: back off", Facts(code=75, no_progress=1),
     (Action.BACKOFF, "crash", 1.0, None, 2, False, None)),
    ("exit 75 without a rollback record gives up like a crash", Facts(code=75, no_progress=4, crash_loop_rolled_back=True),
     (Action.GIVE_UP, "5 attempts without progress", 0.0, None, 5, True, None)),
    ("a crash with progress restarts now and resets", Facts(code=1, progress=2, no_progress=4, crash_loop_rolled_back=True),
     (Action.RESTART, "crash", 0.0, None, 0, False, None)),
    ("a signal with progress restarts now", replace(KILLED, progress=1),
     (Action.RESTART, "crash", 0.0, None, 0, False, None)),
    ("first crash without progress backs off initial", CRASH, (Action.BACKOFF, "crash", 0.5, None, 1, False, None)),
    ("a signal without progress backs off", KILLED, (Action.BACKOFF, "crash", 0.5, None, 1, False, None)),
    ("backoff grows", replace(CRASH, no_progress=1), (Action.BACKOFF, "crash", 1.0, None, 2, False, None)),
    ("backoff is capped", replace(CRASH, no_progress=3, crash_loop_rolled_back=True),
     (Action.BACKOFF, "crash", 4.0, None, 4, True, None)),
    ("crash-loop rollback after K attempts, then back off", replace(CRASH, no_progress=2),
     (Action.BACKOFF, "crash", 2.0, Rollback.CRASH_LOOP, 3, True, None)),
    ("crash-loop rollback only once per streak", replace(CRASH, no_progress=3, crash_loop_rolled_back=True),
     (Action.BACKOFF, "crash", 4.0, None, 4, True, None)),
    ("give up after M", replace(CRASH, no_progress=4, crash_loop_rolled_back=True),
     (Action.GIVE_UP, "5 attempts without progress", 0.0, None, 5, True, None)),
    ("past the high-water mark is progress and clears it",
     Facts(code=1, progress=3, no_progress=3, crash_loop_rolled_back=True, high_water=4, effective_steps=5),
     (Action.RESTART, "crash", 0.0, None, 0, False, None)),
    ("re-running abandoned steps is not progress",
     Facts(code=1, progress=1, no_progress=3, crash_loop_rolled_back=True, high_water=4, effective_steps=3),
     (Action.BACKOFF, "crash", 4.0, None, 4, True, 4)),
    ("paused: a crash waits for resume", replace(CRASH, paused=True),
     (Action.PAUSE, "crash", 0.0, None, 1, False, None)),
    ("paused with progress still waits", Facts(code=1, progress=1, paused=True),
     (Action.PAUSE, "crash", 0.0, None, 0, False, None)),
    ("paused: the crash-loop rollback is still made", replace(CRASH, no_progress=2, paused=True),
     (Action.PAUSE, "crash", 0.0, Rollback.CRASH_LOOP, 3, True, None)),
    ("a stop requested while running", Facts(code=None, signal="SIGTERM", pending=Pending.STOP, no_progress=2),
     (Action.STOP, "stopped", 0.0, None, 2, False, None)),
    ("a stop requested wins over exit 0", Facts(code=0, pending=Pending.STOP),
     (Action.STOP, "stopped", 0.0, None, 0, False, None)),
    ("a restart requested while running", Facts(code=None, signal="SIGTERM", pending=Pending.RESTART, no_progress=1),
     (Action.RESTART, "request", 0.0, None, 1, False, None)),
    ("a restart requested while paused pauses", Facts(code=0, pending=Pending.RESTART, paused=True),
     (Action.PAUSE, "request", 0.0, None, 0, False, None)),
    ("a rollback requested while running: roll back, then restart", Facts(code=0, pending=Pending.ROLLBACK),
     (Action.RESTART, "rollback", 0.0, Rollback.REQUESTED, 0, False, None)),
    ("a rollback requested while paused: roll back, then pause", Facts(code=None, signal="SIGTERM",
                                                                      pending=Pending.ROLLBACK, paused=True),
     (Action.PAUSE, "rollback", 0.0, Rollback.REQUESTED, 0, False, None)),
    ("the hang watchdog's stop with progress restarts now", Facts(code=None, signal="SIGTERM", progress=2,
                                                                  pending=Pending.HANG),
     (Action.RESTART, "hang", 0.0, None, 0, False, None)),
    ("the hang watchdog's stop, exit 0, no progress: backs off", Facts(code=0, pending=Pending.HANG),
     (Action.BACKOFF, "hang", 0.5, None, 1, False, None)),
    ("the memory watchdog's stop counts toward give-up",
     Facts(code=None, signal="SIGKILL", pending=Pending.MEMORY_LIMIT, no_progress=4, crash_loop_rolled_back=True),
     (Action.GIVE_UP, "5 attempts without progress", 0.0, None, 5, True, None)),
]


@pytest.mark.parametrize(("facts", "expected"), [(f, e) for _, f, e in ROWS], ids=[i for i, _, _ in ROWS])
def test_decide(facts: Facts, expected: tuple[Any, ...]) -> None:
    d = decide(facts, OPTS)
    assert (d.action, d.reason, d.delay_s, d.rollback, d.no_progress, d.crash_loop_rolled_back, d.high_water) == expected


def test_every_action_and_rollback_is_covered() -> None:
    decisions = [decide(f, OPTS) for _, f, _ in ROWS]
    assert {d.action for d in decisions} == set(Action)
    assert {d.rollback for d in decisions} == {None, *Rollback}
    assert {f.pending for _, f, _ in ROWS} == {None, *Pending}


def test_backoff_jitter_stays_in_bounds_and_the_event_fields() -> None:
    import random

    o = replace(OPTS, backoff_jitter=0.25)
    rng = random.Random(3)
    delays = {decide(replace(CRASH, no_progress=1), o, rng).delay_s for _ in range(100)}
    assert min(delays) >= 0.75 and max(delays) <= 1.25 and len(delays) > 20
    d = decide(replace(CRASH, no_progress=1), OPTS)
    assert d.event_fields == {"delay_s": 1.0, "attempts_without_progress": 2}
    assert decide(Facts(code=78), OPTS).event_fields == {"reason": "the agent exited 78 (permanent failure)"}
    assert isinstance(d, Decision)
    with pytest.raises(AttributeError):
        d.action = Action.STOP  # type: ignore[misc]  # frozen: a decision is a value
