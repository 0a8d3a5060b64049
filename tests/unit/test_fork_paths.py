"""Where a fork's files go and how its recorded command follows them (supervisor.core.command, fork_workspace)."""

from __future__ import annotations

from pathlib import Path

from supervisor.core.command import moved_command, moved_cwd
from supervisor.core.fork_workspace import default_workspace


def test_moved_command_follows_the_run_dir_then_the_workspace_and_keeps_outside_paths(tmp_path: Path) -> None:
    ws, run, new_ws, fork = tmp_path / "ws", tmp_path / "ws" / "runs" / "r", tmp_path / "f.workspace", tmp_path / "f"
    run.mkdir(parents=True)
    (ws / "agent.py").write_text("")
    (tmp_path / "data.csv").write_text("")
    cmd = ["python", "agent.py", "--run-dir", "runs/r", "--workspace=.", "../data.csv", "--task", "fix src/app.py",
           f"--ws={ws}", "plan"]
    out, changed = moved_command(cmd, [(run, fork), (ws, new_ws)], ws, new_ws)
    # relative paths in the workspace follow the working directory; the rest point where they pointed
    assert out == ["python", "agent.py", "--run-dir", str(fork), "--workspace=.", str(tmp_path / "data.csv"),
                   "--task", "fix src/app.py", f"--ws={new_ws}", "plan"]
    assert [old for old, _ in changed] == ["runs/r", "../data.csv", f"--ws={ws}"]
    # the working directory does not move: a relative path outside the workspace stays as it was, one in it moves
    out, _ = moved_command(["python", "../data.csv", "ws/agent.py"], [(ws, new_ws)], tmp_path)
    assert out == ["python", "../data.csv", str(new_ws / "agent.py")]


def test_moved_cwd(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    assert moved_cwd(ws, ws, tmp_path / "n") == tmp_path / "n"
    assert moved_cwd(ws / "sub", ws, tmp_path / "n") == tmp_path / "n" / "sub"
    assert moved_cwd(tmp_path, ws, tmp_path / "n") is None


def test_the_default_workspace_is_beside_the_fork_never_inside_the_original(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "runs").mkdir(parents=True)
    out = tmp_path / "runs"
    out.mkdir()
    assert default_workspace(out / "r-fork-3", proj) == out / "r-fork-3.workspace"
    # the fork's run directory lies in the original's workspace: its files go beside that workspace
    assert default_workspace(proj / "runs" / "r-fork-3", proj) == tmp_path / "proj-r-fork-3"
    (out / "r-fork-3.workspace").mkdir()
    assert default_workspace(out / "r-fork-3", proj) == out / "r-fork-3.workspace"  # an empty directory is free
    (out / "r-fork-3.workspace" / "x").write_text("")
    assert default_workspace(out / "r-fork-3", proj) == out / "r-fork-3.workspace-2"
