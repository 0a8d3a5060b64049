"""``fork``: a new run directory from any record of a run; the original untouched; the fork continues live."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from supervisor.core import history, rundir
from supervisor.core.fork import FORK_CHECKPOINT, ForkError, fork
from supervisor.core.journal_reader import JournalReader
from supervisor.core.records import step_name

from ..conftest import SAMPLE_AGENT, run_agent, run_cli
from .test_replay import ledger, snapshot

PY = sys.executable


def journal(run_dir: Path) -> list[dict]:
    return [orjson.loads(x) for x in (run_dir / rundir.JOURNAL).read_bytes().splitlines()]


def seq_of(run_dir: Path, kind: str, name: str) -> int:
    """The seq of the first record of ``kind`` named ``name`` (a step or a checkpoint)."""
    for r in journal(run_dir):
        if r.get("kind") == kind and name in (r.get("step"), r.get("name")):
            return int(r["seq"])
    raise AssertionError(f"no {kind} {name}")


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    run_dir = tmp_path / "orig"
    r = run_agent(run_dir, "--ledger", str(tmp_path / "orig-ledger.jsonl"))
    assert r.returncode == 0, r.stderr
    return run_dir


def test_fork_copies_effective_history_and_state_and_leaves_origin_untouched(recorded: Path, tmp_path: Path) -> None:
    at = seq_of(recorded, "step", "search:q2")
    before = snapshot(recorded)
    new = fork(recorded, at, tmp_path / "f")
    assert new == tmp_path / "f"
    assert snapshot(recorded) == before  # byte for byte, mtimes too

    orig = journal(recorded)
    recs = journal(new)
    copied, fork_rec, cp = recs[:-2], recs[-2], recs[-1]
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert [r["origin_seq"] for r in copied] == list(range(at + 1))
    assert [r["origin_id"] for r in copied] == [r["id"] for r in orig[: at + 1]]
    assert len({r["id"] for r in recs}) == len(recs)
    assert [r.get("output") for r in copied] == [r.get("output") for r in orig[: at + 1]]
    assert fork_rec["kind"] == "fork"
    assert fork_rec["origin"] == {"run_dir": str(recorded.resolve()), "run_id": "orig", "seq": at, "id": orig[at]["id"]}
    assert cp["kind"] == "checkpoint" and cp["name"] == FORK_CHECKPOINT

    h_new, h_orig = history.load(new), history.load(recorded)
    assert history.state_at(new, h_new, cp["seq"]) == history.state_at(recorded, h_orig, at)
    assert history.state_at(new, h_new, cp["seq"])["findings"] == ["durable agents q1 result 0"]
    assert [step_name(s) for s in h_new.steps] == ["plan", "search:q1", "search:q2"]

    meta = rundir.read_run_json(new)
    assert meta["status"] == "forked" and meta["id"] != "orig"
    assert meta["forked_from"]["seq"] == at
    assert str(recorded.resolve()) not in meta["command"]  # its --run-dir now names the fork
    assert str(new.resolve()) in meta["command"]
    for p in [new, new / "checkpoints", *new.rglob("*")]:
        assert p.stat().st_mode & 0o777 == (0o700 if p.is_dir() else 0o600), p


def test_fork_then_agent_continues_live_from_the_fork_point(recorded: Path, tmp_path: Path) -> None:
    at = seq_of(recorded, "step", "search:q2")
    new = fork(recorded, at, tmp_path / "f")
    before = snapshot(recorded)
    led = tmp_path / "fork-ledger.jsonl"
    r = run_agent(new, "--ledger", str(led))
    assert r.returncode == 0, r.stderr
    assert ledger(led) == ["summarize"]  # plan and both searches came from the fork's journal; write_report calls no ledger
    assert "replayed ['plan', 'search:q1', 'search:q2']" in r.stdout
    assert "executed ['summarize', 'write_report']" in r.stdout
    h_new, h_orig = history.load(new), history.load(recorded)
    assert [s.get("output") for s in h_new.steps] == [s.get("output") for s in h_orig.steps]
    assert snapshot(recorded) == before


def test_fork_then_supervise_completes(recorded: Path, tmp_path: Path) -> None:
    at = seq_of(recorded, "checkpoint", "plan-done")
    r = run_cli("fork", str(recorded), "--at", "plan-done", "--to", str(tmp_path / "f"))
    assert r.returncode == 0, r.stderr
    assert f"at seq {at}" in r.stdout
    led = tmp_path / "sup-ledger.jsonl"
    r = run_cli(
        "supervise", "--run-dir", str(tmp_path / "f"), "-q", "--", PY, str(SAMPLE_AGENT), "--ledger", str(led), "--crash-in", "search:q2",
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # the fork's first attempt crashed in search:q2 and the supervisor resumed it; plan never ran again
    assert "plan" not in ledger(led)
    assert ledger(led).count("search:q1") == 1 and ledger(led).count("summarize") == 1
    assert rundir.read_run_json(tmp_path / "f")["status"] == "succeeded"
    assert rundir.read_run_json(recorded)["status"] == "succeeded"
    v = run_cli("replay", str(tmp_path / "f"), "--verify", "--", PY, str(SAMPLE_AGENT), "--ledger", str(tmp_path / "v.jsonl"))
    assert v.returncode == 0, v.stdout + v.stderr


def test_fork_keeps_rollbacks_folding_the_same_way(tmp_path: Path) -> None:
    run_dir = tmp_path / "rolled"
    codes = [run_agent(run_dir, "--fail", "summarize:3", "--ledger", str(tmp_path / "l.jsonl")).returncode for _ in range(4)]
    assert codes == [1, 1, rundir.EXIT_ROLLBACK, 0]
    h = history.load(run_dir)
    last = h.effective[-1]["seq"]
    new = fork(run_dir, last, tmp_path / "f")
    h_new = history.load(new)
    assert not h_new.problems
    assert len(h_new.rollbacks) == len(h.rollbacks) == 1
    assert [s.get("output") for s in h_new.steps] == [s.get("output") for s in h.steps]
    assert [b.records for b in h_new.branches] == [[]]  # abandoned attempts are not copied; the original keeps them
    rb = h_new.rollbacks[0]
    target = next(r for r in h_new.effective if r["seq"] == rb["checkpoint_seq"])
    assert target["kind"] == "checkpoint" and target["name"] == rb["checkpoint"]
    # the agent on the fork sees the rollback (strategy fallback) and replays cleanly
    v = run_cli("replay", str(new), "--verify", "--", PY, str(SAMPLE_AGENT), "--ledger", str(tmp_path / "v.jsonl"))
    assert v.returncode == 0, v.stdout + v.stderr


def test_fork_inside_an_abandoned_branch(tmp_path: Path) -> None:
    run_dir = tmp_path / "rolled"
    codes = [run_agent(run_dir, "--fail", "summarize:3", "--ledger", str(tmp_path / "l.jsonl")).returncode for _ in range(3)]
    assert codes == [1, 1, rundir.EXIT_ROLLBACK]
    assert run_agent(run_dir, "--fail", "summarize:3", "--ledger", str(tmp_path / "l.jsonl")).returncode == 0
    h = history.load(run_dir)
    abandoned = sorted(h.abandoned_seqs)
    at = abandoned[-1]
    new = fork(run_dir, at, tmp_path / "f")
    recs = journal(new)
    assert recs[-3]["origin_seq"] == at  # the branch as it stood then, without the rollback that abandoned it
    assert not any(r.get("kind") == "rollback" for r in recs)


def test_fork_of_a_minimal_journal_without_run_json(tmp_path: Path) -> None:
    run_dir = tmp_path / "minimal"
    run_dir.mkdir()
    (run_dir / "journal.jsonl").write_bytes(
        b'{"step": "a", "output": 1}\n{"step": "b", "output": 2}\n'
        b'not json\n{"step": "c", "output": 3}\n'
    )
    new = fork(run_dir, 1)
    assert new == tmp_path / "minimal-fork-1"
    recs = journal(new)
    assert [r.get("step") for r in recs] == ["a", "b", None, None]
    assert [r.get("output") for r in recs[:2]] == [1, 2]
    assert fork(run_dir, 3) == tmp_path / "minimal-fork-3"
    assert fork(run_dir, 1) == tmp_path / "minimal-fork-1-2"  # never an existing directory
    assert journal(tmp_path / "minimal-fork-3")[-2]["skipped_bad_lines"] == 1
    assert rundir.read_run_json(new)["forked_from"]["run_id"] == "minimal"


def test_fork_errors_change_nothing(recorded: Path, tmp_path: Path) -> None:
    before = snapshot(recorded)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    cases = [
        (["fork", str(recorded), "--at", "999"], "no record with seq 999"),
        (["fork", str(recorded), "--at", "nope"], "no checkpoint named 'nope'"),
        (["fork", str(recorded), "--at", "3", "--to", str(busy)], "not empty"),
        (["fork", str(recorded), "--at", "3", "--to", str(recorded / "sub")], "inside the run being forked"),
        (["fork", str(tmp_path / "absent"), "--at", "3"], "no such run directory"),
    ]
    for argv, message in cases:
        r = run_cli(*argv)
        assert r.returncode == 2, (argv, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and message in r.stderr, (argv, r.stderr)
    assert (busy / "keep.txt").read_text() == "mine" and sorted(p.name for p in busy.iterdir()) == ["keep.txt"]
    assert snapshot(recorded) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "orig", "orig-ledger.jsonl"]  # no temp dir left
    with pytest.raises(ForkError):
        fork(recorded, -5)


def test_fork_into_an_empty_directory(recorded: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fork(recorded, 2, empty) == empty
    assert JournalReader(empty).index() == 5  # start, begin, step, fork, checkpoint


def test_fork_of_a_run_being_written(recorded: Path, tmp_path: Path) -> None:
    """Forking never takes the origin's journal lock: a run being written can be forked."""
    from supervisor.core.journal_writer import JournalWriter

    with JournalWriter(recorded):
        new = fork(recorded, 2, tmp_path / "f")
    assert journal(new)[2]["step"] == "plan"


def test_fork_under_a_file_is_one_line(recorded: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    r = run_cli("fork", str(recorded), "--at", "2", "--to", str(tmp_path / "afile" / "f"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "is a file" in r.stderr
    assert (tmp_path / "afile").read_text() == "x"


def test_fork_at_every_seq_matches_the_origin(tmp_path: Path) -> None:
    """For each record of a run with a crash, a rollback and abandoned steps: the fork's state and steps are the origin's at that seq."""
    run_dir = tmp_path / "rolled"
    led = str(tmp_path / "l.jsonl")
    assert run_agent(run_dir, "--crash-in", "search:q2", "--ledger", led).returncode == 1
    codes = [run_agent(run_dir, "--fail", "summarize:3", "--ledger", led).returncode for _ in range(4)]
    assert codes == [1, 1, rundir.EXIT_ROLLBACK, 0]
    before = snapshot(run_dir)
    h = history.load(run_dir)
    seqs = [r["seq"] for r in h.entries]
    assert h.branches and len(seqs) > 20
    for seq in seqs:
        new = fork(run_dir, seq, tmp_path / f"f{seq}")
        hn = history.load(new)
        assert not hn.problems, seq
        expected = history.state_at(run_dir, h, seq)
        assert history.state_at(new, hn, hn.effective[-1]["seq"]) == expected, seq
        assert history.state_at(new, hn, hn.effective[-3]["seq"]) == expected, seq  # from patches alone, before the fork checkpoint
        prefix_steps = history.fold([e for e in history.load(run_dir).entries if e["seq"] <= seq]).steps
        assert [(step_name(s), s.get("output")) for s in hn.steps] == [(step_name(s), s.get("output")) for s in prefix_steps], seq
    assert snapshot(run_dir) == before


def test_fork_of_a_run_with_a_relative_cwd_records_where_the_agent_ran(tmp_path: Path) -> None:
    """The sample runs record ``cwd: ../..`` (relative to the run directory): the fork's run.json must not
    take it relative to the fork, nor to the directory fork was called from."""
    import shutil

    from ..conftest import ROOT

    samples = tmp_path / "samples"
    shutil.copytree(ROOT / "sample_runs", samples)
    origin = samples / "runs" / "clean"
    meta0 = rundir.read_run_json(origin)
    assert meta0["cwd"] == "../.."
    origin_meta = {**meta0, "command": [*meta0["command"], "--run-dir", "runs/clean"]}
    rundir.write_run_json(origin, origin_meta)
    new = tmp_path / "elsewhere" / "fork"
    new.parent.mkdir()
    fork(origin, 1, new)
    meta = rundir.read_run_json(new)
    assert meta["cwd"] == str(samples.resolve())  # where the agent ran, whatever the fork's place
    assert meta["command"][:2] == ["python", "research_agent.py"]
    assert meta["command"][-1] == str(new.resolve())  # the relative --run-dir, taken from the recorded cwd
