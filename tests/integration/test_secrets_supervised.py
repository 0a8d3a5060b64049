"""No secret reaches the run directory of a real supervised run: argv tokens, add_secret values, the stderr tail.

The agent (tests/integration/secrets_agent.py) gets an ``sk-...`` token on its command line
and two values through environment variables whose names do not look secret,
registered with ``secrets=`` and ``add_secret``: the supervisor can only learn them
through the secrets pipe. It prints them everywhere and crashes with them as its
last stderr lines; then every file of the run directory is searched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir
from supervisor.core.redact import ENV_SECRETS_FD, Redactor
from supervisor.supervise.secrets import SecretsPipe

from ..conftest import ROOT, clean_env, run_cli
from .supervisor_util import PY, Supervised

AGENT = Path(__file__).resolve().parent / "secrets_agent.py"
TOKEN = "sk-proj-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzd"
OPTION = "tangerine gazebo 4711 opal"  # no token shape: only the pipe can tell the supervisor
ADDED = "quartz-ledger-0815-plum"
PEM_PIECES = (b"b3BlbnNzaC1rZXktdjEAAAAABG5v", b"QyNTUxOQAAACDy4cVkOV0Ic3Bbhc1o1b")


def secret_hits(run_dir: Path) -> list[str]:
    """Every (file, secret) where the secret or a 12-byte piece of its start or end is found."""
    needles = [TOKEN.encode(), OPTION.encode(), ADDED.encode(), *PEM_PIECES]
    needles += [n[:12] for n in needles[:3]] + [n[-12:] for n in needles[:3]]
    hits = []
    for path in sorted(run_dir.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path.relative_to(run_dir)}: {n!r}" for n in needles if n in data]
    return hits


def agent_env(**extra: str) -> dict[str, str]:
    return {**clean_env(), "AGENT_VALUE_OPTION": OPTION, "AGENT_VALUE_ADDED": ADDED, **extra}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("split_at", [64 * 1024 - 7, 64 * 1024 - len(TOKEN) + 1])
def test_no_secret_in_any_file_of_a_supervised_run(tmp_path: Path, split_at: int) -> None:
    run_dir = tmp_path / "run"
    env = agent_env(AGENT_SPLIT_AT=str(split_at))
    # agent.log rotates at 4 KiB: the sealed agent.00000N.log files are searched too
    with Supervised(run_dir, [PY, str(AGENT), TOKEN], "--log-max-bytes", "4096", env=env) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    files = {p.name for p in run_dir.rglob("*") if p.is_file()}
    assert {"run.json", "supervisor.jsonl", "agent.log", "journal.jsonl", "agent.000001.log"} <= files
    assert any(p.parent.name == "checkpoints" for p in run_dir.rglob("*.json")), files
    assert secret_hits(run_dir) == []
    # what was written instead: redacted, not dropped
    exits = sup.events("exit")
    assert [e["code"] for e in exits] == [1, 0]
    tail = exits[0]["stderr_tail"]
    assert tail[-3:] == ["crashing with [REDACTED]", "option=[REDACTED]", "added=[REDACTED]"], tail
    assert rundir.read_run_json(run_dir)["command"] == [PY, str(AGENT), "[REDACTED]"]
    assert sup.events("supervisor-start")[0]["argv"][-1] == "[REDACTED]"
    assert all(e["argv"][2] == "[REDACTED]" for e in sup.events("spawn"))
    log = "".join(p.read_text() for p in sorted(run_dir.glob("agent.0*.log"))) + (run_dir / "agent.log").read_text()
    assert "attempt 1 started" in log and f"{AGENT} [REDACTED]" in log
    assert "[1:stdout] attempt 1: token [REDACTED] option [REDACTED] added [REDACTED]" in log
    # the long line: every x and y is there, the token is one [REDACTED] across the split
    bodies = [ln.split("[1:stdout] ", 1)[1] for ln in log.splitlines() if "[1:stdout] " in ln]
    joined = "".join(b for b in bodies if not set(b) - set("xy [REDACTED]"))
    assert joined == "x" * split_at + "[REDACTED] " + "y" * 100
    # the child got the real token (its own output to the terminal, teed raw, has it)
    assert TOKEN in sup.stdout()


@pytest.mark.timeout(60)
def test_supervise_again_without_a_command_refuses_a_redacted_one(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, [PY, str(AGENT), TOKEN], "-q", env=agent_env()) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    p = run_cli("supervise", "--run-dir", str(run_dir))
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "had secrets redacted" in p.stderr and "-- CMD" in p.stderr
    assert "Traceback" not in p.stderr
    # given again after '--', the command runs (the real token reaches the child) and nothing leaks
    with Supervised(run_dir, [PY, str(AGENT), TOKEN], "-q", env=agent_env()) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    assert TOKEN in sup.stdout() and secret_hits(run_dir) == []
    assert set(before) <= {p for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.timeout(60)
def test_an_unsupervised_sdk_run_records_its_argv_redacted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = agent_env(AGENT_SUPERVISOR_RUN_DIR=str(run_dir))
    p = subprocess.run([PY, str(AGENT), TOKEN, "--api-key", "plain-cli-value"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=45)
    assert p.returncode == 1, p.stderr  # attempt 1 crashes by design
    assert rundir.read_run_json(run_dir)["command"] == [PY, str(AGENT), "[REDACTED]", "--api-key", "[REDACTED]"]
    journal = (run_dir / "journal.jsonl").read_bytes()
    assert b"plain-cli-value" not in journal and TOKEN.encode() not in journal
    assert [h for h in secret_hits(run_dir) if not h.startswith("agent.log")] == []


@pytest.mark.timeout(30)
def test_the_pipe_teaches_the_supervisor_values_a_real_child_registers() -> None:
    r = Redactor(from_env=False)
    pipe = SecretsPipe(r)
    code = (
        "import os, sys\n"
        "from supervisor.core.redact import send_secrets\n"
        "send_secrets(['value-from-child-1', 'x'])\n"
        "send_secrets(['with \"quotes\" and\\nnewline'])\n"
        "sys.stdout.write('registered\\n')\n"
    )
    env = {**clean_env(), **pipe.env()}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, pass_fds=pipe.pass_fds,
                            stdout=subprocess.PIPE)
    pipe.spawned()
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"registered\n"  # printed after the values were written: they are in the pipe
    assert pipe.drain() == 2
    assert r(b"value-from-child-1") == b"[REDACTED]"
    assert r(orjson.dumps('with "quotes" and\nnewline')) == b'"[REDACTED]"'
    proc.wait(timeout=20)
    proc.stdout.close()
    pipe.drain()
    assert pipe.eof
    pipe.close()
    assert pipe.read_fd == -1 and ENV_SECRETS_FD in env


def test_the_pipe_drops_junk_and_overlong_lines() -> None:
    from supervisor.supervise import secrets

    r = Redactor(from_env=False)
    pipe = SecretsPipe(r)
    try:
        os.write(pipe.write_fd, b'not json\n123\n"ok-value-1"\n')
        assert pipe.drain() == 1 and r.values == ["ok-value-1"]
        big = b'"' + b"a" * (secrets.MAX_VALUE_LINE + 10)
        for i in range(0, len(big), 60000):
            os.write(pipe.write_fd, big[i : i + 60000])
            pipe.drain()
        os.write(pipe.write_fd, b'"\n"after-junk-2"\n')
        assert pipe.drain() == 1 and r.values == ["ok-value-1", "after-junk-2"]
    finally:
        pipe.close()
