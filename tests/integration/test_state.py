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
    first = cur.state_at(10, Shape(), after_result=False)
    assert first == {f"k{i}": i for i in range(11)} and cur.patches == 11
    assert cur.state_at(150, Shape(), after_result=False) == {f"k{i}": i for i in range(151)}
    assert cur.patches == 151  # 140 more, not 151 again
    assert first == {f"k{i}": i for i in range(11)}  # an answer handed out is never changed afterwards
    assert cur.state_at(5, Shape(), after_result=False) == {f"k{i}": i for i in range(6)}  # backwards: from the start again
    assert cur.origin == -1


def test_state_cursor_starts_from_the_nearest_snapshot_on_the_path(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor, path_ranges

    run = tmp_path / "run"
    _patched_journal(run, 200, snapshot_at=120)
    fname = checkpoint_files(run)[0].name
    shape = Shape(checkpoints=((120, fname),))
    cur = StateCursor(run)
    assert cur.state_at(130, shape, after_result=False) == {f"k{i}": i for i in range(131)}
    assert cur.origin == 120 and cur.patches == 10
    # a rollback at 150 to the start abandons every record before it
    cut = Shape(checkpoints=((120, fname),), cuts=((-1, 150),))
    assert path_ranges(cut, 160) == [(150, 161)]
    assert cur.state_at(160, cut, after_result=False) == {f"k{i}": i for i in range(150, 161)}
    assert cur.origin == -1  # the snapshot at 120 is on the abandoned branch
    # the snapshot file gone: the same state from the patches alone
    (run / "checkpoints" / fname).unlink()
    fresh = StateCursor(run)
    assert fresh.state_at(130, shape, after_result=False) == {f"k{i}": i for i in range(131)} and fresh.origin == -1


def test_state_cursor_reads_on_from_where_it_stopped_as_the_journal_grows(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor

    run = tmp_path / "run"
    _patched_journal(run, 50)
    cur = StateCursor(run, chunk=100)
    assert cur.state_at(49, Shape(), after_result=False) == {f"k{i}": i for i in range(50)}
    with open(run / "journal.jsonl", "ab") as f:  # appended after the answer, then sealed by a rotation
        for seq in range(50, 60):
            f.write(orjson.dumps({"kind": "step", "seq": seq, "state_patch": [{"op": "add", "path": f"/k{seq}", "value": seq}]}) + b"\n")
    (run / "journal.jsonl").rename(run / "journal.000001.jsonl")
    (run / "journal.jsonl").write_bytes(orjson.dumps(
        {"kind": "note", "seq": 60, "state_patch": [{"op": "add", "path": "/n", "value": 1}]}
    ) + b"\n")
    assert cur.state_at(60, Shape(), after_result=False) == {**{f"k{i}": i for i in range(60)}, "n": 1}
    assert cur.patches == 61


def test_state_cursor_steps_on_past_a_damaged_snapshot_instead_of_starting_over(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor

    run = tmp_path / "run"
    _patched_journal(run, 200, snapshot_at=120)
    fname = checkpoint_files(run)[0].name
    (run / "checkpoints" / fname).write_bytes(b"{not json")
    shape = Shape(checkpoints=((120, fname),))
    cur = StateCursor(run)
    assert cur.state_at(100, shape, after_result=False) == {f"k{i}": i for i in range(101)} and cur.patches == 101
    assert cur.state_at(150, shape, after_result=False) == {f"k{i}": i for i in range(151)}
    assert cur.patches == 151  # on from 100, not from the start again


def test_the_state_at_a_step_is_after_its_result_in_every_reader(tmp_path: Path) -> None:
    """``state --at``, ``diff``, history and the TUI's model (files, after the scan) agree: a step's state includes its result."""
    from supervisor.core import history
    from supervisor.views.scan import scan_journal
    from supervisor.views.timeline import TimelineModel

    from ..conftest import run_agent, run_cli

    run = tmp_path / "run"
    assert run_agent(run).returncode == 0
    h = history.load(run)
    seq = {(r.get("kind"), r.get("step") or r.get("name")): r["seq"] for r in h.entries}
    q1, q2, begin_q2 = seq[("step", "search:q1")], seq[("step", "search:q2")], seq[("begin", "search:q2")]
    cp = seq[("checkpoint", "research-done")]

    def cli_state(at: int) -> dict:
        r = run_cli("state", str(run), "--at", str(at))
        assert r.returncode == 0, r.stderr
        return orjson.loads(r.stdout)

    f1, f2 = ["durable agents q1 result 0"], ["durable agents q1 result 0", "durable agents q2 result 0"]
    assert cli_state(q1)["findings"] == f1  # the agent appended q1's hit after the step returned
    assert cli_state(begin_q2)["findings"] == f1  # q2 starts with it
    assert cli_state(q2)["findings"] == f2
    assert cli_state(cp)["findings"] == f2  # a checkpoint is its snapshot
    r = run_cli("diff", str(run), str(q1), str(q2))
    assert r.returncode == 0 and r.stdout == "+ /findings/1: durable agents q2 result 0\n", r.stdout
    # the state right after the record (what a replay to it rebuilds) is still there for a fork
    assert history.state_at(run, h, q1)["findings"] == []

    m = TimelineModel(run, tail_rows=3)
    m.open()
    m.adopt(scan_journal(run))
    for s in range(len(h.entries)):
        m.forget_state()
        assert m.state_at(s) == cli_state(s) == history.state_at(run, h, s, after_result=True), s


def test_result_seq_crosses_begins_failures_and_restarts_and_stops_at_a_rollback(tmp_path: Path) -> None:
    from supervisor.core.cursor import Shape, StateCursor

    recs = [
        {"kind": "step", "step": "a", "output": 1, "state_patch": [{"op": "add", "path": "/a", "value": 0}]},  # 0
        {"kind": "checkpoint", "name": "cp", "state_patch": [{"op": "replace", "path": "/a", "value": 1}]},  # 1
        {"kind": "begin", "step": "b"},  # 2
        {"kind": "step", "step": "b", "output": 2},  # 3: no change made before or in it
        {"kind": "begin", "step": "c"},  # 4
        {"kind": "step", "step": "c", "error": {"message": "boom"}},  # 5: failed
        {"kind": "start", "attempt": 2},  # 6: a restart
        {"kind": "step", "step": "c", "output": 3, "state_patch": [{"op": "add", "path": "/b", "value": 2}]},  # 7
        {"kind": "step", "step": "d", "output": 4},  # 8
        {"kind": "rollback", "checkpoint": "cp", "checkpoint_seq": 1},  # 9
        {"kind": "step", "step": "b", "output": 5, "state_patch": [{"op": "add", "path": "/z", "value": 9}]},  # 10
        {"kind": "note", "message": "state at exit", "state_patch": [{"op": "add", "path": "/end", "value": True}]},  # 11
    ]
    for i, r in enumerate(recs):
        r["seq"] = i
    run = tmp_path / "run"
    run.mkdir()
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    want = {0: 1, 1: 1, 2: 3, 3: 7, 4: 7, 5: 7, 6: 6, 7: 8, 8: 8, 9: 9, 10: 11, 11: 11}
    for cur in (StateCursor(run), StateCursor(run, records=recs)):
        assert {s: cur.result_seq(s) for s in range(len(recs))} == want
    shape = Shape(cuts=((1, 9),))
    cur = StateCursor(run)
    assert cur.state_at(0, shape) == {"a": 1}  # step a's result is carried by the checkpoint
    assert cur.state_at(3, shape) == {"a": 1, "b": 2}  # through the failure and the restart
    assert cur.state_at(8, shape) == {"a": 1, "b": 2}  # the rollback ends the branch
    assert cur.state_at(9, shape) == {"a": 1}  # back at the checkpoint
    assert cur.state_at(10, shape) == {"a": 1, "z": 9, "end": True}
    assert cur.state_at(3, shape, after_result=False) == {"a": 1}


def test_a_malformed_checkpoint_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A snapshot whose ``format`` is a string (or that is otherwise malformed) is not used: one warning line,
    the state from the journal's patches; a patch that cannot apply is one error line and exit 2."""
    from ..conftest import run_agent, run_cli

    run = tmp_path / "run"
    assert run_agent(run).returncode == 0
    want = run_cli("state", str(run))
    assert want.returncode == 0 and want.stderr == ""
    cp = run / "checkpoints" / "0002-research-done.json"
    good = cp.read_bytes()
    for bad in ({"format": "1"}, {"format": None}, {"format": [1]}):
        cp.write_bytes(orjson.dumps({**orjson.loads(good), **bad}))
        r = run_cli("state", str(run))
        assert r.returncode == 0 and r.stdout == want.stdout, r.stderr
        assert r.stderr.count("\n") == 1 and "0002-research-done.json is damaged: its 'format' is" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    for bad_doc in (b"[1, 2]", b'{"format": 1}', b"{not json"):
        cp.write_bytes(bad_doc)
        r = run_cli("state", str(run), "--at", "research-done")
        assert r.returncode == 0 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    # a snapshot that loads but whose state the patches after it cannot apply to
    cp.write_bytes(orjson.dumps({**orjson.loads(good), "state": "not a dict"}))
    r = run_cli("state", str(run))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "cannot rebuild the state at seq" in r.stderr and "does not apply" in r.stderr


def test_the_look_ahead_of_a_step_does_not_make_the_next_move_read_from_the_start(tmp_path: Path) -> None:
    """Forward moves still apply only the patches in between, and read on from where the last read stopped."""
    from supervisor.core.cursor import Shape, StateCursor

    run = tmp_path / "run"
    _patched_journal(run, 400)
    cur = StateCursor(run, chunk=256)
    reads: list[int] = []
    real = cur._read_from

    def spy(start, a, b, *more):  # type: ignore[no-untyped-def]
        reads.append(0 if start is None else start.first_seq)
        return real(start, a, b, *more)

    cur._read_from = spy  # type: ignore[method-assign]
    for seq in range(300, 400, 7):
        assert cur.state_at(seq, Shape()) == {f"k{i}": i for i in range(min(seq + 2, 400))}
    assert cur.patches == 400
    assert reads.count(0) == 1  # the first answer reads from the start (once: it looks ahead from there), no other
