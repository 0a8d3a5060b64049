"""Errors of the SDK's run directory are one line on stderr and exit 2, not a traceback: real processes.

The agent does ``with Run.open(dir) as run:`` and catches nothing: a second writer
on the run, a bad ``run.json``, a directory where a run file belongs, a read-only
file system or run directory, a journal that fails under a running agent.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from supervisor import JournalLockedError, Run
from supervisor.errors import JournalError, RunDirError

from ..conftest import ROOT, clean_env, wait_for

AGENT = textwrap.dedent(
    """
    import os, resource, signal, sys, time
    from supervisor import Run

    run_dir, mode = sys.argv[1], sys.argv[2]
    with Run.open(run_dir) as run:
        run.step("first", lambda: "done")
        if mode == "hold":  # keep the run open until the test says so (at most 30 s)
            deadline = time.monotonic() + 30
            while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:
                time.sleep(0.02)
        elif mode == "fsize":  # the journal cannot grow any more: the next step's record fails
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            size = os.path.getsize(os.path.join(run_dir, "journal.jsonl"))
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
            run.step("second", lambda: "x" * 100)
    print("finished")
    """
)


def run_agent(
    tmp_path: Path, run_dir: Path, mode: str = "once", *extra: str, preexec: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "error_agent.py"
    script.write_text(AGENT)
    return subprocess.run(
        [sys.executable, str(script), str(run_dir), mode, *extra],
        capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=30, preexec_fn=preexec,
    )


def one_line(p: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The agent failed with exit 2 and exactly one line on stderr holding every needle, and no traceback."""
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agent-supervisor: "), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "finished" not in p.stdout
    return lines[0]


# --------------------------------------------------------------------------- a second writer


def test_a_second_writer_gets_one_line_naming_the_run_and_the_holders_pid(tmp_path: Path) -> None:
    run_dir, release = tmp_path / "run", tmp_path / "release"
    script = tmp_path / "error_agent.py"
    script.write_text(AGENT)
    holder = subprocess.Popen(
        [sys.executable, str(script), str(run_dir), "hold", str(release)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT,
    )
    try:
        journal = run_dir / "journal.jsonl"
        wait_for(lambda: journal.exists() and b'"kind":"step"' in journal.read_bytes(), what="the first agent's step")
        before = journal.read_bytes()
        second = run_agent(tmp_path, run_dir)
        one_line(second, str(run_dir), f"pid {holder.pid}", "stop it first")
        assert journal.read_bytes() == before, "the second agent wrote nothing"
    finally:
        release.touch()
        out, err = holder.communicate(timeout=30)
    assert holder.returncode == 0 and "finished" in out, err


def test_in_process_the_error_is_still_catchable_as_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Run.open(tmp_path / "run"), pytest.raises(JournalLockedError, match=f"pid {os.getpid()}") as exc:
        Run.open(tmp_path / "run")
    assert isinstance(exc.value, SystemExit) and exc.value.code == 2  # uncaught, it ends the agent with exit 2
    assert capsys.readouterr().err.count("\n") == 1


# --------------------------------------------------------------------------- bad run files


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{bad", "run.json is not valid JSON"),
        (b"[1, 2]", "run.json is not a JSON object"),
        (b'{"format": "one"}', "\"format\" is 'one', not a format number"),
        (None, "run.json is a directory"),
    ],
    ids=["invalid-json", "not-an-object", "format-not-a-number", "a-directory"],
)
def test_a_bad_run_json_is_one_line(tmp_path: Path, content: bytes | None, needle: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if content is None:
        (run_dir / "run.json").mkdir()
    else:
        (run_dir / "run.json").write_bytes(content)
    one_line(run_agent(tmp_path, run_dir), needle)
    assert not (run_dir / "journal.jsonl").exists(), "nothing was written"


def test_a_journal_that_is_a_directory_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "journal.jsonl").mkdir(parents=True)
    one_line(run_agent(tmp_path, run_dir), str(run_dir / "journal.jsonl"), "is a directory", "move it aside")
    assert not any((run_dir / "journal.jsonl").iterdir())


# --------------------------------------------------------------------------- read-only


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_read_only_file_system_is_one_line(tmp_path: Path, tmpfs: Path) -> None:
    existing, empty = tmpfs / "run", tmpfs / "empty"
    assert run_agent(tmp_path, existing).returncode == 0
    empty.mkdir()
    before = (existing / "journal.jsonl").read_bytes()
    p = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot remount read-only: {p.stderr.strip()}")
    one_line(run_agent(tmp_path, existing), str(existing), "read-only")  # resume of a run
    one_line(run_agent(tmp_path, empty), str(empty), "read-only")  # an empty directory
    one_line(run_agent(tmp_path, tmpfs / "new"), str(tmpfs / "new"), "Read-only file system")  # a run to create
    assert (existing / "journal.jsonl").read_bytes() == before


def _without_dac_override() -> None:
    """In the child: root without the capabilities that let it write where permissions say no."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: the exec'd program gets no more than the set
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_run_directory_the_agent_cannot_write_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_agent(tmp_path, run_dir).returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    before = (run_dir / "journal.jsonl").read_bytes()
    for d in (run_dir, fresh):
        d.chmod(0o500)
    try:
        probe = subprocess.run(["sh", "-c", f"touch {run_dir}/probe"], capture_output=True, preexec_fn=_without_dac_override)
        if probe.returncode == 0:
            pytest.skip("this process can write a 0500 directory (capabilities could not be dropped)")
        # the journal and its lock are writable files: without the check at open, the agent would
        # append to the journal and fail only at exit, writing run.json
        one_line(run_agent(tmp_path, run_dir, preexec=_without_dac_override), str(run_dir), "permission denied")
        one_line(run_agent(tmp_path, fresh, preexec=_without_dac_override), str(fresh), "permission denied")
    finally:
        for d in (run_dir, fresh):
            d.chmod(0o700)
    assert (run_dir / "journal.jsonl").read_bytes() == before


# --------------------------------------------------------------------------- under a running agent


def test_a_journal_that_fails_under_the_agent_is_one_line(tmp_path: Path) -> None:
    """The file size limit stops the next record: the step raises JournalError, nobody catches it."""
    run_dir = tmp_path / "run"
    line = one_line(run_agent(tmp_path, run_dir, "fsize"), str(run_dir / "journal.jsonl"))
    assert "File too large" in line
    assert b'"step":"second"' not in (run_dir / "journal.jsonl").read_bytes()


def test_oserror_of_the_agents_own_code_keeps_its_traceback(tmp_path: Path) -> None:
    """Only the SDK's errors become one line: an agent's own OSError is its own bug, shown in full."""
    script = tmp_path / "own_error.py"
    script.write_text(f"from supervisor import Run\nwith Run.open({str(tmp_path / 'run')!r}) as run:\n    open('/nonexistent/x')\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=30)
    assert p.returncode == 1 and "Traceback" in p.stderr and "FileNotFoundError" in p.stderr


def test_error_classes_keep_their_names() -> None:
    """The exiting twin of an error is named and placed as the error itself (as a traceback or repr shows it)."""
    from supervisor.sdk.exits import exiting as _exiting

    e = _exiting(RunDirError("x"), 2)
    assert type(e).__name__ == "RunDirError" and type(e).__module__ == "supervisor.errors"
    assert isinstance(e, RunDirError) and isinstance(e, SystemExit) and not isinstance(e, JournalError)


def test_a_checkpoint_that_cannot_be_written_leaves_no_patch_behind(tmp_path: Path) -> None:
    """The checkpoint's file cannot be written (``checkpoints`` is a file): one-line error, no record, and the
    state change it carried is saved by the next step instead (the shadow did not keep it)."""
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        run.step("a", lambda: 1)
        (run_dir / "checkpoints").write_text("in the way")
        run.state["k"] = 1
        with pytest.raises(RunDirError, match="checkpoints"):
            run.checkpoint("cp")
        run.step("b", lambda: 2)
    with Run.open(run_dir) as run:
        run.step("a", lambda: 0)
        run.step("b", lambda: 0)
        assert run.state == {"k": 1}
    script = tmp_path / "cp_agent.py"
    script.write_text(f"from supervisor import Run\nwith Run.open({str(run_dir)!r}) as run:\n    run.checkpoint('again')\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=30)
    one_line(p, "checkpoints")
