"""The timeline model folds, counts and computes state exactly as ``history`` does, without loading the journal."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.core import checkpoints, history
from supervisor.core.journal_reader import JournalReader
from supervisor.views.scan import journal_regions, scan_journal, search_regions
from supervisor.views.timeline import TimelineModel

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.booleans()),  # (step, failed?)
        st.tuples(st.just("checkpoint"), st.booleans()),  # (checkpoint, with a snapshot file?)
        st.tuples(st.just("rollback"), st.integers(0, 5)),  # (rollback, which checkpoint back; 5: start)
        st.tuples(st.just("note"), st.booleans()),
        st.tuples(st.just("bad"), st.booleans()),
    ),
    max_size=40,
)


def build(run: Path, ops: list[tuple[str, object]]) -> list[bytes]:
    """Write a journal from ``ops``; snapshots hold the true state (computed with history)."""
    run.mkdir(mode=0o700)
    lines: list[bytes] = []
    cps: list[tuple[int, str]] = []

    def flush() -> None:
        (run / "journal.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))

    for i, (kind, arg) in enumerate(ops):
        seq = len(lines)
        if kind == "step":
            rec: dict[str, object] = {"kind": "step", "step": f"s{i}", "seq": seq, "ts": f"t{seq:05d}"}
            if arg:
                rec["error"] = {"message": "boom"}
            else:
                rec["output"] = i
                rec["state_patch"] = [{"op": "add", "path": f"/k{i}", "value": i}]
            lines.append(orjson.dumps(rec))
        elif kind == "checkpoint":
            name = f"cp{len(cps)}"
            rec = {"kind": "checkpoint", "name": name, "seq": seq, "ts": f"t{seq:05d}",
                   "state_patch": [{"op": "add", "path": f"/c{i}", "value": name}]}
            if arg:
                lines.append(orjson.dumps(rec))
                flush()
                h = history.load(run)
                doc = history.state_at(run, h, seq)
                rec["file"] = checkpoints.write_checkpoint(run, name, seq=seq, pos=0, ts="t", state=doc)
                lines[-1] = orjson.dumps(rec)
            else:
                lines.append(orjson.dumps(rec))
            cps.append((seq, name))
        elif kind == "rollback":
            back = int(arg)  # type: ignore[call-overload]
            if back >= len(cps) or back == 5:
                rec = {"kind": "rollback", "checkpoint": None, "checkpoint_seq": None, "seq": seq}
            else:
                cs, name = cps[-1 - back]
                rec = {"kind": "rollback", "checkpoint": name, "checkpoint_seq": cs, "seq": seq}
            lines.append(orjson.dumps(rec))
        elif kind == "note":
            lines.append(orjson.dumps({"kind": "note", "message": "hello error", "seq": seq}))
        else:
            lines.append(b"not json at all")
    flush()
    return lines


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_model_matches_history_fold(ops: list[tuple[str, object]]) -> None:
    base = Path(tempfile.mkdtemp(prefix="tlm-"))
    try:
        run = base / "run"
        lines = build(run, ops)
        h = history.fold(JournalReader(run).load())
        m = TimelineModel(run, tail_rows=5)
        m.open()
        m.adopt(scan_journal(run))
        assert m.count == len(lines)
        bad = {e.seq for e in h.entries if not isinstance(e, dict)}  # not records: neither effective nor abandoned
        assert {s for s in range(m.count) if m.is_abandoned(s)} - bad == h.abandoned_seqs
        assert m.effective_steps == len(h.steps)
        assert m.effective_checkpoints == [c["seq"] for c in h.checkpoints]
        errs = [e["seq"] for e in h.entries if isinstance(e, dict) and e.get("kind") == "step" and e.get("error")]
        assert m.error_seqs == errs
        for seq in range(len(lines)):
            m.forget_state()
            assert m.state_at(seq) == history.state_at(run, h, seq, after_result=True), seq
        # stepping forward from a cached state gives the same answers
        m.forget_state()
        for seq in range(len(lines)):
            assert m.state_at(seq) == history.state_at(run, h, seq, after_result=True), seq
        # search finds exactly the lines that contain the text, in any case for a lower-case query
        want = [i for i, line in enumerate(lines) if b"error" in line.lower()]
        assert search_regions(journal_regions(run), "error") == want
    finally:
        shutil.rmtree(base)


def test_live_appends_and_rotation_are_scanned_once(tmp_path: Path) -> None:
    from supervisor.core.journal_writer import JournalWriter

    run = tmp_path / "run"
    w = JournalWriter(run, durable=False, rotate_bytes=400)
    try:
        for i in range(5):
            w.append({"kind": "step", "step": f"a{i}", "output": i})
        m = TimelineModel(run, tail_rows=3)
        m.open()
        m.adopt(scan_journal(run))
        assert m.count == 5 and m.effective_steps == 5
        for i in range(20):  # several rotations while the model follows
            w.append({"kind": "step", "step": f"b{i}", "output": i})
            if i == 10:
                w.append({"kind": "step", "step": "bad", "error": {"message": "x"}})
            m.poll()
        assert m.count == 26 and m.effective_steps == 25 and m.error_seqs == [16]
        assert len(list(run.glob("journal.0*.jsonl"))) >= 2
        assert search_regions(m.regions, "\"step\":\"b19\"") == [25]  # ids are random hex: match the field
        assert m.record(25)["step"] == "b19"  # type: ignore[index]
    finally:
        w.close()


def test_state_before_the_scan_comes_from_the_tail_or_says_to_wait(tmp_path: Path) -> None:
    import pytest

    run = tmp_path / "run"
    run.mkdir()
    lines = [{"kind": "step", "step": f"s{i}", "seq": i, "state_patch": [{"op": "add", "path": f"/k{i}", "value": i}]} for i in range(10)]
    fname = checkpoints.write_checkpoint(run, "cp", seq=10, pos=10, ts="t", state={f"k{i}": i for i in range(10)})
    lines.append({"kind": "checkpoint", "name": "cp", "seq": 10, "file": fname})
    lines += [
        {"kind": "step", "step": f"s{i}", "seq": i, "state_patch": [{"op": "add", "path": f"/k{i}", "value": i}]} for i in range(11, 14)
    ]
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    m = TimelineModel(run, tail_rows=5)
    m.open()
    want = {f"k{i}": i for i in range(14) if i != 10}
    assert m.state_at(13) == want  # the snapshot at 10 is in the tail
    with pytest.raises(ValueError, match="still being indexed"):
        m.state_at(8)  # before the tail: not known yet (never a wrong {})
    m.adopt(scan_journal(run))
    assert m.state_at(8) == {f"k{i}": i for i in range(10)}  # after its result: through the next step's record
