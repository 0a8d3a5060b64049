"""The rows between records (supervisor events, proxied calls) with a filter: each found by its own index."""

from __future__ import annotations

from supervisor.views.filters import parse_filter
from supervisor.views.scan import SeqBits
from supervisor.views.timeline_between import BetweenRows
from supervisor.views.timeline_calls import Call
from supervisor.views.timeline_events import Event


def test_events_out_of_index_order_in_time_find_their_rows_under_a_filter() -> None:
    # two events before the same record whose times run backwards (a clock stepped back), and a call: merged by
    # (before, time), event 1 comes before event 0
    events = [Event({"ts": "2026-12-05T10:00:02.000Z", "event": "spawn"}, 3, 0),
              Event({"ts": "2026-12-05T10:00:01.000Z", "event": "spawn"}, 3, 1)]
    calls = [Call({"kind": "step", "step": "llm:openai:m", "ts": "2026-12-05T10:00:00.000Z"}, 1, 0)]
    b = BetweenRows(dirty=True)
    b.place(events, calls, lambda seq: seq, None, SeqBits(range(10)))
    assert b.items == [("call", 0), ("event", 1), ("event", 0)]
    assert [b.row_of_event(0, False), b.row_of_event(1, False), b.row_of_call(0, False)] == [5, 4, 1]
    b.place(events, calls, lambda seq: seq, parse_filter("spawn"), SeqBits(range(10)))
    assert [b.row_of_event(0, True), b.row_of_event(1, True), b.row_of_call(0, True)] == [4, 3, None]  # the call hidden
