"""Journal faults with real files and real processes: a failed write, symlinked and foreign run files.

- a write that fails or stops short (``RLIMIT_FSIZE`` in a child, a full tmpfs) is cut back, so
  the next record never fuses with a partial one and the run resumes;
- run files are never opened through a symbolic link, and another user's files are refused,
  by writers and read-only commands alike.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir
from supervisor.core.journal_reader import JournalReader, read_json_lines
from supervisor.core.journal_writer import JournalWriter
from supervisor.errors import JournalError, RunDirError

from ..conftest import ROOT, clean_env, run_cli

# An agent that catches a failed step's error and goes on (it tries the step again). With a file
# size limit it takes the limit off after the first failure (the soft limit may rise up to the hard
# one); on a full tmpfs it deletes its ballast: the disk has room again.
FAULT_AGENT = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from supervisor import Run
    from supervisor.errors import JournalError

    run_dir, limit, ballast = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, no signal
    failed = []
    with Run.open(run_dir) as run:
        if limit:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        for i in range(30):
            run.state.setdefault("seen", []).append(i)
            while True:
                try:
                    run.step(f"s{i}", lambda i=i: {"i": i, "pad": "x" * 300})
                    break
                except JournalError as e:
                    failed.append(str(e))
                    if len(failed) > 5:
                        raise
                    if limit:
                        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                    if ballast and os.path.exists(ballast):
                        os.unlink(ballast)  # room again
    print(json.dumps({"failed": failed, "replayed": list(run.replayed), "executed": list(run.executed), "state": run.state}))
    """
)


def _agent(tmp_path: Path) -> Path:
    script = tmp_path / "fault_agent.py"
    script.write_text(FAULT_AGENT)
    return script


def _run(script: Path, run_dir: Path, limit: int = 0, ballast: str = "") -> dict:
    p = subprocess.run(
        [sys.executable, str(script), str(run_dir), str(limit), ballast],
        check=False, capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=30,
    )
    assert p.returncode == 0, p.stderr
    return orjson.loads(p.stdout.splitlines()[-1])


def _every_line_is_json(run_dir: Path) -> list[dict]:
    lines = (run_dir / "journal.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"", "the journal ends with a whole line"
    return [orjson.loads(line) for line in lines[:-1]]  # raises on a fused or partial line


def _check_resume(script: Path, run_dir: Path, first: dict) -> None:
    assert first["executed"] == [f"s{i}" for i in range(30)] and first["state"] == {"seen": list(range(30))}
    recs = _every_line_is_json(run_dir)
    assert [r["seq"] for r in recs] == list(range(len(recs))), "seqs stay dense: no failed record took one"
    assert not (run_dir / "journal.jsonl.torn").exists(), "nothing partial was left for the next start to move aside"
    again = _run(script, run_dir)
    assert again["failed"] == [] and again["executed"] == []
    assert again["replayed"] == [f"s{i}" for i in range(30)], "every committed step is served, none run again"
    # the patches on disk give the state the agent had: the failed record's patch was not kept in the
    # SDK's shadow, so the retried step's record carries the change
    assert again["state"] == {"seen": list(range(30))}
    _every_line_is_json(run_dir)
    log = run_cli("log", str(run_dir))
    assert log.returncode == 0 and "warning" not in log.stderr, log.stderr
    assert [line.split()[2] for line in log.stdout.splitlines()].count("step") == 30  # the kind column


def test_a_write_past_the_file_size_limit_is_cut_back_and_the_run_resumes(tmp_path: Path) -> None:
    """RLIMIT_FSIZE in the agent: the record that crosses the limit is written in part (a short write),
    then fails; the writer cuts it back. The agent goes on; the next records are whole; a resume works."""
    script, run_dir = _agent(tmp_path), tmp_path / "run"
    first = _run(script, run_dir, limit=6000)
    assert len(first["failed"]) == 1 and "File too large" in first["failed"][0], first
    assert "the journal is unchanged" in first["failed"][0]
    _check_resume(script, run_dir, first)


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=False, capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


def test_a_full_disk_during_a_step_leaves_no_partial_record(tmp_path: Path, small_tmpfs: Path) -> None:
    """A 64 KiB tmpfs filled with ballast: a step record does not fit. The agent frees the ballast and
    goes on; no record fuses with the partial one, and the run resumes with every line valid JSON."""
    script, run_dir = _agent(tmp_path), small_tmpfs / "run"
    run_dir.mkdir(mode=0o700)
    ballast = small_tmpfs / "ballast"
    st = os.statvfs(small_tmpfs)
    free = st.f_bavail * st.f_frsize
    # leave room for run.json, the start record and a few steps, not for all of them
    with open(ballast, "wb") as f:
        try:
            f.write(b"\0" * (free - 3 * st.f_frsize))
        except OSError:
            pass  # the ballast filled the tmpfs up to its last blocks: that is the point
    first = _run(script, run_dir, ballast=str(ballast))
    assert len(first["failed"]) == 1 and "No space left on device" in first["failed"][0], first
    _check_resume(script, run_dir, first)


def test_a_write_whose_cut_back_fails_breaks_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the partial line cannot be cut back, the writer refuses every later write with a clear error,
    and the next writer moves the partial line aside: a committed line is always whole."""
    run = tmp_path / "run"
    w = JournalWriter(run, durable=False)
    w.append({"kind": "step", "step": "a", "output": 1})
    real_write = os.write
    calls = []

    def short_then_full(fd: int, data: bytes) -> int:  # the disk: 20 bytes of the line, then ENOSPC
        if fd == w._fd:
            calls.append(len(data))
            if len(calls) == 1:
                return real_write(fd, bytes(data[:20]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "write", short_then_full)
    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with pytest.raises(JournalError, match="could not be cut back"):
        w.append({"kind": "step", "step": "b", "output": 2})
    monkeypatch.undo()
    with pytest.raises(JournalError, match="refuses further writes"):
        w.append({"kind": "step", "step": "c", "output": 3})
    w.close()
    w2 = JournalWriter(run, durable=False)
    assert w2.repaired_bytes == 20 and w2.next_seq == 1
    w2.append({"kind": "step", "step": "c", "output": 3})
    w2.close()
    assert [r["step"] for r in _every_line_is_json(run)] == ["a", "c"]


def test_a_short_write_then_an_error_is_cut_back_to_the_last_whole_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    w = JournalWriter(run, durable=False)
    w.append({"kind": "step", "step": "a", "output": 1})
    size = (run / "journal.jsonl").stat().st_size
    real_write = os.write
    calls = []

    def short_then_full(fd: int, data: bytes) -> int:
        if fd == w._fd:
            calls.append(len(data))
            if len(calls) == 1:
                return real_write(fd, bytes(data[:7]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(JournalError, match=r"No space left on device.*journal is unchanged"):
        w.append({"kind": "step", "step": "b", "output": 2})
    monkeypatch.undo()
    assert (run / "journal.jsonl").stat().st_size == size and len(calls) == 2
    assert w.append({"kind": "step", "step": "b", "output": 2})["seq"] == 1
    w.close()
    assert [r["step"] for r in _every_line_is_json(run)] == ["a", "b"]


# --------------------------------------------------------------------------- symlinks and owners


def _journal_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    with JournalWriter(run, durable=False) as w:
        for i in range(3):
            w.append({"kind": "step", "step": f"s{i}", "output": i})
    rundir.update_run_json(run, status="running")
    return run


def test_a_symlinked_journal_is_never_truncated_moved_or_appended_to(tmp_path: Path) -> None:
    run = _journal_run(tmp_path)
    target = tmp_path / "elsewhere.jsonl"
    content = b'{"kind":"step","step":"x","output":1}\n{"partial'  # a "torn tail" the repair would move
    target.write_bytes(content)
    (run / "journal.jsonl").unlink()
    (run / "journal.jsonl").symlink_to(target)
    p = subprocess.run(
        [sys.executable, "-c", "import sys; from supervisor import Run; Run.open(sys.argv[1]).step('a', lambda: 1)", str(run)],
        check=False, capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=30,
    )
    assert p.returncode != 0 and "is a symbolic link" in p.stderr
    with pytest.raises(RunDirError, match=re.escape("journal.jsonl is a symbolic link")):
        JournalWriter(run)
    assert target.read_bytes() == content, "the link's target is untouched"
    assert not Path(str(target) + ".torn").exists() and not (run / "journal.jsonl.torn").exists()
    for cmd in (["log", str(run)], ["state", str(run)], ["status", str(run)], ["log", str(run / "journal.jsonl")]):
        r = run_cli(*cmd)
        assert r.returncode == 2 and "is a symbolic link" in r.stderr and len(r.stderr.strip().splitlines()) == 1, (cmd, r)
    assert target.read_bytes() == content


@pytest.mark.parametrize("name", ["journal.lock", "run.json", "supervisor.jsonl", "journal.000001.jsonl"])
def test_other_run_files_are_not_followed_either(tmp_path: Path, name: str) -> None:
    run = _journal_run(tmp_path)
    target = tmp_path / "target"
    target.write_bytes(b'{"format": 1}\n' if name == "run.json" else b'{"kind":"note","message":"x"}\n')
    before = target.read_bytes()
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    with pytest.raises(RunDirError, match="is a symbolic link"):
        if name == "supervisor.jsonl":
            read_json_lines(run / name)
        elif name == "run.json":
            rundir.read_run_json(run)
        elif name == "journal.lock":
            JournalWriter(run)
        else:
            JournalReader(run).load()
    for cmd in ("log", "state", "status"):  # every command checks the run files before it reads any
        r = run_cli(cmd, str(run))
        assert r.returncode == 2 and "is a symbolic link" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    assert target.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
@pytest.mark.parametrize("name", ["journal.jsonl", "journal.lock", "run.json", "supervisor.jsonl"])
def test_files_of_another_user_are_refused(tmp_path: Path, name: str) -> None:
    run = _journal_run(tmp_path)
    (run / "supervisor.jsonl").write_bytes(b'{"event":"spawn"}\n')
    (run / "journal.lock").touch()
    os.chown(run / name, 12345, 12345)
    with pytest.raises(RunDirError, match="owned by uid 12345"):
        if name == "supervisor.jsonl":
            read_json_lines(run / name)
        elif name == "run.json":
            rundir.read_run_json(run)
        else:
            JournalWriter(run)
    for cmd in ("log", "state", "status"):
        r = run_cli(cmd, str(run))
        assert r.returncode == 2 and "owned by uid 12345" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    if name in ("journal.jsonl", "run.json"):
        with pytest.raises(RunDirError, match="owned by uid 12345"):
            JournalReader(run).load() if name == "journal.jsonl" else rundir.read_run_json(run)


def test_a_refused_journal_leaves_the_lock_free(tmp_path: Path) -> None:
    """A writer refused by a symlinked journal holds no lock after: the next writer (the link replaced) opens."""
    run = _journal_run(tmp_path)
    real = (run / "journal.jsonl").read_bytes()
    (tmp_path / "elsewhere").write_bytes(real)
    (run / "journal.jsonl").unlink()
    (run / "journal.jsonl").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunDirError):
        JournalWriter(run)
    (run / "journal.jsonl").unlink()
    (run / "journal.jsonl").write_bytes(real)
    with JournalWriter(run) as w:
        assert w.next_seq == 3


@pytest.mark.parametrize("name", ["supervisor.jsonl", "agent.log", "supervisor.lock"])
def test_supervise_never_writes_through_a_symlinked_run_file(tmp_path: Path, name: str) -> None:
    """The supervisor's own files are opened as the journal is: a link is refused in one line, its target untouched."""
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "target.txt"
    target.write_bytes(b"precious\n")
    (run / name).symlink_to(target)
    r = run_cli("supervise", "--run-dir", str(run), "-q", "--", sys.executable, "-c", "print('hi')")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "symbolic link" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert target.read_bytes() == b"precious\n"
