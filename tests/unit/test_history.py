"""The effective history: rollbacks fold into abandoned branches; state at any record."""

from __future__ import annotations

from pathlib import Path

import orjson

from supervisor.core.history import fold, load, state_at
from supervisor.core.journal_reader import JournalReader


def write_lines(path: Path, recs: list[dict]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))


def test_rollback_abandons_the_steps_after_the_checkpoint(tmp_path: Path) -> None:
    write_lines(
        tmp_path,
        [
            {"step": "a", "output": 1},
            {"kind": "checkpoint", "name": "cp"},
            {"step": "b", "output": 2},
            {"step": "c", "error": "boom"},
            {"kind": "rollback", "checkpoint": "cp", "reason": "failures"},
            {"step": "b", "output": 3},
        ],
    )
    h = load(tmp_path)
    assert [r["seq"] for r in h.effective] == [0, 1, 4, 5]
    assert [(r["step"], r["output"], r["pos"]) for r in h.steps] == [("a", 1, 0), ("b", 3, 1)]
    assert len(h.branches) == 1 and [r["seq"] for r in h.branches[0].records] == [2, 3]
    assert h.abandoned_seqs == {2, 3}


def test_nested_rollbacks_and_rollback_to_start(tmp_path: Path) -> None:
    write_lines(
        tmp_path,
        [
            {"step": "a", "output": 1},
            {"kind": "checkpoint", "name": "cp1"},
            {"step": "b", "output": 2},
            {"kind": "checkpoint", "name": "cp2"},
            {"step": "c", "output": 3},
            {"kind": "rollback", "checkpoint": "cp2"},
            {"step": "c2", "output": 4},
            {"kind": "rollback", "checkpoint": "cp1"},
            {"step": "b2", "output": 5},
            {"kind": "rollback", "checkpoint": None},
            {"step": "z", "output": 6},
        ],
    )
    h = load(tmp_path)
    assert [s["step"] for s in h.steps] == ["z"]
    assert [r["seq"] for r in h.effective] == [9, 10]
    assert h.abandoned_seqs == set(range(9))
    assert [b.checkpoint for b in h.branches] == ["cp2", "cp1", None]


def test_rollback_to_an_unknown_checkpoint_is_reported_not_fatal(tmp_path: Path) -> None:
    write_lines(tmp_path, [{"step": "a", "output": 1}, {"kind": "rollback", "checkpoint": "nope"}, {"step": "b", "output": 2}])
    h = load(tmp_path)
    assert [s["step"] for s in h.steps] == ["a", "b"]
    assert "not in the effective history" in h.problems[0].reason


def test_failed_steps_are_not_done_and_count_consecutively(tmp_path: Path) -> None:
    write_lines(
        tmp_path,
        [
            {"step": "a", "output": 1},
            {"kind": "begin", "step": "b"},
            {"step": "b", "error": {"message": "x"}, "transient": True},
            {"step": "b", "error": {"message": "x"}},
            {"kind": "start"},
            {"kind": "begin", "step": "b"},
            {"step": "b", "error": {"message": "y"}},
            {"kind": "begin", "step": "b"},
        ],
    )
    h = fold(JournalReader(tmp_path).load())
    assert [s["step"] for s in h.steps] == ["a"]
    assert h.consecutive_failures() == 2
    assert h.in_flight() is not None and h.in_flight()["seq"] == 7


def test_state_at_uses_checkpoints_and_patches_and_follows_branches(tmp_path: Path) -> None:
    from supervisor import Run

    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        run.state["n"] = 1
        run.step("a", lambda: None)  # seq 2
        run.checkpoint("one")  # seq 3
        run.state["n"] = 2
        run.state["xs"] = [1]
        run.step("b", lambda: None)  # seq 5
    h = load(run_dir)
    seqs = {r.get("step") or r.get("name"): r["seq"] for r in h.effective if r["kind"] in ("step", "checkpoint")}
    assert state_at(run_dir, h, seqs["a"]) == {"n": 1}
    assert state_at(run_dir, h, seqs["one"]) == {"n": 1}
    assert state_at(run_dir, h, seqs["b"]) == {"n": 2, "xs": [1]}
    # the checkpoint file is not needed: patches alone rebuild the same state
    for p in (run_dir / "checkpoints").iterdir():
        p.rename(p.with_suffix(".moved"))
    assert state_at(run_dir, load(run_dir), seqs["b"]) == {"n": 2, "xs": [1]}


def test_the_sdks_lazy_view_folds_like_a_full_load(tmp_path: Path) -> None:
    """The resume view (raw step lines, no begins) gives the same steps, positions and rollbacks."""
    from supervisor.core.records import LazyRecord

    from ..conftest import ROOT

    sample = ROOT / "sample_runs" / "runs" / "rolled-back" / "journal.jsonl"
    extra = [
        b'{"step": "hand-written", "output": 1}',
        b'not json',
        b'{"kind":"step","step":"with-error-key-in-output","output":{"error":null}}',
        b'{"kind":"step","step":"failed","error":{"message":"x"}}',
        b"",
    ]
    (tmp_path / "journal.jsonl").write_bytes(sample.read_bytes() + b"\n".join(extra) + b"\n")
    full = fold(JournalReader(tmp_path).load())
    lazy = fold(JournalReader(tmp_path).load(lazy=True))
    as_dict = [s.record() if isinstance(s, LazyRecord) else s for s in lazy.steps]
    assert [(s["step"], s.get("output"), s["pos"], s["seq"]) for s in as_dict] == [
        (s["step"], s.get("output"), s["pos"], s["seq"]) for s in full.steps
    ]
    assert any(isinstance(s, LazyRecord) for s in lazy.steps)
    assert [r["seq"] for r in lazy.rollbacks] == [r["seq"] for r in full.rollbacks]
    assert [r["seq"] for r in lazy.checkpoints] == [r["seq"] for r in full.checkpoints]
    assert lazy.consecutive_failures() == full.consecutive_failures() == 1
    assert [b.line for b in lazy.problems if b.reason == "not JSON"] == [b.line for b in full.problems if b.reason == "not JSON"]
