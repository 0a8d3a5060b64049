"""Bad run files and exits that are not what they seem (issue 28), with real processes and real files.

- a run file that is not a regular file (a FIFO, a socket, a directory) is refused in one line by the SDK,
  ``supervise``, ``log``, ``state`` and ``status``: never opened blocking, never a hang;
- a field of ``run.json`` of the wrong type is one line naming the file, the field, its value and its type;
- a hand-written step record whose name is not a string is blamed on the record (file and line), not on the code;
- an agent that exits 0 inside a step is a crash under ``supervise`` (the step runs again), never a success;
- ``supervise`` exits 75 when a full disk keeps it from recording the end of the run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import textwrap
from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir

from ..conftest import ROOT, clean_env, run_cli, wait_for
from .supervisor_util import PY, Supervised, kept_full, small_tmpfs

CLI_TIMEOUT = 10.0


def one_line(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The command failed with one line on stderr (no traceback) that holds every needle."""
    assert r.returncode != 0, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)
    return r.stderr


def sdk_open(run_dir: Path) -> subprocess.CompletedProcess[str]:
    """An agent that only opens the run (``Run.open``), as a real process."""
    script = "import sys\nfrom supervisor import Run\nwith Run.open(sys.argv[1]):\n    pass\n"
    return subprocess.run([PY, "-c", script, str(run_dir)], capture_output=True, text=True, timeout=CLI_TIMEOUT,
                          env=clean_env(), cwd=ROOT)


def snapshot(run_dir: Path) -> dict[str, bytes | str]:
    """What the directory holds: regular files by content, anything else by its kind."""
    out: dict[str, bytes | str] = {}
    for p in sorted(run_dir.iterdir()):
        out[p.name] = p.read_bytes() if p.is_file() and not p.is_symlink() else oct(p.lstat().st_mode)
    return out


# --------------------------------------------------------------------------- 8: run files that are not files


def make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "dir":
        path.mkdir(mode=0o700)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()


def finished_run(tmp_path: Path) -> Path:
    """A run a real agent finished under ``supervise`` (so every run file exists)."""
    run_dir = tmp_path / "run"
    r = subprocess.run([PY, "-m", "supervisor", "supervise", "-q", "--run-dir", str(run_dir), "--",
                        PY, str(ROOT / "sample_runs" / "minimal_agent.py"), "--steps", "2"],
                       capture_output=True, text=True, timeout=CLI_TIMEOUT * 2, env=clean_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return run_dir


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", ["sdk", "supervise", "log", "state", "status"])
def test_a_fifo_as_the_journal_is_refused_in_one_line_never_a_hang(tmp_path: Path, command: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    os.mkfifo(run_dir / rundir.JOURNAL, 0o600)  # nobody ever writes it: a blocking open would wait forever
    before = snapshot(run_dir)
    if command == "sdk":
        r = sdk_open(run_dir)
    elif command == "supervise":
        r = run_cli("supervise", "--run-dir", str(run_dir), "--", PY, "-c", "pass", timeout=CLI_TIMEOUT)
    else:
        r = run_cli(command, str(run_dir), timeout=CLI_TIMEOUT)
    assert r.returncode == 2, r.stderr
    one_line(r, "journal.jsonl is a FIFO (named pipe), not a regular file", "move it aside")
    assert snapshot(run_dir) == before, "nothing was written"


@pytest.mark.timeout(40)
@pytest.mark.parametrize(("name", "kind"), [
    (rundir.JOURNAL, "socket"), (rundir.RUN_JSON, "fifo"), (rundir.SUPERVISOR_EVENTS, "fifo"),
    (rundir.JOURNAL_LOCK, "dir"), (rundir.AGENT_LOG, "fifo"),
])
def test_any_run_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, name: str, kind: str) -> None:
    """In a finished run, one run file replaced by a FIFO, a socket or a directory: every command refuses it,
    ``supervise`` before it writes anything."""
    run_dir = finished_run(tmp_path)
    (run_dir / name).unlink(missing_ok=True)
    make_special(run_dir / name, kind)
    what = {"fifo": "a FIFO (named pipe)", "socket": "a socket", "dir": "a directory"}[kind]
    before = snapshot(run_dir)
    for argv in (["status", str(run_dir), "--json"], ["log", str(run_dir)],
                 ["supervise", "-q", "--run-dir", str(run_dir)]):
        r = run_cli(*argv, timeout=CLI_TIMEOUT)
        assert r.returncode == 2, (argv, r.stderr)
        one_line(r, f"{name} is {what}, not a regular file")
    if name != rundir.AGENT_LOG:  # the agent itself does not touch agent.log
        one_line(sdk_open(run_dir), f"{name} is {what}", "move it aside")
    assert snapshot(run_dir) == before, "nothing was written"


# --------------------------------------------------------------------------- 9: run.json fields


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("field", "value", "should"), [
    ("attempts", "many", "not a whole number of attempts"),
    ("command", "python agent.py", "not a list of strings"),
    ("supervisor_pid", "1234", "not a process id"),
    ("status", 3, "not a string"),
])
def test_a_run_json_field_of_the_wrong_type_is_one_line(tmp_path: Path, field: str, value: object, should: str) -> None:
    run_dir = finished_run(tmp_path)
    meta = rundir.read_run_json(run_dir)
    meta[field] = value
    (run_dir / rundir.RUN_JSON).write_bytes(orjson.dumps(meta))
    before = snapshot(run_dir)
    held = orjson.dumps(value).decode()
    for argv in (["supervise", "-q", "--run-dir", str(run_dir)], ["status", str(run_dir)], ["log", str(run_dir)]):
        r = run_cli(*argv, timeout=CLI_TIMEOUT)
        assert r.returncode == 2, (argv, r.stderr)
        one_line(r, f'run.json: "{field}" is {held}, {should}', "correct the field or remove it")
    one_line(sdk_open(run_dir), f'"{field}" is {held}')
    assert snapshot(run_dir) == before, "nothing was written"


# --------------------------------------------------------------------------- 11: a step name that is a number


@pytest.mark.timeout(30)
def test_a_numeric_step_name_is_blamed_on_the_record_with_its_file_and_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    journal = run_dir / rundir.JOURNAL
    journal.write_bytes(b'{"kind": "step", "step": "plan", "output": 1}\n{"kind": "step", "step": 42, "output": 1}\n')
    script = textwrap.dedent("""
        import sys
        from supervisor import Run
        with Run.open(sys.argv[1]) as run:
            run.step("plan", lambda: 1)
            run.step("search", lambda: 2)
    """)
    r = subprocess.run([PY, "-c", script, str(run_dir)], capture_output=True, text=True, timeout=CLI_TIMEOUT,
                       env=clean_env(), cwd=ROOT)
    assert r.returncode == rundir.EXIT_FAILED, r.stderr  # not restarted under supervise until it is fixed
    err = one_line(r, f"{journal}:2", "step name 42 (a number), not a string", "a step name must be a string",
                   "fix that line")
    assert "agent code changed" not in err
    lines = journal.read_bytes().splitlines()
    assert lines[:2] == [b'{"kind": "step", "step": "plan", "output": 1}', b'{"kind": "step", "step": 42, "output": 1}']


# --------------------------------------------------------------------------- 5: os._exit(0) inside a step


EXIT_IN_STEP_AGENT = textwrap.dedent("""
    import os, sys
    from supervisor import Run
    ledger, gate = sys.argv[1], sys.argv[2]

    def work():
        with open(ledger, "a") as f:
            f.write(os.environ["AGENT_SUPERVISOR_ATTEMPT"] + "\\n")
        if os.environ["AGENT_SUPERVISOR_ATTEMPT"] == "1":
            os._exit(0)  # inside the step: its begin is in the journal, its step record never will be
        with open(gate) as g:  # attempt 2 waits here until the test has looked at the status
            g.read()
        return "done"

    with Run.open() as run:
        run.step("plan", lambda: 1)
        run.step("work", work)
        run.step("report", lambda: 3)
""")


def status_json(run_dir: Path) -> dict[str, object]:
    r = run_cli("status", str(run_dir), "--json", timeout=CLI_TIMEOUT)
    assert r.returncode == 0, r.stderr
    out: dict[str, object] = orjson.loads(r.stdout)
    return out


@pytest.mark.timeout(40)
def test_an_exit_0_inside_a_step_is_a_crash_and_the_step_runs_again(tmp_path: Path) -> None:
    run_dir, ledger, gate = tmp_path / "run", tmp_path / "ledger", tmp_path / "gate"
    os.mkfifo(gate, 0o600)
    agent = [PY, "-c", EXIT_IN_STEP_AGENT, str(ledger), str(gate)]
    with Supervised(run_dir, agent, "--backoff-initial", "0.05") as sup:
        wait_for(lambda: sup.proc.poll() is not None or len(sup.events("spawn")) >= 2, timeout=20,
                 what="a second attempt (or the supervisor's end)")
        assert sup.proc.poll() is None, f"supervise ended after the exit inside the step: {sup.stderr()}"
        first = sup.events("exit")[0]
        assert (first["attempt"], first["code"], first["step"]) == (1, 0, "work")
        assert "exited with code 0 in step work" in sup.stderr()
        assert "so this is a crash, not a success: it runs again" in sup.stderr()
        # attempt 2 is in the step again (it waits on the gate): no status says succeeded
        wait_for(lambda: ledger.exists() and ledger.read_text().split() == ["1", "2"], timeout=20,
                 what="the step running again")
        assert status_json(run_dir)["state"] != "succeeded"
        assert rundir.read_run_json(run_dir)["status"] == "running"
        fd = os.open(gate, os.O_WRONLY)  # the agent holds the read end: this does not block
        os.close(fd)
        assert sup.wait(20) == 0, sup.stderr()
    st = status_json(run_dir)
    assert st["state"] == "succeeded" and st["attempt"] == 2
    recs = [orjson.loads(ln) for ln in (run_dir / rundir.JOURNAL).read_bytes().splitlines()]
    done = [(r["step"], r["attempt"], r["output"]) for r in recs if r["kind"] == "step"]
    assert done == [("plan", 1, 1), ("work", 2, "done"), ("report", 2, 3)]


@pytest.mark.timeout(30)
def test_status_never_shows_a_run_that_ends_inside_a_step_as_succeeded(tmp_path: Path) -> None:
    """A run.json that says succeeded (written by an older supervisor) over a journal that ends with a begin."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / rundir.JOURNAL).write_bytes(
        b'{"kind":"step","step":"plan","output":1,"seq":0}\n{"kind":"begin","step":"work","seq":1}\n')
    rundir.write_run_json(run_dir, {"id": "run", "status": "succeeded", "attempts": 1, "ended": rundir.utc_now()})
    st = status_json(run_dir)
    assert st["state"] == "crashed"
    assert "ends inside step 'work'" in str(st["note"])


# --------------------------------------------------------------------------- 12: exit 75 on a full disk


# the supervisor as a real process, with the final write's retry shortened from 10 s (the test's budget)
SUPERVISE_FAST_FINAL = (
    "import sys\nimport supervisor.supervise.reporting as r\nr.FINAL_WRITE_S = 1.0\n"
    "from supervisor.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.timeout(40)
def test_an_end_that_cannot_be_recorded_on_a_full_disk_exits_75(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate, 0o600)
    agent = f"import sys\nopen({str(gate)!r}).read()\nsys.exit({rundir.EXIT_FAILED})\n"  # fails for good: exit 1 before
    with small_tmpfs(tmp_path / "mnt", "2m") as mnt:
        run_dir = mnt / "run"
        err_path = tmp_path / "sup.err"
        with open(err_path, "wb") as err:
            sup = subprocess.Popen([PY, "-c", SUPERVISE_FAST_FINAL, "supervise", "--run-dir", str(run_dir), "--",
                                    PY, "-c", agent], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                   env=clean_env(), cwd=ROOT)
        try:
            wait_for(lambda: "attempt 1 started" in err_path.read_text(), timeout=20, what="the agent running")
            with kept_full(mnt / "filler"):
                os.close(os.open(gate, os.O_WRONLY))  # the agent reads EOF and exits 78
                code = sup.wait(timeout=20)
        finally:
            if sup.poll() is None:
                sup.kill()
                sup.wait()
        stderr = err_path.read_text()
        assert code == 75, stderr
        assert "Traceback" not in stderr
        assert "could not record the end of the run (failed) for want of resources" in stderr
        assert rundir.read_run_json(run_dir)["status"] == "running"  # unchanged: the run stays resumable
