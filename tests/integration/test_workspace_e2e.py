"""Files as part of the state, end to end with real processes (docs/workspace.md): a coding-style agent
(``coding_agent.py``) under ``supervise --workspace`` writes, edits, deletes, links and runs files across 6
checkpoints, fails repeatedly, is rolled back by the SDK and ends as a clean run does; a fork runs in a
workspace of its own; ``kill -9`` of the agent in a snapshot and of the supervisor in a run lose nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import rundir

from ..conftest import ROOT, clean_env, run_cli, wait_for
from .coding_agent import tree
from .supervisor_util import Supervised, alive

AGENT = Path(__file__).resolve().parent / "coding_agent.py"
PY = sys.executable
CHECKPOINTS = ["planned", "scaffolded", "edit-1", "edit-2", "tested", "done"]
SUPERVISE = ("-q", "--backoff-initial", "0.01", "--backoff-max", "0.05", "--rollback-after", "0", "--give-up-after", "20")
BULK = 1000
"""Files of the kill tests' workspace: enough that a snapshot takes a while (each new object is synced)."""


def agent_cmd(ws: Path, probe: Path, *more: str) -> list[str]:
    return [PY, str(AGENT), "--workspace", str(ws), "--probe", str(probe), *more]


def journal(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (run_dir / rundir.JOURNAL).read_bytes().splitlines()]


def read(p: Path) -> Any:
    return json.loads(p.read_text())


def manifest_tree(run_dir: Path, snapshot: str) -> dict[str, str]:
    """A stored snapshot in :func:`coding_agent.tree`'s terms."""
    from supervisor.core import workspace

    out: dict[str, str] = {}
    for path, e in workspace.Store(run_dir).manifest(snapshot).files.items():
        if e.t == "f":
            out[path] = f"f:{'x' if e.mode & 0o100 else '-'}:{e.sha256}"
        elif e.t == "l":
            out[path] = f"l:{e.target}"
        else:
            out[path] = "d"
    return dict(sorted(out.items()))


def stat_tree(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every path's content (as :func:`tree` says it), modification time and mode: what 'unchanged' means."""
    t = tree(root)
    return {p: (v, (root / p).lstat().st_mtime_ns, (root / p).lstat().st_mode) for p, v in t.items()}


def checkpoint_snapshots(run_dir: Path) -> dict[str, str]:
    """Each checkpoint name of the effective history -> the snapshot committed with it."""
    from supervisor.core import history, workspace

    out = {}
    for rec in history.load(run_dir).effective:
        if rec.get("kind") == "checkpoint":
            ref = workspace.snapshot_at_checkpoint(run_dir, rec["seq"])
            assert ref is not None, f"checkpoint {rec['name']} at #{rec['seq']} has no snapshot"
            out[rec["name"]] = ref.snapshot
    return out


@dataclass
class Coded:
    """A run of the coding agent, and what its probes said (read before any later test could write them)."""

    run_dir: Path
    ws: Path
    probe: Path
    starts: dict[int, dict[str, Any]]
    cps: dict[str, dict[str, str]]
    fails: dict[int, dict[str, str]]
    result: dict[str, Any]
    final: dict[str, str]


def coded(tmp: Path, name: str, *more: str, supervised: bool = True) -> Coded:
    run_dir, ws, probe = tmp / name, tmp / f"{name}-ws", tmp / f"{name}-probe"
    ws.mkdir()
    if supervised:
        with Supervised(run_dir, agent_cmd(ws, probe, *more), *SUPERVISE, "--workspace", str(ws)) as sup:
            assert sup.wait(60) == 0, sup.stderr()[-3000:]
    else:
        for _ in range(8):  # an unsupervised agent is restarted by hand, as a user would
            r = subprocess.run([*agent_cmd(ws, probe, *more), "--run-dir", str(run_dir)], capture_output=True,
                               text=True, timeout=60, env=clean_env(), cwd=ROOT)
            if r.returncode == 0:
                break
            assert r.returncode in (1, rundir.EXIT_ROLLBACK), r.stderr[-3000:]
        assert r.returncode == 0, r.stderr[-3000:]
    return Coded(
        run_dir, ws, probe,
        starts={int(p.stem.split("-")[1]): read(p) for p in probe.glob("start-*.json")},
        cps={p.stem[3:]: read(p) for p in probe.glob("cp-*.json")},
        fails={int(p.stem.split("-")[1]): read(p) for p in probe.glob("fail-*.json")},
        result=read(probe / "result.json"),
        final=tree(ws),
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Coded, Coded]:
    """A clean run, and one whose test step fails 3 times: the SDK rolls it back to ``edit-2``."""
    tmp = tmp_path_factory.mktemp("coding")
    return coded(tmp, "clean"), coded(tmp, "rolled", "--fail-test", "3")


@pytest.mark.timeout(120)
def test_a_rollback_restores_the_checkpoint_files_and_the_run_ends_as_a_clean_one(runs: tuple[Coded, Coded]) -> None:
    clean, rolled = runs
    recs = journal(rolled.run_dir)
    rollbacks = [r for r in recs if r.get("kind") == "rollback"]
    assert [(r["checkpoint"], r["by"]) for r in rollbacks] == [("edit-2", "sdk")]
    assert sorted(rolled.fails) == [1, 2, 3]

    # right after the restore (the agent's first look, before any step ran): the checkpoint's files exactly
    after = min(a for a, s in rolled.starts.items() if s["rollbacks"] == 1)
    restored = rolled.starts[after]["tree"]
    assert restored == rolled.cps["edit-2"]
    assert restored == manifest_tree(rolled.run_dir, checkpoint_snapshots(rolled.run_dir)["edit-2"])
    assert "broken.txt" in rolled.fails[3] and "broken.txt" not in restored  # the failed attempts' mess is gone
    assert rolled.starts[after - 1]["tree"] == rolled.fails[2]  # before the rollback, nothing was restored
    assert restored["bin/run.sh"].startswith("f:x:") and restored["latest"] == "l:src/app.py"
    assert "tmp/scratch.txt" not in restored and "tmp/scratch.txt" in rolled.cps["scaffolded"]

    # every checkpoint has its snapshot, equal to what the agent saw when it took it
    snaps = checkpoint_snapshots(rolled.run_dir)
    assert list(snaps) == CHECKPOINTS
    for name, snap in snaps.items():
        assert manifest_tree(rolled.run_dir, snap) == rolled.cps[name], name

    # the resumed run ends as a run that never failed: the same files, the same result
    assert rolled.final == clean.final
    assert rolled.result == clean.result
    assert clean.final["ledger.txt"] == rolled.final["ledger.txt"]
    assert (rolled.ws / "ledger.txt").read_text() == "edit 1\nedit 2\ntested\n"


@pytest.mark.timeout(120)
def test_the_abandoned_branch_stays_restorable(runs: tuple[Coded, Coded], tmp_path: Path) -> None:
    from supervisor.core import workspace

    _, rolled = runs
    rb = next(r for r in journal(rolled.run_dir) if r.get("kind") == "rollback")
    refs = [r for r in workspace.committed(rolled.run_dir) if r.for_ == "abandoned"]
    assert [r.seq for r in refs] == [rb["seq"]]
    assert manifest_tree(rolled.run_dir, refs[0].snapshot) == rolled.fails[3]  # what the last failed attempt left
    r = run_cli("files", str(rolled.run_dir), "--restore", str(rb["seq"]), "--to", str(tmp_path / "abandoned"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(tmp_path / "abandoned") == rolled.fails[3]
    assert (tmp_path / "abandoned" / "broken.txt").read_text() == "half-made change 3\n"
    assert tree(rolled.ws) == rolled.final  # restoring elsewhere never touches the workspace


@pytest.mark.timeout(120)
def test_a_fork_runs_in_its_own_workspace_and_the_original_is_untouched(runs: tuple[Coded, Coded], tmp_path: Path) -> None:
    clean, rolled = runs
    before = stat_tree(rolled.ws)
    index_before = (rolled.run_dir / rundir.WORKSPACE / "snapshots.jsonl").read_bytes()
    fork = tmp_path / "fork"
    r = run_cli("fork", str(rolled.run_dir), "--at", "edit-1", "--to", str(fork))
    assert r.returncode == 0, r.stderr
    fws = tmp_path / "fork.workspace"
    assert f"its workspace: {fws}" in r.stdout, r.stdout
    assert tree(fws) == rolled.cps["edit-1"]  # the files as of the checkpoint
    meta = rundir.read_run_json(fork)
    assert meta["workspace"]["root"] == str(fws)
    assert str(rolled.ws) not in " ".join(meta["command"]) and str(fws) in meta["command"]

    with Supervised(fork, None, *SUPERVISE) as sup:  # the recorded command, in the fork's workspace
        assert sup.wait(60) == 0, sup.stderr()[-3000:]
    assert tree(fws) == clean.final  # continued from edit-1 to the end, as the clean run did
    assert stat_tree(rolled.ws) == before  # the original's files: byte for byte, not even touched
    assert (rolled.run_dir / rundir.WORKSPACE / "snapshots.jsonl").read_bytes() == index_before
    snaps = checkpoint_snapshots(fork)
    assert list(snaps) == ["planned", "scaffolded", "edit-1", "fork", "edit-2", "tested", "done"]
    assert manifest_tree(fork, snaps["edit-1"]) == rolled.cps["edit-1"]


def test_fork_refuses_a_workspace_that_is_not_empty_or_inside_the_original(runs: tuple[Coded, Coded], tmp_path: Path) -> None:
    _, rolled = runs
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("mine")
    cases = [
        (busy, "not empty"),
        (rolled.ws / "sub", "inside the original's workspace"),
        (rolled.ws, "inside the original's workspace"),
    ]
    for where, message in cases:
        r = run_cli("fork", str(rolled.run_dir), "--at", "edit-1", "--to", str(tmp_path / "f"), "--workspace", str(where))
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]  # no fork, no temporary directory
    assert os.listdir(busy) == ["mine.txt"] and not (rolled.ws / "sub").exists()

    r = run_cli("fork", str(rolled.run_dir), "--at", "planned", "--to", str(tmp_path / "f"),
                "--workspace", str(tmp_path / "mine"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["workspace"] == str(tmp_path / "mine") and out["files"] == len(tree(tmp_path / "mine")) == 1
    assert tree(tmp_path / "mine") == {"PLAN.md": rolled.cps["planned"]["PLAN.md"]}


# ---------------------------------------------------------------------------------------------- kill -9
@pytest.fixture(scope="module")
def clean_bulk(tmp_path_factory: pytest.TempPathFactory) -> Coded:
    """A clean run with the bulk files, run by hand: what the killed runs must end as."""
    return coded(tmp_path_factory.mktemp("bulk"), "clean", "--bulk", str(BULK), supervised=False)


def _objects(run_dir: Path) -> int:
    n = 0
    for _, _, files in os.walk(run_dir / rundir.WORKSPACE):
        n += len(files)
    return n


def _kill_in_the_bulk_snapshot(run_dir: Path, probe: Path, pid_of: Any) -> None:
    """Once the agent is about to take the ``bulk`` checkpoint, wait until its snapshot writes objects, then
    SIGKILL the process ``pid_of()`` names."""
    wait_for(lambda: (probe / "bulk-marker-1").exists(), timeout=30, what="the bulk checkpoint")
    n0 = _objects(run_dir)
    wait_for(lambda: _objects(run_dir) > n0 + 10, timeout=30, interval=0.001, what="the snapshot's objects")
    os.kill(pid_of(), signal.SIGKILL)


@pytest.mark.timeout(120)
def test_kill_9_of_the_agent_in_a_snapshot_uses_no_torn_snapshot(clean_bulk: Coded, tmp_path: Path) -> None:
    from supervisor.core import workspace

    run_dir, ws, probe = tmp_path / "run", tmp_path / "ws", tmp_path / "probe"
    ws.mkdir()
    cmd = [*agent_cmd(ws, probe, "--bulk", str(BULK), "--fail-test", "3"), "--run-dir", str(run_dir)]
    with open(tmp_path / "agent.err", "wb") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=clean_env(), cwd=ROOT)
    try:
        _kill_in_the_bulk_snapshot(run_dir, probe, lambda: p.pid)
    finally:
        p.kill()
        p.wait(10)
    assert p.returncode == -signal.SIGKILL
    assert not [r for r in journal(run_dir) if r.get("kind") == "checkpoint" and r["name"] == "bulk"], (
        "the kill came after the checkpoint's record: the snapshot was not interrupted"
    )
    assert not any(r.for_ == "checkpoint" and r.name == "bulk" for r in workspace.committed(run_dir))

    # run by hand again until it ends: the checkpoint is taken anew, the test step fails 3 times, the SDK rolls
    # back to the bulk checkpoint and the next start restores its files
    codes = [subprocess.run(cmd, capture_output=True, timeout=60, env=clean_env(), cwd=ROOT).returncode for _ in range(4)]
    assert codes == [1, 1, rundir.EXIT_ROLLBACK, 0], codes
    bulk_cp = next(r for r in journal(run_dir) if r.get("kind") == "checkpoint" and r["name"] == "bulk")
    refs = [r for r in workspace.committed(run_dir) if r.for_ == "checkpoint" and r.name == "bulk"]
    assert [r.seq for r in refs] == [bulk_cp["seq"]]
    cp_tree = read(probe / "cp-bulk.json")
    assert manifest_tree(run_dir, refs[0].snapshot) == cp_tree
    assert sum(1 for k in cp_tree if k.startswith("bulk/")) == BULK
    after = min(a for a, s in ((int(q.stem.split("-")[1]), read(q)) for q in probe.glob("start-*.json")) if s["rollbacks"])
    assert read(probe / f"start-{after}.json")["tree"] == cp_tree  # restored by Run.open, without a supervisor
    assert tree(ws) == clean_bulk.final
    assert read(probe / "result.json") == clean_bulk.result


@pytest.mark.timeout(120)
def test_kill_9_of_the_supervisor_in_a_run_then_supervise_again_loses_nothing(clean_bulk: Coded, tmp_path: Path) -> None:
    run_dir, ws, probe = tmp_path / "run", tmp_path / "ws", tmp_path / "probe"
    ws.mkdir()
    sup = Supervised(run_dir, agent_cmd(ws, probe, "--bulk", str(BULK)), *SUPERVISE, "--workspace", str(ws))
    with sup:
        _kill_in_the_bulk_snapshot(run_dir, probe, lambda: sup.pid)
        sup.wait(10)
    agent = int((probe / "pid-1").read_text())
    wait_for(lambda: not alive(agent), timeout=20, what="the agent to end with its supervisor")
    with Supervised(run_dir, None, *SUPERVISE) as again:  # resumes with the recorded command
        assert again.wait(60) == 0, again.stderr()[-3000:]
    assert tree(ws) == clean_bulk.final
    assert read(probe / "result.json") == clean_bulk.result
    ran = (probe / "executions.log").read_text().split()
    # what was committed before the kill never ran again, and nothing was lost (a step in flight at the kill may
    # run twice: steps are at-least-once)
    assert ran[:5] == ["plan", "scaffold", "edit:1", "edit:2", "bulk"] and set(ran[5:]) == {"test", "finish"}
    assert list(checkpoint_snapshots(run_dir)) == ["planned", "scaffolded", "edit-1", "edit-2", "bulk", "tested", "done"]
