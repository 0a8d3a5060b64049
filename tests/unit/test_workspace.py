"""The workspace's snapshots on real files: round trips byte for byte, content addressing, the racy-clean
rule, caps and unreadable files, what the journal commits, rollbacks' restores, materialise and fork copies."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import workspace as ws
from supervisor.core.events import EventLog
from supervisor.core.history import rollback_record
from supervisor.core.journal_writer import JournalWriter
from supervisor.errors import WorkspaceError

Tree = dict[str, tuple[Any, ...]]


def tree(root: Path) -> Tree:
    """Every path under ``root`` as it is on disk: files (content, exec bits), links (text), directories."""
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d",)
            elif stat.S_ISFIFO(st.st_mode):
                out[rel] = ("p",)
            else:
                out[rel] = ("f", p.read_bytes(), st.st_mode & 0o111)
    return out


def write(root: Path, rel: str, data: bytes | str, mode: int | None = None) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        os.chmod(p, mode)
    return p


def journal(run_dir: Path, *recs: dict[str, Any]) -> list[dict[str, Any]]:
    """Append records to ``run_dir``'s journal with the real writer; returns them with their seqs."""
    with JournalWriter(run_dir) as w:
        return [w.append(dict(r)) for r in recs]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, ws.Settings]:
    root = tmp_path / "work"
    root.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    settings = ws.Settings(root.resolve())
    ws.declare(run_dir, settings)
    return root, run_dir, settings


def populate(root: Path, outside: Path) -> None:
    write(root, "src/app.py", "print('hello')\n")
    write(root, "bin/run", "#!/bin/sh\necho run\n", 0o755)
    write(root, "data/blob.bin", bytes(range(256)) * 40)
    write(root, "deep/a/b/c.txt", "deep\n")
    (root / "empty").mkdir()
    (root / "nested/empty2").mkdir(parents=True)
    os.symlink("src/app.py", root / "latest")
    os.symlink(str(outside / "fifo"), root / "out-link")  # a FIFO: reading it would hang the test
    os.symlink("missing/target", root / "dangling")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    os.mkfifo(d / "fifo")
    (d / "secret.txt").write_text("secret\n")
    return d


def test_settings_json_round_trip_and_malformed_values(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    assert ws.settings_of(run_dir) == settings
    s = ws.Settings(root, ("*.log", "big/"), 10, 20)
    assert ws.Settings.from_json(orjson.loads(orjson.dumps(s.to_json()))) == s
    for bad in ({"root": "rel/path"}, {"root": "/x", "ignore": "*.log"}, {"root": "/x", "max_file": 0}, [1]):
        with pytest.raises(WorkspaceError):
            ws.Settings.from_json(bad)
    assert ws.settings_of(run_dir.parent) is None  # no run.json: no workspace


def test_snapshot_and_restore_round_trip_byte_for_byte(setup: tuple[Path, Path, ws.Settings], outside: Path) -> None:
    root, run_dir, settings = setup
    populate(root, outside)
    before = tree(root)
    outside_before = tree(outside)
    ref = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    m = ws.Store(run_dir).manifest(ref.snapshot)
    assert m.files["out-link"] == ws.Entry("l", target=str(outside / "fifo"))
    assert m.files["empty"].t == "d" and m.files["nested/empty2"].t == "d" and "nested" not in m.files
    assert m.files["bin/run"].mode & 0o111 and not m.files["src/app.py"].mode & 0o111
    assert ref.files == 4 and ref.stored == 4 and ref.bytes == sum(e.size for e in m.files.values())

    # every kind of change: content, exec bit, deletions, creations, a type change each way, a link retargeted
    write(root, "src/app.py", "print('changed')\n")
    os.chmod(root / "bin/run", 0o644)
    os.unlink(root / "data/blob.bin")
    write(root, "new/file.txt", "new\n")
    os.rmdir(root / "empty")
    write(root, "empty", "now a file")
    (root / "latest").unlink()
    os.symlink("bin/run", root / "latest")
    os.unlink(root / "dangling")
    (root / "dangling").mkdir()
    write(root, "dangling/x", "x")
    os.rmdir(root / "nested/empty2")
    changes = ws.restore(run_dir, ref.snapshot, root, settings)
    assert tree(root) == before
    assert tree(outside) == outside_before
    ops = {c.path: c.op for c in changes}
    assert ops["data/blob.bin"] == "created" and ops["new/file.txt"] == "deleted" and ops["bin/run"] == "changed"
    assert ws.restore(run_dir, ref.snapshot, root, settings) == []  # nothing left to do
    shutil.rmtree(root)
    assert len(ws.restore(run_dir, ref.snapshot, root, settings)) == len(ws.Store(run_dir).manifest(ref.snapshot).files)
    assert tree(root) == before


def test_restore_replaces_a_link_instead_of_writing_through_it(setup: tuple[Path, Path, ws.Settings],
                                                              outside: Path) -> None:
    root, run_dir, settings = setup
    write(root, "sub/file.txt", "inside\n")
    ref = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    (root / "sub/file.txt").unlink()
    (root / "sub").rmdir()
    os.symlink(str(outside), root / "sub")  # sub/file.txt would now land outside
    os.symlink(str(outside / "secret.txt"), root / "link-to-secret")
    outside_before = tree(outside)
    ws.restore(run_dir, ref.snapshot, root, settings)
    assert tree(outside) == outside_before
    assert (root / "sub").is_dir() and not (root / "sub").is_symlink()
    assert (root / "sub/file.txt").read_text() == "inside\n"
    assert not (root / "link-to-secret").exists()


def test_restore_refuses_a_path_out_of_the_workspace(setup: tuple[Path, Path, ws.Settings], tmp_path: Path) -> None:
    root, run_dir, settings = setup
    sha = ws.Store(run_dir).put(b"evil")
    for bad in ("../escaped.txt", "/abs.txt", "a/../../x", "a//b"):
        ref = ws.write_manifest(run_dir, ws.Manifest(str(root), 0, {bad: ws.Entry("f", sha, 4, 0o644)}),
                                for_="start", seq=None, name=None, by="cli")
        with pytest.raises(WorkspaceError, match="not a plain relative path"):
            ws.restore(run_dir, ref.snapshot, root, settings)
        with pytest.raises(WorkspaceError, match="not a plain relative path"):
            ws.materialize(run_dir, ws.Store(run_dir).manifest(ref.snapshot), tmp_path / "m")
    assert not (tmp_path / "escaped.txt").exists() and not Path("/abs.txt").exists()
    assert os.listdir(root) == []


def test_unchanged_file_is_stored_once_across_snapshots(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    for i in range(20):
        write(root, f"f{i}.txt", f"file {i}\n" * 100)
    write(root, "dup1.txt", "same")
    write(root, "dup2.txt", "same")
    first = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    assert first.files == 22 and first.stored == 21  # the two equal files are one object
    second = ws.take(run_dir, settings, for_="abandoned", seq=1, by="sdk")
    assert second.stored == 0 and second.snapshot != first.snapshot  # another taken_ns, same files
    write(root, "f3.txt", "changed\n")
    third = ws.take(run_dir, settings, for_="abandoned", seq=2, by="sdk")
    assert third.stored == 1
    objects = [p for p in (run_dir / "workspace/objects").rglob("*") if p.is_file()]
    assert len(objects) == 22
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in objects)
    assert [r.stored for r in ws.Store(run_dir).index()] == [21, 0, 1]


def test_racy_clean_rule_rereads_a_file_changed_in_the_same_tick(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    p = write(root, "racy.txt", "aaaa")
    future = ws.time.time_ns() + 3_600 * 10**9  # not older than any snapshot taken in this test
    os.utime(p, ns=(future, future))
    s1 = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    p.write_text("bbbb")  # same size...
    os.utime(p, ns=(future, future))  # ...same mtime: only the rule makes the snapshot read it again
    s2 = ws.take(run_dir, settings, for_="abandoned", seq=0, by="sdk")
    sha2 = ws.Store(run_dir).manifest(s2.snapshot).files["racy.txt"].sha256
    assert sha2 != ws.Store(run_dir).manifest(s1.snapshot).files["racy.txt"].sha256
    assert ws.Store(run_dir).get(sha2 or "") == b"bbbb" and s2.stored == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_older_unchanged_file_is_not_read_again(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    p = write(root, "old.txt", "old content")
    past = ws.time.time_ns() - 3_600 * 10**9
    os.utime(p, ns=(past, past))
    ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    os.chmod(p, 0)  # a read would fail: the second snapshot must take the hash from the first
    try:
        ref = ws.take(run_dir, settings, for_="abandoned", seq=0, by="sdk")
    finally:
        os.chmod(p, 0o644)
    assert ref.stored == 0 and "old.txt" in ws.Store(run_dir).manifest(ref.snapshot).files


def test_ignore_rules(setup: tuple[Path, Path, ws.Settings], tmp_path: Path) -> None:
    root, _, _ = setup
    for rel in (".git/HEAD", "node_modules/x/index.js", "pkg/__pycache__/m.pyc", ".venv/bin/python",
                "venv/lib/x.py", "myenv/pyvenv.cfg", "myenv/lib/site.py", "app.log", "keep/app.log",
                "keep/important.log", "build/out.o", "src/build/kept.txt", "src/gen/a.tmp", "src/gen/b.txt",
                "cache/big.bin", "docs/readme.md", "docs/draft/x.md", "a/b/tmp/t.txt", "secret.key", "ok.py"):
        write(root, rel, "x")
    write(root, ".gitignore", "*.log\n/build\n**/tmp/\n# a comment\n\n*.key\n")
    write(root, "keep/.gitignore", "!important.log\n")
    write(root, "src/.gitignore", "gen/*.tmp\n")
    write(root, "docs/.gitignore", "/draft/\n")
    run_dir = root / "runs/r1"  # the run directory inside the workspace
    run_dir.mkdir(parents=True)
    settings = ws.Settings(root.resolve(), ("cache/", "ok.py"))
    ws.declare(run_dir, settings)
    ref = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    files = set(ws.Store(run_dir).manifest(ref.snapshot).files)
    assert files == {".gitignore", "keep/.gitignore", "src/.gitignore", "docs/.gitignore", "keep/important.log",
                     "src/build/kept.txt", "src/gen/b.txt", "docs/readme.md"}  # runs/, pkg/: hold only ignored paths
    assert set(ws.scan(settings).files) == files  # the run directory is known by its run.json
    pred = ws.ignored(settings, run_dir)
    assert pred("node_modules/x/index.js", False) and pred("runs/r1/journal.jsonl", False)
    assert pred("myenv", True) and pred("myenv/lib/site.py", False) and pred("a/b/tmp/t.txt", False)
    assert not pred("keep/important.log", False) and pred("keep/app.log", False) and not pred("src/gen/b.txt", False)


def test_caps_and_unreadable_files_fail_without_an_index_line(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    write(root, "small.txt", "x" * 10)
    write(root, "big.bin", b"\0" * 3000)
    with pytest.raises(WorkspaceError, match=r"big\.bin is 2\.9 KB, over the workspace's per-file cap .*"
                                             r"--workspace-max-file .*--workspace-ignore 'big\.bin'"):
        ws.take(run_dir, ws.Settings(root, max_file=2000), for_="start", seq=None, by="sdk")
    with pytest.raises(WorkspaceError, match=r"over the snapshot cap .*--workspace-max-bytes"):
        ws.take(run_dir, ws.Settings(root, max_bytes=3005), for_="start", seq=None, by="sdk")
    assert ws.Store(run_dir).index() == []
    if os.geteuid() != 0:  # root reads any file
        os.chmod(root / "small.txt", 0)
        try:
            with pytest.raises(WorkspaceError, match=r"cannot read .*small\.txt \(permission denied\); make it "
                                                     r"readable or ignore it with --workspace-ignore 'small\.txt'"):
                ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
        finally:
            os.chmod(root / "small.txt", 0o644)
        assert ws.Store(run_dir).index() == []
        assert os.listdir(run_dir / "workspace/tmp") == ["clock"]  # no temporary file left behind
    assert ws.take(run_dir, settings, for_="start", seq=None, by="sdk").files == 2


def test_committed_drops_a_line_whose_record_never_came(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    write(root, "a.txt", "a")
    start = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    step, cp = journal(run_dir, {"kind": "step", "step": "s", "output": 1}, {"kind": "checkpoint", "name": "a"})
    good = ws.take(run_dir, settings, for_="checkpoint", seq=cp["seq"], name="a", by="sdk")
    wrong_name = ws.take(run_dir, settings, for_="checkpoint", seq=cp["seq"], name="b", by="sdk")
    not_a_checkpoint = ws.take(run_dir, settings, for_="checkpoint", seq=step["seq"], name="a", by="sdk")
    never = ws.take(run_dir, settings, for_="checkpoint", seq=cp["seq"] + 1, name="c", by="sdk")  # killed before
    abandoned_never = ws.take(run_dir, settings, for_="abandoned", seq=cp["seq"] + 1, by="sdk")
    with (run_dir / "workspace/snapshots.jsonl").open("ab") as f:
        f.write(b'{"snapshot": "torn')
    assert ws.committed(run_dir) == [start, good]
    assert ws.snapshot_at_checkpoint(run_dir, cp["seq"]) == good
    assert ws.snapshot_at_checkpoint(run_dir, None) == start
    assert ws.snapshot_at_checkpoint(run_dir, cp["seq"] + 1) is None
    assert {never, wrong_name, not_a_checkpoint, abandoned_never} <= set(ws.Store(run_dir).index())
    # the record comes now (the retaken line for a reused seq wins), and the torn line is ended first
    (rb,) = journal(run_dir, rollback_record(cp, "test", by="test"))
    assert rb["seq"] == cp["seq"] + 1
    later = ws.take(run_dir, settings, for_="abandoned", seq=rb["seq"], by="sdk")
    assert ws.committed(run_dir) == [start, good, abandoned_never, later]
    assert ws.Store(run_dir).index()[-1] == later


def _rollback_setup(root: Path, run_dir: Path, settings: ws.Settings) -> tuple[Tree, dict[str, Any], dict[str, Any]]:
    """A checkpoint 'a' with its snapshot, the workspace changed after it, then a prepared rollback to it
    whose restore has not run (as a process killed between the record and the restore leaves it)."""
    write(root, "app.py", "v1\n")
    write(root, "keep.txt", "keep\n")
    ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    write(root, "app.py", "v2\n")
    write(root, "tool", "#!/bin/sh\n", 0o755)
    at_cp = tree(root)
    (seq_cp,) = [journal(run_dir, {"kind": "step", "step": "s", "output": 1})[0]["seq"] + 1]
    ws.take(run_dir, settings, for_="checkpoint", seq=seq_cp, name="a", by="sdk")
    (cp,) = journal(run_dir, {"kind": "checkpoint", "name": "a"})
    write(root, "app.py", "v3 broken\n")
    os.unlink(root / "keep.txt")
    write(root, "junk/x.txt", "junk")
    return at_cp, cp, rollback_record(cp, "failures", by="sdk")


def test_finish_rollback_restores_once_and_keeps_the_abandoned_files(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    at_cp, cp, rb_rec = _rollback_setup(root, run_dir, settings)
    abandoned_tree = tree(root)
    assert ws.finish_rollback(run_dir) is None  # no rollback yet
    assert [(c.path, c.op) for c in ws.pending_restore(run_dir, cp["seq"]) or []] == [
        ("app.py", "changed"), ("junk/x.txt", "deleted"), ("keep.txt", "created")]
    ab = ws.prepare_rollback(run_dir, cp["seq"] + 1, by="sdk")
    (rb,) = journal(run_dir, rb_rec)
    assert ab is not None and ab.seq == rb["seq"]
    msg = ws.finish_rollback(run_dir)
    assert msg == "restored the workspace to checkpoint 'a': 1 file changed, 1 created, 1 deleted"
    assert tree(root) == at_cp
    assert orjson.loads((run_dir / "workspace/restored.json").read_bytes()) == {"seq": rb["seq"]}
    assert ws.finish_rollback(run_dir) is None  # idempotent
    assert tree(root) == at_cp
    assert ws.pending_restore(run_dir, cp["seq"]) == []
    # nothing is lost: the abandoned branch's files are materialised from its snapshot
    (committed_ab,) = [r for r in ws.committed(run_dir) if r.for_ == "abandoned"]
    ws.materialize(run_dir, ws.Store(run_dir).manifest(committed_ab.snapshot), root.parent / "abandoned")
    assert tree(root.parent / "abandoned") == abandoned_tree


def test_finish_rollback_picks_up_an_interrupted_restore(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    at_cp, _, rb_rec = _rollback_setup(root, run_dir, settings)
    abandoned_tree = tree(root)
    (rb,) = journal(run_dir, rb_rec)  # appended without prepare_rollback: no abandoned snapshot yet
    write(root, "app.py", "v1\n")  # half restored when killed
    half = tree(root)
    msg = ws.finish_rollback(run_dir)
    assert msg is not None and msg.startswith("restored the workspace to checkpoint 'a'")
    assert tree(root) == at_cp
    (ab,) = [r for r in ws.committed(run_dir) if r.for_ == "abandoned"]  # taken before restoring
    assert ab.seq == rb["seq"]
    kept = root.parent / "kept"
    ws.materialize(run_dir, ws.Store(run_dir).manifest(ab.snapshot), kept)
    assert tree(kept) == half != abandoned_tree


def test_rollback_to_the_start_and_to_a_checkpoint_without_snapshot(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    write(root, "a.txt", "start\n")
    ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    at_start = tree(root)
    (cp,) = journal(run_dir, {"kind": "checkpoint", "name": "nosnap"})  # before the workspace was declared
    write(root, "a.txt", "later\n")
    write(root, "b.txt", "b\n")
    later = tree(root)
    ws.prepare_rollback(run_dir, cp["seq"] + 1, by="cli")
    journal(run_dir, rollback_record(cp, "r", by="cli"))
    msg = ws.finish_rollback(run_dir)
    assert msg is not None and msg.startswith("warning: checkpoint 'nosnap' has no workspace snapshot")
    assert tree(root) == later and ws.finish_rollback(run_dir) is None
    ws.prepare_rollback(run_dir, cp["seq"] + 2, by="cli")
    journal(run_dir, rollback_record(None, "r", by="cli"))
    assert ws.finish_rollback(run_dir) == "restored the workspace to the start of the run: 1 file changed, 1 deleted"
    assert tree(root) == at_start


def test_no_workspace_declared(tmp_path: Path) -> None:
    journal(tmp_path, {"kind": "checkpoint", "name": "a"}, rollback_record(None, "r", by="cli"))
    assert ws.finish_rollback(tmp_path) is None
    assert ws.prepare_rollback(tmp_path, 5, by="cli") is None
    assert ws.pending_restore(tmp_path, None) is None
    assert ws.committed(tmp_path) == [] and ws.in_effect(tmp_path, 1) is None


def test_materialize_refuses_a_non_empty_directory_and_copies_for_a_fork(setup: tuple[Path, Path, ws.Settings],
                                                                          tmp_path: Path, outside: Path) -> None:
    root, run_dir, settings = setup
    populate(root, outside)
    ref = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    m = ws.Store(run_dir).manifest(ref.snapshot)
    busy = tmp_path / "busy"
    write(busy, "x", "x")
    with pytest.raises(WorkspaceError, match="not an empty directory"):
        ws.materialize(run_dir, m, busy)
    with pytest.raises(WorkspaceError, match="not an empty directory"):
        ws.materialize(run_dir, m, busy / "x")
    assert tree(busy) == {"x": ("f", b"x", 0)}
    (tmp_path / "empty-dir").mkdir()
    ws.materialize(run_dir, m, tmp_path / "empty-dir")
    assert tree(tmp_path / "empty-dir") == tree(root)
    # a fork: objects copied to the new run's store, the manifest committed there as "fork"
    fork_run = tmp_path / "fork-run"
    fork_run.mkdir(mode=0o700)
    with pytest.raises(WorkspaceError, match="lacks"):
        ws.write_manifest(fork_run, m, for_="fork", seq=None, name=None, by="cli")
    ws.copy_objects(run_dir, fork_run, m)
    fref = ws.write_manifest(fork_run, m, for_="fork", seq=None, name=None, by="cli")
    assert ws.committed(fork_run) == [fref] and fref.stored == 0 and fref.files == ref.files
    ws.materialize(fork_run, ws.Store(fork_run).manifest(fref.snapshot), tmp_path / "fork-ws")
    assert tree(tmp_path / "fork-ws") == tree(root)


def test_in_effect_applies_files_events_on_the_effective_path(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    store = ws.Store(run_dir)
    write(root, "a.txt", "a0")
    ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    b1, a1 = store.put(b"a1"), store.put(b"a1")
    s0, s1 = journal(run_dir, {"kind": "begin", "step": "edit"}, {"kind": "step", "step": "edit", "output": 1})
    events = EventLog(run_dir)

    def files(seq: int, *changes: dict[str, Any]) -> None:
        events.emit("files", 1, seq=seq, during="step", step="edit", pos=0, changes=list(changes))

    files(s0["seq"], {"path": "a.txt", "op": "changed", "before": None, "after": a1},
          {"path": "n.txt", "op": "created", "before": None, "after": b1})
    write(root, "a.txt", "a1")
    ws.take(run_dir, settings, for_="checkpoint", seq=s1["seq"] + 1, name="c", by="sdk")
    (cp,) = journal(run_dir, {"kind": "checkpoint", "name": "c"})
    (s2,) = journal(run_dir, {"kind": "begin", "step": "bad"})
    files(s2["seq"], {"path": "a.txt", "op": "deleted", "before": a1, "after": None},
          {"path": "l", "op": "created", "before": None, "after": None, "link": "a.txt"})
    (rb,) = journal(run_dir, rollback_record(cp, "r", by="sdk"))
    (s3,) = journal(run_dir, {"kind": "begin", "step": "good"})
    big = store.put(b"x" * 10)
    files(s3["seq"], {"path": "big", "op": "created", "before": None, "after": big})
    events.close()

    def paths(seq: int) -> dict[str, str | None]:
        m = ws.in_effect(run_dir, seq)
        assert m is not None
        return {p: e.sha256 or e.target for p, e in m.files.items()}

    start_sha = store.manifest(ws.committed(run_dir)[0].snapshot).files["a.txt"].sha256
    assert paths(s0["seq"]) == {"a.txt": a1, "n.txt": b1}
    assert paths(cp["seq"]) == {"a.txt": a1}  # the checkpoint's own snapshot (n.txt was never on disk)
    assert paths(s2["seq"]) == {"l": "a.txt"}  # the abandoned step's changes, as of its seq
    assert paths(rb["seq"]) == {"a.txt": a1}  # the rollback returns to the checkpoint's snapshot
    assert paths(s3["seq"]) == {"a.txt": a1, "big": big}  # the abandoned branch's events are not applied
    assert start_sha != a1


def test_diff_summary_and_text_diff(setup: tuple[Path, Path, ws.Settings]) -> None:
    root, run_dir, settings = setup
    store = ws.Store(run_dir)
    write(root, "t.txt", "one\ntwo\nthree\n")
    write(root, "b.bin", b"\xff\xfe\0")
    write(root, "x.sh", "echo\n")
    os.symlink("t.txt", root / "l")
    a = store.manifest(ws.take(run_dir, settings, for_="start", seq=None, by="sdk").snapshot)
    write(root, "t.txt", "one\nTWO\nthree\n")
    write(root, "b.bin", b"\xff\xfe\1")
    os.chmod(root / "x.sh", 0o755)
    (root / "l").unlink()
    os.symlink("x.sh", root / "l")
    write(root, "new.txt", "new\n")
    b = store.manifest(ws.take(run_dir, settings, for_="start", seq=None, by="sdk").snapshot)
    changes = ws.diff(a, b)
    assert [(c.path, c.op) for c in changes] == [("b.bin", "changed"), ("l", "changed"), ("new.txt", "created"),
                                                 ("t.txt", "changed"), ("x.sh", "changed")]
    assert ws.summary(changes) == "4 files changed, 1 created"
    assert ws.summary([]) == "no file changed"
    assert ws.summary(ws.diff(b, a)) == "4 files changed, 1 deleted"
    by = {c.path: c for c in changes}
    assert ws.text_diff(store, by["t.txt"]) == ["--- a/t.txt", "+++ b/t.txt", "@@ -1,3 +1,3 @@", " one", "-two",
                                                "+TWO", " three"]
    assert ws.text_diff(store, by["b.bin"]) == ["binary file differs"]
    assert ws.text_diff(store, by["l"]) == ["link changed: t.txt -> x.sh"]
    assert ws.text_diff(store, by["x.sh"]) == ["mode changed: 644 -> 755"]
    assert ws.text_diff(store, by["new.txt"])[-1] == "+new"


def test_restore_never_touches_ignored_paths(tmp_path: Path) -> None:
    root = tmp_path / "work"
    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "app.py", "v1\n")
    run_dir = root / ".runs/r"  # inside the workspace
    run_dir.mkdir(parents=True)
    settings = ws.Settings(root.resolve())
    ws.declare(run_dir, settings)
    ref = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    write(root, "app.py", "v2\n")
    write(root, "debug.log", "log\n")
    write(root, "build/out.o", "obj")
    write(root, "node_modules/m/index.js", "js")
    before = {p: v for p, v in tree(root).items() if not p.startswith(".runs")}
    runs_before = tree(root / ".runs")
    changes = ws.restore(run_dir, ref.snapshot, root, settings)
    assert [(c.path, c.op) for c in changes] == [("app.py", "changed")]
    after = tree(root)
    assert after.pop("app.py") == ("f", b"v1\n", 0)
    before.pop("app.py")
    assert {p: v for p, v in after.items() if not p.startswith(".runs")} == before
    assert tree(root / ".runs") == runs_before
