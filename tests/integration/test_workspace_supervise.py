"""``supervise --workspace``: the flags, the start snapshot, the ``files`` events of each step, the snapshot of a
checkpoint the SDK did not take, and the restores of a rollback (offline, live, and one a killed supervisor left).

Real processes: ``agent-supervisor supervise`` running ``workspace_agent.py`` in a real workspace directory.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import rundir, workspace
from supervisor.core.history import rollback_record
from supervisor.core.journal_writer import JournalWriter
from supervisor.core.redact import Redactor
from supervisor.supervise.rollback import fold_journal, resolve_checkpoint

from ..conftest import run_cli, wait_for
from .supervisor_util import Supervised

AGENT = Path(__file__).resolve().parent / "workspace_agent.py"
PY = sys.executable


def agent(mode: str) -> list[str]:
    return [PY, str(AGENT), mode]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def supervise(run_dir: Path, ws: Path, mode: str, *opts: str, timeout: float = 40) -> Supervised:
    """Run ``mode`` under ``supervise --workspace ws`` to its end (exit 0)."""
    with Supervised(run_dir, agent(mode), "--workspace", str(ws), *opts, out_dir=ws.parent) as sup:
        rc = sup.wait(timeout)
    assert rc == 0, sup.stderr()
    return sup


def files_events(sup: Supervised) -> list[dict[str, Any]]:
    return sup.events("files")


def changes_of(events: list[dict[str, Any]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """path -> [(during, change)] over all ``files`` events."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for ev in events:
        for c in ev["changes"]:
            out.setdefault(c["path"], []).append((ev["during"], {**c, "event": ev}))
    return out


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (paths under ``skip`` left out)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.relative_to(root).as_posix().startswith(skip)}


def journal(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (run_dir / rundir.JOURNAL).read_bytes().splitlines()]


def checkpoint_seq(run_dir: Path, name: str) -> int:
    return next(int(r["seq"]) for r in journal(run_dir) if r.get("kind") == "checkpoint" and r.get("name") == name)


# --------------------------------------------------------------------------- the flags


def test_flags_land_in_run_json_and_the_agent_env_and_a_start_snapshot_is_taken(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    (ws / "keep.txt").write_text("there before the run\n")
    sup = supervise(run_dir, ws, "steps", "--workspace-ignore", "*.tmp", "--workspace-max-file", "1MB",
                    "--workspace-max-bytes", "1GB")
    declared = rundir.read_run_json(run_dir)["workspace"]
    assert declared == {"root": str(ws.resolve()), "ignore": ["*.tmp"], "max_file": 1024**2, "max_bytes": 1024**3}
    seen = json.loads((run_dir / "seen-1.json").read_text())
    assert seen["workspace"] == str(ws.resolve())
    starts = [r for r in workspace.Store(run_dir).index() if r.for_ == "start"]
    assert len(starts) == 1 and starts[0].by == "supervisor" and starts[0].seq is None
    start = workspace.Store(run_dir).manifest(starts[0].snapshot)
    assert set(start.files) == {"keep.txt"} and start.files["keep.txt"].sha256 == sha("there before the run\n")
    assert f"workspace {ws.resolve()}" in sup.stderr()

    # a restart without --workspace keeps the declared one (and its rules); with one, replaces it
    with Supervised(run_dir, None, "-q") as again:
        assert again.wait(30) == 0, again.stderr()
    assert rundir.read_run_json(run_dir)["workspace"]["ignore"] == ["*.tmp"]
    assert json.loads((run_dir / "seen-2.json").read_text())["workspace"] == str(ws.resolve())
    other = tmp_path / "other"
    other.mkdir()
    with Supervised(run_dir, None, "-q", "--workspace", str(other)) as third:
        assert third.wait(30) == 0, third.stderr()
    assert rundir.read_run_json(run_dir)["workspace"] == {"root": str(other.resolve()), "ignore": [],
                                                          "max_file": workspace.MAX_FILE,
                                                          "max_bytes": workspace.MAX_BYTES}
    assert json.loads((run_dir / "seen-3.json").read_text())["workspace"] == str(other.resolve())


@pytest.mark.parametrize(("opts", "message"), [
    (["--workspace", "{tmp}/missing"], "does not exist"),
    (["--workspace", "{tmp}/afile"], "is not a directory"),
    (["--workspace", "{tmp}", "--workspace-max-file", "12XB"], "not a size"),
    (["--workspace-ignore", "*.log"], "need --workspace"),
])
def test_a_bad_workspace_is_refused_before_anything_starts(tmp_path: Path, opts: list[str], message: str) -> None:
    (tmp_path / "afile").write_text("x")
    run_dir = tmp_path / "run"
    r = run_cli("supervise", "--run-dir", str(run_dir), *[o.format(tmp=tmp_path) for o in opts], "--",
                *agent("steps"))
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not run_dir.exists()


def test_a_workspace_that_cannot_be_snapshotted_stops_the_run_before_the_agent_starts(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    (ws / "big.bin").write_bytes(b"x" * 2048)
    with Supervised(run_dir, agent("steps"), "--workspace", str(ws), "--workspace-max-file", "1K",
                    out_dir=tmp_path) as sup:
        assert sup.wait(30) == 1
    err = sup.stderr()
    assert "the agent was not started" in err and "big.bin" in err, err
    assert not (run_dir / "seen-1.json").exists() and not sup.events("spawn")
    assert rundir.read_run_json(run_dir)["status"] == "stopped"
    # nothing lost: with the file ignored, the same run starts
    with Supervised(run_dir, None, "--workspace-ignore", "*.bin", out_dir=tmp_path) as again:
        assert again.wait(30) == 0, again.stderr()
    assert json.loads((run_dir / "seen-1.json").read_text())["workspace"] == str(ws.resolve())


# --------------------------------------------------------------------------- what each step changed


def test_files_events_name_the_step_that_changed_each_file(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    sup = supervise(run_dir, ws, "steps", "--workspace-ignore", "*.tmp")
    events = files_events(sup)
    by_path = changes_of(events)
    assert "scratch.tmp" not in by_path and not any(p.startswith("node_modules/") for p in by_path), by_path
    recs = journal(run_dir)
    begin = {r["step"]: r for r in recs if r.get("kind") == "begin"}

    [(during, a_new)] = [x for x in by_path["a.txt"] if x[1]["op"] == "created"]
    ev = a_new["event"]
    assert during == "step" and ev["step"] == "write:a" and ev["seq"] == begin["write:a"]["seq"]
    assert ev["pos"] == begin["write:a"]["pos"]
    assert a_new["before"] is None and a_new["after"] == sha("alpha\n")

    [(during, a_gone)] = [x for x in by_path["a.txt"] if x[1]["op"] == "deleted"]
    assert during == "step" and a_gone["event"]["step"] == "delete:a"
    assert a_gone["before"] == sha("alpha\n") and a_gone["after"] is None

    [(during, b_new)] = by_path["b.txt"]
    assert during == "step" and b_new["event"]["step"] == "write:b" and b_new["op"] == "created"

    [(during, between)] = by_path["between.txt"]
    cp = checkpoint_seq(run_dir, "cp1")
    assert during == "between" and between["event"]["seq"] == cp  # the last record before it: the checkpoint
    # the contents as seen are in the store
    store = workspace.Store(run_dir)
    assert store.get(a_new["after"]) == b"alpha\n" and store.get(between["after"]) == b"between steps\n"
    assert store.get(b_new["after"]) == b"bravo\n"
    assert all(ev["attempt"] == 1 for ev in events)


def test_changes_of_two_steps_in_flight_together_are_marked_concurrent(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    sup = supervise(run_dir, ws, "concurrent")
    by_path = changes_of(files_events(sup))
    assert set(by_path) == {"left.txt", "right.txt"}
    begins = sorted((r["seq"], r["step"], r["pos"]) for r in journal(run_dir) if r.get("kind") == "begin")
    for path in ("left.txt", "right.txt"):
        [(during, change)] = by_path[path]
        ev = change["event"]
        assert during == "concurrent", ev
        assert ev["steps"] == [{"step": s, "pos": p} for _, s, p in begins] and ev["seq"] == begins[0][0]
        assert "step" not in ev


def test_the_run_directory_inside_the_workspace_is_not_watched(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sup = supervise(ws / "run", ws, "steps")
    paths = set(changes_of(files_events(sup)))
    assert paths == {"a.txt", "between.txt", "b.txt", "scratch.tmp"}, paths


def test_a_checkpoint_the_agent_wrote_by_hand_gets_the_supervisors_snapshot(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    sup = supervise(run_dir, ws, "plain")
    [ref] = [r for r in workspace.committed(run_dir) if r.for_ == "checkpoint"]
    assert (ref.seq, ref.name, ref.by) == (1, "cp", "supervisor")
    m = workspace.Store(run_dir).manifest(ref.snapshot)
    assert m.files["p.txt"].sha256 == sha("plain one\n")  # as at the checkpoint, not as changed after it
    by_path = changes_of(files_events(sup))
    assert [c["op"] for _, c in by_path["p.txt"]] == ["created", "changed"]
    assert [d for d, _ in by_path["p.txt"]] == ["between", "between"]  # no begin records: no step in flight


# --------------------------------------------------------------------------- rollbacks restore the workspace


def _manifest_equals_tree(run_dir: Path, ref: workspace.SnapshotRef, root: Path) -> None:
    """The workspace holds exactly the snapshot's files, byte for byte (ignored paths aside)."""
    m = workspace.Store(run_dir).manifest(ref.snapshot)
    files = {p: e for p, e in m.files.items() if e.t == "f"}
    now = tree(root, skip=("node_modules/", "run/"))
    now = {p: b for p, b in now.items() if not p.endswith(".tmp")}
    assert set(now) == set(files)
    for p, e in files.items():
        assert hashlib.sha256(now[p]).hexdigest() == e.sha256, p


def test_offline_rollback_restores_the_workspace_and_keeps_the_abandoned_files(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    supervise(run_dir, ws, "steps", "--workspace-ignore", "*.tmp")
    assert {"b.txt", "between.txt"} <= set(tree(ws)) and "a.txt" not in tree(ws)
    r = run_cli("rollback", str(run_dir), "--to", "cp1")
    assert r.returncode == 0, r.stderr
    assert "restored the workspace" in r.stdout, r.stdout
    cp = checkpoint_seq(run_dir, "cp1")
    target = workspace.snapshot_at_checkpoint(run_dir, cp)
    assert target is not None
    _manifest_equals_tree(run_dir, target, ws)
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "b.txt").exists()
    assert (ws / "node_modules/x/index.js").exists() and (ws / "scratch.tmp").exists()  # ignored: untouched
    rb = [x for x in journal(run_dir) if x.get("kind") == "rollback"][-1]
    [abandoned] = [x for x in workspace.committed(run_dir) if x.for_ == "abandoned"]
    assert abandoned.seq == rb["seq"] and abandoned.by == "cli"
    gone = workspace.Store(run_dir).manifest(abandoned.snapshot).files
    assert set(gone) >= {"b.txt", "between.txt"} and "a.txt" not in gone
    assert workspace.Store(run_dir).get(gone["b.txt"].sha256 or "") == b"bravo\n"
    assert orjson.loads((run_dir / "workspace" / "restored.json").read_bytes())["seq"] == rb["seq"]


@pytest.mark.timeout(60)
def test_a_live_rollback_restores_the_workspace_before_the_agent_restarts(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    with Supervised(run_dir, agent("wait"), "--workspace", str(ws), "--stop-grace", "3") as sup:
        wait_for(lambda: (run_dir / "ready.txt").exists(), timeout=30, what="the agent's ready.txt")
        assert (ws / "a.txt").read_text() == "alpha, edited after cp1\n"
        res = sup.request({"cmd": "rollback", "checkpoint": "cp1", "reason": "try again"})
        assert res["ok"], res
        assert sup.wait(30) == 0, sup.stderr()
    seen2 = json.loads((run_dir / "seen-2.json").read_text())
    assert seen2["files"] == {"a.txt": "alpha\n"}  # before any code of attempt 2 ran
    assert "restored the workspace" in sup.stderr()
    [abandoned] = [x for x in workspace.committed(run_dir) if x.for_ == "abandoned"]
    assert abandoned.seq == res["seq"] and abandoned.by == "supervisor"
    gone = workspace.Store(run_dir).manifest(abandoned.snapshot).files
    assert workspace.Store(run_dir).get(gone["a.txt"].sha256 or "") == b"alpha, edited after cp1\n"


def test_a_restore_a_killed_supervisor_left_is_finished_before_the_agent_runs(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    supervise(run_dir, ws, "steps", "--workspace-ignore", "*.tmp")
    # what a supervisor killed with -9 between the rollback record and the restore leaves: the abandoned
    # snapshot and the record, no restore
    writer = JournalWriter(run_dir, redact=Redactor())
    try:
        target = resolve_checkpoint(fold_journal(run_dir), "cp1")
        workspace.prepare_rollback(run_dir, writer.next_seq, by="supervisor")
        rec = writer.append(rollback_record(target, "killed before the restore", by="user"))
    finally:
        writer.close()
    assert (ws / "b.txt").exists()
    with Supervised(run_dir, None) as again:
        assert again.wait(30) == 0, again.stderr()
    seen = json.loads((run_dir / "seen-2.json").read_text())
    assert seen["files"].get("a.txt") == "alpha\n" and "b.txt" not in seen["files"], seen
    assert "restored the workspace" in again.stderr()
    assert orjson.loads((run_dir / "workspace" / "restored.json").read_bytes())["seq"] == rec["seq"]


@pytest.mark.timeout(90)
def test_kill_9_of_the_supervisor_in_its_start_snapshot_commits_nothing_and_the_next_one_takes_it(tmp_path: Path) -> None:
    """The supervisor killed with -9 while it stores the start snapshot (objects written, no index line yet):
    nothing is committed, no agent ran, and ``supervise`` again takes the snapshot whole and runs the agent."""
    import os
    import signal

    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    for d in range(40):
        (ws / f"d{d}").mkdir(parents=True)
        for f in range(100):
            (ws / f"d{d}" / f"f{f}.bin").write_bytes(os.urandom(16 * 1024))  # 4,000 files, 64 MB
    objects = run_dir / "workspace" / "objects"
    sup = Supervised(run_dir, agent("steps"), "--workspace", str(ws), out_dir=tmp_path)
    try:
        wait_for(lambda: objects.is_dir() and any(objects.iterdir()), timeout=30, what="the snapshot under way")
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait(10)
    finally:
        if sup.proc.poll() is None:
            sup.proc.kill()
    index = run_dir / "workspace" / "snapshots.jsonl"
    assert not index.exists() or b'"start"' not in index.read_bytes(), "a snapshot was committed by a killed take"
    assert not (run_dir / "seen-1.json").exists(), "the agent ran before the start snapshot"
    with Supervised(run_dir, agent("steps"), "--workspace", str(ws), out_dir=tmp_path) as again:
        assert again.wait(60) == 0, again.stderr()
    refs = workspace.Store(run_dir).index()
    start = [r for r in refs if r.for_ == "start"]
    assert len(start) == 1 and start[0].files == 4000
    man = workspace.Store(run_dir).manifest(start[0].snapshot)
    assert all(workspace.Store(run_dir).has(e.sha256) for e in man.files.values() if e.sha256)
