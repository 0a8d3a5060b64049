"""State diffs, JSON Patch and checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor import Run
from supervisor.core.checkpoints import checkpoint_files, load_checkpoint, slugify
from supervisor.core.state import apply_patch, diff, json_copy, make_patch

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(a=st.dictionaries(st.text(max_size=4), json_values, max_size=5), b=st.dictionaries(st.text(max_size=4), json_values, max_size=5))
def test_patch_turns_a_into_b(a: dict, b: dict) -> None:
    patch = make_patch(a, b)
    assert apply_patch(json_copy(a), orjson.loads(orjson.dumps(patch))) == b


def test_diff_reports_paths_with_old_and_new_values() -> None:
    a = {"plan": "x", "findings": ["f1"], "meta": {"n": 1, "gone": True}}
    b = {"plan": "y", "findings": ["f1", "f2"], "meta": {"n": 1}, "new": 3}
    got = {(c.op, c.pointer, orjson.dumps(c.old), orjson.dumps(c.new)) for c in diff(a, b)}
    assert got == {
        ("changed", "/plan", b'"x"', b'"y"'),
        ("added", "/findings/1", b"null", b'"f2"'),
        ("removed", "/meta/gone", b"true", b"null"),
        ("added", "/new", b"null", b"3"),
    }
    assert make_patch(a, b)[1] == {"op": "add", "path": "/findings/-", "value": "f2"}


def test_pointer_escaping() -> None:
    a = {"a/b": {"~x": 1}}
    b = {"a/b": {"~x": 2}}
    patch = make_patch(a, b)
    assert patch == [{"op": "replace", "path": "/a~1b/~0x", "value": 2}]
    assert apply_patch(json_copy(a), patch) == b


def test_one_key_change_of_a_large_state_writes_bytes_in_proportion(tmp_path: Path) -> None:
    big = {f"doc{i}": "x" * 1000 for i in range(10_000)}  # about 10 MB of state
    with Run.open(tmp_path / "run") as run:
        run.state.update(big)
        run.step("load", lambda: "loaded")
        journal = tmp_path / "run" / "journal.jsonl"
        before = journal.stat().st_size
        run.state["doc5"] = "changed"
        run.step("edit", lambda: "edited")
        written = journal.stat().st_size - before
    assert len(orjson.dumps(big)) > 10_000_000
    assert written < 2_000, f"a one-key change wrote {written} bytes"


def test_checkpoint_names_are_slugged_and_never_overwrite(tmp_path: Path) -> None:
    assert slugify("../../etc/passwd") == "etc-passwd"
    assert slugify("Plan Done!") == "plan-done"
    assert slugify("///") == "checkpoint"
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        run.state["a"] = 1
        f1 = run.checkpoint("../../etc/passwd")
        run.state["a"] = 2
        f2 = run.checkpoint("../../etc/passwd")
    assert (f1, f2) == ("0001-etc-passwd.json", "0002-etc-passwd.json")
    files = checkpoint_files(run_dir)
    assert [p.parent for p in files] == [run_dir / "checkpoints"] * 2
    assert load_checkpoint(run_dir, f1)["state"] == {"a": 1}
    assert load_checkpoint(run_dir, f2)["state"] == {"a": 2}
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in files)
    assert not list((run_dir / "checkpoints").glob(".*tmp"))
    assert not os.path.exists(tmp_path / "etc")


def _patched_journal(run: Path, n: int, snapshot_at: int | None = None) -> None:
    """``n`` steps, each adding ``/k<seq>``; a checkpoint with a true snapshot replaces the step at ``snapshot_at``."""
    from supervisor.core.checkpoints import write_checkpoint

    run.mkdir()
    lines = []
    for seq in range(n):
        patch = [{"op": "add", "path": f"/k{seq}", "value": seq}]
        rec: dict = {"kind": "step", "seq": seq, "step": f"s{seq}", "output": seq, "state_patch": patch}
        if seq == snapshot_at:
            state = {f"k{i}": i for i in range(seq + 1)}
            fname = write_checkpoint(run, "cp", seq=seq, pos=seq, ts="t", state=state)
            rec = {"kind": "checkpoint", "seq": seq, "name": "cp", "file": fname, "state_patch": patch}
        lines.append(orjson.dumps(rec) + b"\n")
    (run / "journal.jsonl").write_bytes(b"".join(lines))


def test_state_cursor_moves_forward_by_the_patches_in_between_only(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor

    run = tmp_path / "run"
    _patched_journal(run, 200)
    cur = StateCursor(run, chunk=64)  # small chunks: the stream crosses many of them
    first = cur.state_at(10, Shape())
    assert first == {f"k{i}": i for i in range(11)} and cur.patches == 11
    assert cur.state_at(150, Shape()) == {f"k{i}": i for i in range(151)}
    assert cur.patches == 151  # 140 more, not 151 again
    assert first == {f"k{i}": i for i in range(11)}  # an answer handed out is never changed afterwards
    assert cur.state_at(5, Shape()) == {f"k{i}": i for i in range(6)}  # backwards: from the start again
    assert cur.origin == -1


def test_state_cursor_starts_from_the_nearest_snapshot_on_the_path(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor, path_ranges

    run = tmp_path / "run"
    _patched_journal(run, 200, snapshot_at=120)
    fname = checkpoint_files(run)[0].name
    shape = Shape(checkpoints=((120, fname),))
    cur = StateCursor(run)
    assert cur.state_at(130, shape) == {f"k{i}": i for i in range(131)}
    assert cur.origin == 120 and cur.patches == 10
    # a rollback at 150 to the start abandons every record before it
    cut = Shape(checkpoints=((120, fname),), cuts=((-1, 150),))
    assert path_ranges(cut, 160) == [(150, 161)]
    assert cur.state_at(160, cut) == {f"k{i}": i for i in range(150, 161)}
    assert cur.origin == -1  # the snapshot at 120 is on the abandoned branch
    # the snapshot file gone: the same state from the patches alone
    (run / "checkpoints" / fname).unlink()
    fresh = StateCursor(run)
    assert fresh.state_at(130, shape) == {f"k{i}": i for i in range(131)} and fresh.origin == -1


def test_state_cursor_reads_on_from_where_it_stopped_as_the_journal_grows(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor

    run = tmp_path / "run"
    _patched_journal(run, 50)
    cur = StateCursor(run, chunk=100)
    assert cur.state_at(49, Shape()) == {f"k{i}": i for i in range(50)}
    with open(run / "journal.jsonl", "ab") as f:  # appended after the answer, then sealed by a rotation
        for seq in range(50, 60):
            f.write(orjson.dumps({"kind": "step", "seq": seq, "state_patch": [{"op": "add", "path": f"/k{seq}", "value": seq}]}) + b"\n")
    (run / "journal.jsonl").rename(run / "journal.000001.jsonl")
    (run / "journal.jsonl").write_bytes(orjson.dumps({"kind": "note", "seq": 60, "state_patch": [{"op": "add", "path": "/n", "value": 1}]}) + b"\n")
    assert cur.state_at(60, Shape()) == {**{f"k{i}": i for i in range(60)}, "n": 1}
    assert cur.patches == 61


def test_state_cursor_steps_on_past_a_damaged_snapshot_instead_of_starting_over(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor

    run = tmp_path / "run"
    _patched_journal(run, 200, snapshot_at=120)
    fname = checkpoint_files(run)[0].name
    (run / "checkpoints" / fname).write_bytes(b"{not json")
    shape = Shape(checkpoints=((120, fname),))
    cur = StateCursor(run)
    assert cur.state_at(100, shape) == {f"k{i}": i for i in range(101)} and cur.patches == 101
    assert cur.state_at(150, shape) == {f"k{i}": i for i in range(151)}
    assert cur.patches == 151  # on from 100, not from the start again
