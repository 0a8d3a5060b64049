"""``views.files``: which record a ``files`` event belongs to (by position, attempt, name, rollbacks), and the
changes of several events folded per path; the timeline has no row for them."""

from __future__ import annotations

from typing import Any

from supervisor.views.files import FileChange, FilesIndex, merge
from supervisor.views.timeline_events import place


def ev(seq: int, during: str = "step", attempt: int = 1, **fields: Any) -> dict[str, Any]:
    changes = fields.pop("changes", [{"path": f"f{seq}.txt", "op": "created", "before": None, "after": "a" * 64}])
    return {"event": "files", "ts": "2026-12-05T11:40:00.000Z", "attempt": attempt, "seq": seq, "during": during,
            **fields, "changes": changes}


def step(seq: int, name: str, pos: int, attempt: int = 1, kind: str = "step") -> dict[str, Any]:
    return {"kind": kind, "step": name, "pos": pos, "attempt": attempt, "seq": seq}


def test_a_steps_events_are_found_from_its_begin_and_from_its_step_record() -> None:
    idx = FilesIndex([ev(4, step="edit", pos=2), {"event": "spawn", "attempt": 1}])
    assert len(idx) == 1
    assert [fe.seq for fe in idx.of_record(5, step(5, "edit", 2)).step] == [4]  # the step record after its begin
    assert [fe.seq for fe in idx.of_record(4, step(4, "edit", 2, kind="begin")).step] == [4]
    assert idx.of_record(3, step(3, "plan", 1)).step == []  # another position
    assert idx.of_record(5, step(5, "other", 2)).step == []  # the same position, another step's name
    assert idx.of_record(5, {"kind": "checkpoint", "name": "x", "seq": 5}).step == []
    assert idx.count(5, step(5, "edit", 2)) == 1 and idx.count(3, step(3, "plan", 1)) == 0


def test_the_same_position_after_a_restart_or_a_rollback_is_another_step() -> None:
    # attempt 1 ran "edit" #2 (begin 4, interrupted); attempt 2 ran it again (begin 9, step 10) and changed nothing
    idx = FilesIndex([ev(4, step="edit", pos=2, attempt=1)])
    assert idx.of_record(10, step(10, "edit", 2, attempt=2)).step == []
    assert [fe.seq for fe in idx.of_record(4, step(4, "edit", 2, kind="begin")).step] == [4]
    # an in-process rollback at 7 (same attempt): the step after it is not the one before it
    idx = FilesIndex([ev(4, step="edit", pos=2)])
    assert idx.of_record(10, step(10, "edit", 2), rollbacks=[7]).step == []
    assert [fe.seq for fe in idx.of_record(5, step(5, "edit", 2), rollbacks=[7]).step] == [4]
    # a record without an attempt matches by position and name alone
    assert [fe.seq for fe in idx.of_record(5, {"kind": "step", "step": "edit", "pos": 2, "seq": 5}).step] == [4]


def test_concurrent_changes_go_to_every_step_in_flight_and_say_so() -> None:
    idx = FilesIndex([ev(3, during="concurrent", steps=[{"step": "a", "pos": 1}, {"step": "b", "pos": 2}])])
    for seq, name, pos in ((5, "a", 1), (6, "b", 2)):
        found = idx.of_record(seq, step(seq, name, pos))
        assert [fe.seq for fe in found.step] == [3] and found.concurrent() == found.step
    assert idx.events[0].describe() == "concurrent: a #1, b #2"


def test_changes_between_steps_go_to_the_record_they_follow() -> None:
    idx = FilesIndex([ev(6, during="between")])
    found = idx.of_record(6, {"kind": "checkpoint", "name": "done", "seq": 6})
    assert found.step == [] and [fe.seq for fe in found.between] == [6] and found.paths() == 1
    assert not idx.of_record(7, step(7, "x", 3))
    assert idx.events[0].describe() == "between steps"


def test_merge_folds_a_paths_changes_into_one() -> None:
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    got = merge([
        FileChange("x.py", "changed", a, b), FileChange("x.py", "changed", b, c),  # twice: a -> c
        FileChange("tmp", "created", None, a), FileChange("tmp", "deleted", a, None),  # nothing left of it
        FileChange("new", "created", None, a), FileChange("new", "changed", a, b),  # created, as b
        FileChange("old", "changed", a, b), FileChange("old", "deleted", b, None),  # deleted, was a
        FileChange("big", "created", None, None, flag="too_large"),
    ])
    assert got == [
        FileChange("big", "created", None, None, flag="too_large"),
        FileChange("new", "created", None, b),
        FileChange("old", "deleted", a, None),
        FileChange("x.py", "changed", a, c),
    ]


def test_a_files_event_is_no_row_of_the_timeline() -> None:
    raw = [{"event": "spawn", "attempt": 1, "ts": "t"}, ev(2), {"event": "exit", "attempt": 1, "code": 0, "ts": "t"}]
    placed = place(raw, {1: 0}, 5, True, lambda before, e: before)
    assert [e.data["event"] for e in placed] == ["spawn", "exit"]


def test_a_malformed_event_is_left_out() -> None:
    idx = FilesIndex([{"event": "files", "seq": "x", "changes": []}, {"event": "files", "seq": 1, "changes": "no"},
                      ev(2, changes=[{"op": "created"}, {"path": "ok", "op": "created", "after": "a" * 64, "link": "t"}])])
    assert [fe.seq for fe in idx.events] == [2]
    assert idx.events[0].changes == (FileChange("ok", "created", None, "a" * 64, link="t"),)
