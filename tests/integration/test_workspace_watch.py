"""The supervisor's live watch of a workspace (``WorkspaceWatch``) on real files and the real Rust watcher."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.core import workspace
from supervisor.supervise.workspace_watch import Seen, WorkspaceWatch

from ..conftest import wait_for


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "keep.txt").write_text("kept\n")
    (root / "sub" / "one.txt").write_text("one\n")
    (root / "sub" / "deep" / "two.txt").write_text("two\n")
    return root


@pytest.fixture
def watch(tmp_path: Path, ws: Path) -> Iterator[WorkspaceWatch]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    w = WorkspaceWatch(run_dir, workspace.Settings(root=ws.resolve(), ignore=("*.log",), max_file=64))
    w.baseline(None)
    w.start()
    try:
        yield w
    finally:
        w.close()


def collect(w: WorkspaceWatch, want: set[tuple[str, str]], timeout: float = 10.0) -> dict[tuple[str, str], Seen]:
    """Take changes until every ``(path, op)`` of ``want`` came; all taken, by ``(path, op)``."""
    got: dict[tuple[str, str], Seen] = {}

    def done() -> bool:
        for s in w.take():
            got[(s.path, s.op)] = s
        return want <= set(got)

    wait_for(done, timeout=timeout, what=f"changes {sorted(want - set(got))}")
    return got


def test_creations_changes_and_deletions_are_seen_with_their_content_stored(watch: WorkspaceWatch, ws: Path) -> None:
    (ws / "new.txt").write_bytes(b"new\n")
    (ws / "keep.txt").write_bytes(b"kept, changed\n")
    got = collect(watch, {("new.txt", "created"), ("keep.txt", "changed")})
    new, kept = got[("new.txt", "created")], got[("keep.txt", "changed")]
    assert new.before is None and new.after is not None and new.after.sha256 == sha(b"new\n")
    assert kept.before is not None and kept.before.sha256 == sha(b"kept\n")
    assert kept.after is not None and kept.after.sha256 == sha(b"kept, changed\n")
    assert workspace.Store(watch.run_dir).get(sha(b"kept, changed\n")) == b"kept, changed\n"
    m = (ws / "new.txt").stat().st_mtime_ns
    assert new.lo_ns == m and new.hi_ns >= m  # its time: the file's mtime
    assert new.to_json() == {"path": "new.txt", "op": "created", "before": None, "after": sha(b"new\n")}

    (ws / "new.txt").unlink()
    shutil.rmtree(ws / "sub")  # a directory and all it holds
    got = collect(watch, {("new.txt", "deleted"), ("sub/one.txt", "deleted"), ("sub/deep/two.txt", "deleted")})
    gone = got[("new.txt", "deleted")]
    assert gone.after is None and gone.lo_ns >= m and gone.to_json()["after"] is None


def test_a_rewrite_with_the_same_bytes_is_no_change_and_ignored_paths_are_not_seen(
        watch: WorkspaceWatch, ws: Path) -> None:
    (ws / "keep.txt").write_text("kept\n")
    (ws / "debug.log").write_text("ignored by a --workspace-ignore glob\n")
    (ws / "node_modules" / "x").mkdir(parents=True)
    (ws / "node_modules" / "x" / "i.js").write_text("ignored by default\n")
    (ws / "marker.txt").write_text("after the others\n")
    got = collect(watch, {("marker.txt", "created")})
    watch.reconcile()
    for s in watch.take():
        got[(s.path, s.op)] = s
    assert set(got) == {("marker.txt", "created")}


def test_links_are_kept_as_links_and_a_file_over_the_cap_is_marked(watch: WorkspaceWatch, ws: Path,
                                                                  tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("never read\n")
    os.symlink(tmp_path / "outside.txt", ws / "out-link")
    (ws / "big.bin").write_bytes(b"x" * 65)
    got = collect(watch, {("out-link", "created"), ("big.bin", "created")})
    link = got[("out-link", "created")].to_json()
    assert link == {"path": "out-link", "op": "created", "before": None, "after": None,
                    "link": str(tmp_path / "outside.txt")}
    big = got[("big.bin", "created")].to_json()
    assert big["after"] is None and big["too_large"] is True


def test_quiet_drops_a_restores_writes_and_reconcile_finds_what_was_not_handed_over(
        watch: WorkspaceWatch, ws: Path) -> None:
    with watch.quiet():
        (ws / "restored.txt").write_text("written by a restore\n")
        (ws / "keep.txt").unlink()
    (ws / "after.txt").write_text("after the restore\n")
    got = collect(watch, {("after.txt", "created")})
    assert set(got) == {("after.txt", "created")}
    watch.close()  # nothing more is handed over: only the walk can find the next change
    (ws / "unseen.txt").write_text("made while the watch was stopped\n")
    watch.reconcile()
    assert [(s.path, s.op) for s in watch.take()] == [("unseen.txt", "created")]
