"""``fork`` of a run with a workspace: its own directory, its store, its ``run.json``; nothing half-made."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from supervisor import EXIT_ROLLBACK, Run
from supervisor.core import rundir, workspace
from supervisor.core.fork import fork
from supervisor.errors import WorkspaceError

from .coding_agent import tree


@pytest.fixture(autouse=True)
def _no_outer_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("AGENT_SUPERVISOR_"):
            monkeypatch.delenv(k)


def _agent(run_dir: Path, ws: Path, fail: bool = False) -> None:
    with Run.open(run_dir, workspace=ws, max_failures=1) as run:
        run.step("one", lambda: (ws / "a.txt").write_text("one"))
        run.checkpoint("one")
        run.step("two", lambda: (ws / "b.txt").write_text("two"))
        run.checkpoint("two")

        def three() -> None:
            (ws / "a.txt").write_text("three")
            if fail and not run.rollbacks:
                raise RuntimeError("no")

        run.step("three", three)


def _seq(run_dir: Path, kind: str, name: str) -> int:
    from supervisor.core import history

    return next(r["seq"] for r in history.load(run_dir).effective if r.get("kind") == kind and name in (r.get("name"), r.get("step")))


@pytest.fixture
def rolled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run in its workspace (its working directory) that was rolled back to ``two`` once and then finished."""
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    run_dir = tmp_path / "runs" / "r"
    with pytest.raises(SystemExit) as e:
        _agent(run_dir, ws, fail=True)
    assert e.value.code == EXIT_ROLLBACK
    _agent(run_dir, ws, fail=True)
    rundir.update_run_json(run_dir, command=["python", "agent.py", "--workspace", str(ws), "--out", "out/x"])
    return run_dir


def test_a_fork_past_a_rollback_is_not_restored_again_and_rolls_back_with_files(rolled: Path, tmp_path: Path,
                                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    new = fork(rolled, _seq(rolled, "step", "three"), tmp_path / "f")
    fws = tmp_path / "f.workspace"
    # the files in effect at that step: checkpoint 'two' (no supervisor watched: no change recorded after it)
    assert sorted(tree(fws)) == ["a.txt", "b.txt"]
    assert (fws / "a.txt").read_text() == "one" and (fws / "b.txt").read_text() == "two"
    meta = rundir.read_run_json(new)
    assert meta["cwd"] == str(fws)  # the origin ran in its workspace: the fork runs in its own
    assert meta["command"] == ["python", "agent.py", "--workspace", str(fws), "--out", "out/x"]
    assert workspace.settings_of(new) == workspace.Settings(root=fws)
    # the copied rollback was restored in the origin: the fork's first start restores nothing
    capsys.readouterr()
    with Run.open(new, workspace=ws) as run:
        assert run.workspace == fws
    assert "restored" not in capsys.readouterr().err
    assert (fws / "a.txt").read_text() == "one" and (fws / "b.txt").exists()
    # the fork's checkpoints carry their files: a rollback to 'one' in the fork restores them there
    one = workspace.snapshot_at_checkpoint(new, _seq(new, "checkpoint", "one"))
    assert one is not None
    assert workspace.restore(new, one.snapshot, fws, workspace.Settings(root=fws))
    assert sorted(tree(fws)) == ["a.txt"] and (fws / "a.txt").read_text() == "one"
    assert (ws / "a.txt").read_text() == "three" and (ws / "b.txt").exists()  # the original: untouched


def test_a_failed_fork_leaves_no_workspace_and_gives_an_empty_one_back(rolled: Path, tmp_path: Path) -> None:
    workspace.Store(rolled).object_path(hashlib.sha256(b"two").hexdigest()).unlink()  # b.txt's: the fork needs it
    empty = tmp_path / "empty"
    empty.mkdir()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(WorkspaceError, match="missing"):
        fork(rolled, _seq(rolled, "step", "three"), tmp_path / "f", workspace=empty)
    assert sorted(os.listdir(tmp_path)) == before  # no fork, no temporary directory
    assert empty.is_dir() and not os.listdir(empty)
    with pytest.raises(WorkspaceError):
        fork(rolled, _seq(rolled, "step", "three"), tmp_path / "g")
    assert sorted(os.listdir(tmp_path)) == before
