"""The SDK's part of the workspace (docs/workspace.md): which directory, the snapshots it takes at the start,
at each checkpoint and before its own rollback, and the restore it finishes in ``Run.open``."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from supervisor import EXIT_FAILED, EXIT_ROLLBACK, Run
from supervisor.core import rundir, workspace
from supervisor.errors import WorkspaceError

from ..conftest import ROOT, run_cli


def journal(run_dir: Path) -> list[dict]:
    return [orjson.loads(x) for x in (run_dir / rundir.JOURNAL).read_bytes().splitlines()]


def index(run_dir: Path) -> list[workspace.SnapshotRef]:
    return workspace.Store(run_dir).index()


@pytest.fixture(autouse=True)
def _no_outer_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("AGENT_SUPERVISOR_"):
            monkeypatch.delenv(k)


def test_a_workspace_given_to_run_open_is_declared_made_and_snapshotted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    with Run.open(run_dir, workspace="proj/ws") as run:  # relative: from the current directory; made if missing
        assert run.workspace == (tmp_path / "proj" / "ws").resolve()
        assert run.workspace.is_dir()
        (run.workspace / "a.txt").write_text("one")
        run.step("write", lambda: 1)
        run.checkpoint("one")
    meta = rundir.read_run_json(run_dir)
    assert workspace.settings_of(run_dir) == workspace.Settings(root=tmp_path / "proj" / "ws")
    assert meta["workspace"]["root"] == str(tmp_path / "proj" / "ws")
    refs = index(run_dir)
    assert [(r.for_, r.seq, r.name, r.by) for r in refs] == [
        ("start", None, None, "sdk"),
        ("checkpoint", next(r["seq"] for r in journal(run_dir) if r.get("kind") == "checkpoint"), "one", "sdk"),
    ]
    assert refs[0].files == 0 and refs[1].files == 1
    assert [r.snapshot for r in workspace.committed(run_dir)] == [r.snapshot for r in refs]

    # a resume serves the checkpoint: no snapshot is taken again, and none at the start either
    with Run.open(run_dir, workspace="proj/ws") as run:
        run.step("write", lambda: 1)
        run.checkpoint("one")
    assert len(index(run_dir)) == 2


def test_without_a_workspace_nothing_is_declared_or_imported(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from supervisor import Run\n"
        "with Run.open(sys.argv[1]) as run:\n"
        "    run.step('a', lambda: 1); run.checkpoint('c')\n"
        "    assert run.workspace is None\n"
        "assert 'supervisor.core.workspace' not in sys.modules, 'imported without a workspace'\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True,
                       cwd=ROOT, timeout=30, env={k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")})
    assert r.returncode == 0, r.stderr
    assert "workspace" not in rundir.read_run_json(tmp_path / "run")
    assert not (tmp_path / "run" / rundir.WORKSPACE).exists()


def test_the_environment_wins_and_keeps_the_declared_ignore_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, mine, theirs = tmp_path / "run", tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    rundir.ensure_dir(run_dir)
    workspace.declare(run_dir, workspace.Settings(root=theirs, ignore=("*.log",), max_file=1000))
    (theirs / "x.log").write_text("ignored")
    (theirs / "x.txt").write_text("kept")
    monkeypatch.setenv(rundir.ENV_WORKSPACE, str(theirs))
    with Run.open(run_dir, workspace=mine) as run:
        assert run.workspace == theirs.resolve()
        run.checkpoint("c")
    assert workspace.settings_of(run_dir) == workspace.Settings(root=theirs.resolve(), ignore=("*.log",), max_file=1000)
    ref = index(run_dir)[-1]
    assert sorted(workspace.Store(run_dir).manifest(ref.snapshot).files) == ["x.txt"]


def test_the_declared_workspace_wins_over_the_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fork's agent run by hand names the original's workspace in its code: it must not work there."""
    run_dir, orig, forked = tmp_path / "run", tmp_path / "orig", tmp_path / "forked"
    orig.mkdir()
    forked.mkdir()
    rundir.ensure_dir(run_dir)
    workspace.declare(run_dir, workspace.Settings(root=forked.resolve()))
    with Run.open(run_dir, workspace=orig) as run:
        assert run.workspace == forked.resolve()
    assert f"declares the workspace {forked.resolve()}" in capsys.readouterr().err
    assert workspace.settings_of(run_dir) == workspace.Settings(root=forked.resolve())


def test_a_checkpoint_whose_files_cannot_be_taken_fails_and_writes_nothing(tmp_path: Path) -> None:
    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    ws.mkdir()
    rundir.ensure_dir(run_dir)
    workspace.declare(run_dir, workspace.Settings(root=ws.resolve(), max_file=100))
    with Run.open(run_dir) as run:
        run.state["n"] = 1
        run.step("a", lambda: 1)
        (ws / "big.bin").write_bytes(b"x" * 1000)
        run.state["n"] = 2
        with pytest.raises(WorkspaceError, match=r"big\.bin"):
            run.checkpoint("too-big")
        assert not [r for r in journal(run_dir) if r.get("kind") == "checkpoint"]
        assert not (run_dir / rundir.CHECKPOINTS).exists() or not os.listdir(run_dir / rundir.CHECKPOINTS)
        (ws / "big.bin").unlink()
        run.state["n"] = 3
        run.checkpoint("fine")  # the state shadow was reloaded: the next patch is made against the journal
    cps = [r for r in journal(run_dir) if r.get("kind") == "checkpoint"]
    assert [c["name"] for c in cps] == ["fine"]
    assert [r.name for r in workspace.committed(run_dir) if r.for_ == "checkpoint"] == ["fine"]
    from supervisor.core import history

    assert history.state_at(run_dir, history.load(run_dir), cps[0]["seq"]) == {"n": 3}


def _failing_agent(run_dir: Path, ws: Path) -> None:
    with Run.open(run_dir, workspace=ws, max_failures=3) as run:
        run.step("write", lambda: (ws / "keep.txt").write_text("checkpointed"))
        run.checkpoint("cp")

        def fail() -> None:
            (ws / "keep.txt").write_text("half-made")
            (ws / "junk.txt").write_text("junk")
            raise RuntimeError("nope")

        run.step("fail", fail)


def test_the_sdk_rollback_saves_the_branch_and_the_next_open_restores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    for _ in range(2):
        with pytest.raises(RuntimeError):
            _failing_agent(run_dir, ws)
    with pytest.raises(SystemExit) as e:
        _failing_agent(run_dir, ws)
    assert e.value.code == EXIT_ROLLBACK
    rb = next(r for r in journal(run_dir) if r.get("kind") == "rollback")
    refs = [r for r in workspace.committed(run_dir) if r.for_ == "abandoned"]
    assert [(r.seq, r.by) for r in refs] == [(rb["seq"], "sdk")]
    assert sorted(workspace.Store(run_dir).manifest(refs[0].snapshot).files) == ["junk.txt", "keep.txt"]
    assert (ws / "junk.txt").exists()  # restored at the next start, not by the process that rolled back
    capsys.readouterr()
    with Run.open(run_dir, workspace=ws) as run:
        assert sorted(os.listdir(ws)) == ["keep.txt"] and (ws / "keep.txt").read_text() == "checkpointed"
        assert len(run.rollbacks) == 1
    err = capsys.readouterr().err
    assert "agent-supervisor: restored the workspace to checkpoint 'cp'" in err, err
    with Run.open(run_dir, workspace=ws):
        pass
    assert "restored" not in capsys.readouterr().err  # once


def test_a_rollback_whose_branch_cannot_be_saved_stops_instead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    ws.mkdir()
    rundir.ensure_dir(run_dir)
    workspace.declare(run_dir, workspace.Settings(root=ws.resolve(), max_file=100))
    with pytest.raises(SystemExit) as e, Run.open(run_dir, max_failures=1) as run:
        run.checkpoint("cp")

        def fail() -> None:
            (ws / "big.bin").write_bytes(b"x" * 1000)
            raise RuntimeError("nope")

        run.step("fail", fail)
    assert e.value.code == EXIT_FAILED
    recs = journal(run_dir)
    assert not [r for r in recs if r.get("kind") == "rollback"]
    assert any(r.get("message") == "gave up" and "could not be saved" in r.get("reason", "") for r in recs)
    assert "nothing was restored or lost" in capsys.readouterr().err
    assert (ws / "big.bin").exists()


def test_replay_verify_writes_nothing(tmp_path: Path) -> None:
    import sys

    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import sys\nfrom pathlib import Path\nfrom supervisor import Run\n"
        "with Run.open(sys.argv[1], workspace=sys.argv[2]) as run:\n"
        "    run.step('w', lambda: (Path(sys.argv[2]) / 'f.txt').write_text('x'))\n"
        "    run.checkpoint('c')\n"
    )
    cmd = [sys.executable, str(agent), str(run_dir), str(ws)]
    import subprocess

    assert subprocess.run(cmd, cwd=ROOT, timeout=30).returncode == 0
    before = {p: p.read_bytes() for p in [*run_dir.rglob("*"), *ws.rglob("*")] if p.is_file()}
    r = run_cli("replay", str(run_dir), "--verify", "--", *cmd)
    assert r.returncode == 0, r.stdout + r.stderr
    after = {p: p.read_bytes() for p in [*run_dir.rglob("*"), *ws.rglob("*")] if p.is_file()}
    assert after == before


def test_a_start_snapshot_that_cannot_be_taken_ends_the_agent_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(b"x" * 1000)
    rundir.ensure_dir(run_dir)
    workspace.declare(run_dir, workspace.Settings(root=ws.resolve(), max_file=100))
    with pytest.raises(WorkspaceError) as e:
        Run.open(run_dir)
    assert isinstance(e.value, SystemExit) and e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "big.bin" in err and "--workspace-ignore" in err
    assert not (run_dir / rundir.JOURNAL).exists() or not journal(run_dir)  # no agent code ran, nothing recorded
    (ws / "big.bin").unlink()
    with Run.open(run_dir) as run:  # the lock was let go
        run.step("a", lambda: 1)
    assert [r.for_ for r in index(run_dir)] == ["start"]


def test_a_snapshot_line_whose_record_got_another_seq_is_indexed_again(tmp_path: Path) -> None:
    """A note from another thread between the snapshot and its record moves the record's seq: the SDK indexes
    the same snapshot again at the record's seq, so the checkpoint keeps its files (``recommit``)."""
    from supervisor.sdk import workspace as sdk_ws

    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    with Run.open(run_dir, workspace=ws) as run:
        (ws / "a.txt").write_text("a")
        settings = workspace.settings_of(run_dir)
        assert settings is not None
        ref = sdk_ws.checkpoint(run_dir, settings, 99, "cp")  # foreseen at 99: no record will be there
        run.checkpoint("cp")
        cp = next(r for r in journal(run_dir) if r.get("kind") == "checkpoint")
        sdk_ws.recommit(run_dir, ref, cp["seq"])
    got = workspace.snapshot_at_checkpoint(run_dir, cp["seq"])
    assert got is not None and got.snapshot == ref.snapshot
    assert [r.seq for r in workspace.committed(run_dir) if r.for_ == "checkpoint"] == [cp["seq"], cp["seq"]]
