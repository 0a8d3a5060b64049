"""``StepClock``: which steps may have changed a file, from the journal's begin and end times."""

from __future__ import annotations

from typing import Any

from supervisor.core.times import ts_ns
from supervisor.supervise.step_clock import MS, StepClock

T0 = ts_ns("2026-12-05T11:40:00.000Z")
assert T0 is not None


def at(ms: int) -> str:
    """The journal's ``ts`` of ``T0 + ms``."""
    s, m = divmod(ms, 1000)
    return f"2026-12-05T11:40:{s:02d}.{m:03d}Z"


def rec(seq: int, ms: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "ts": at(ms), "kind": kind, **fields}


def t(ms: float) -> int:
    assert T0 is not None
    return T0 + int(ms * MS)


def clock(*records: dict[str, Any]) -> StepClock:
    c = StepClock(last_seq=None)
    for r in records:
        c.add(r, now_ns=t(10_000))
    return c


def test_ts_ns_reads_the_journals_times_and_refuses_the_rest() -> None:
    assert ts_ns(at(1234)) == t(1234)
    assert ts_ns("yesterday") is None and ts_ns(None) is None and ts_ns(True) is None
    # the one reader (core/times.py) also reads another writer's seconds or milliseconds
    assert ts_ns(5) == 5_000_000_000 and ts_ns(1_700_000_000_000) == 1_700_000_000_000_000_000


def test_one_step_in_flight_owns_the_change_and_the_gap_after_it_is_between() -> None:
    c = clock(rec(0, 0, "start"), rec(1, 100, "begin", step="a", pos=0), rec(2, 200, "step", step="a", pos=0),
              rec(3, 300, "checkpoint", name="cp"))
    [span] = c.during(t(150), t(151))
    assert (span.seq, span.name, span.pos) == (1, "a", 0)
    assert c.during(t(250), t(251)) == []
    assert c.seq_before(t(250)) == 2 and c.seq_before(t(350)) == 3
    # the journal's ms are cut: a write in the step's last millisecond is still the step's
    assert [s.name for s in c.during(t(200.5), t(200.9))] == ["a"]


def test_overlapping_steps_are_all_named_and_a_wide_interval_never_guesses() -> None:
    c = clock(rec(0, 100, "begin", step="x", pos=0), rec(1, 110, "begin", step="y", pos=1),
              rec(2, 300, "step", step="y", pos=1), rec(3, 400, "step", step="x", pos=0),
              rec(4, 500, "begin", step="z", pos=2), rec(5, 600, "step", step="z", pos=2))
    assert [s.name for s in c.during(t(200), t(201))] == ["x", "y"]
    assert [s.name for s in c.during(t(350), t(351))] == ["x"]
    assert [s.name for s in c.during(t(380), t(520))] == ["x", "z"]  # the time cannot tell them apart


def test_a_transient_failure_stays_in_flight_and_a_new_attempt_ends_what_was_flying() -> None:
    c = clock(rec(0, 100, "begin", step="x", pos=0), rec(1, 200, "step", step="x", pos=0, error="e", transient=True))
    assert [s.name for s in c.during(t(300), t(301))] == ["x"]
    c.add(rec(2, 400, "start"), now_ns=t(10_000))
    assert c.during(t(500), t(501)) == [] and [s.name for s in c.during(t(350), t(351))] == ["x"]
    c.add(rec(3, 600, "begin", step="y", pos=1), now_ns=t(10_000))
    c.end_all(t(700))
    assert c.during(t(800), t(801)) == [] and [s.name for s in c.during(t(650), t(651))] == ["y"]


def test_between_before_any_new_record_is_the_last_one_of_the_journal() -> None:
    c = StepClock(last_seq=41)
    assert c.seq_before(t(0)) == 41
    assert StepClock(last_seq=None).seq_before(t(0)) is None
