"""The standby (``supervise/standby.py``): the next attempt's process, made while an attempt runs, becomes the
restarted agent; a command that cannot be executed any more fails as a spawn does; nothing is left at the end."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ..conftest import wait_for
from .supervisor_util import PY, Supervised, alive

STANDBY_WATCHER = """
import os, sys, time
from pathlib import Path
out = Path(sys.argv[1])
attempt = os.environ["AGENT_SUPERVISOR_ATTEMPT"]
(out / f"pid.{attempt}").write_text(str(os.getpid()))
if attempt != "1":
    sys.exit(0)
sup = os.getppid()

def siblings():
    pids = []
    for task in os.listdir(f"/proc/{sup}/task"):
        with open(f"/proc/{sup}/task/{task}/children") as f:
            pids += [int(p) for p in f.read().split()]
    return pids

deadline = time.monotonic() + 20
while time.monotonic() < deadline:  # the standby: a sibling running the standby's program
    for pid in siblings():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"execvpe" in cmd:
            (out / "standby").write_text(str(pid))
            sys.exit(1)
    time.sleep(0.01)
sys.exit(3)
"""


@pytest.mark.timeout(60)
def test_the_restarted_attempt_is_the_standby_made_while_the_first_ran(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(STANDBY_WATCHER)
    with Supervised(tmp_path / "run", [PY, str(agent), str(tmp_path)], "-q", "--no-resume-flag",
                    "--backoff-initial", "0") as sup:
        assert sup.wait(45) == 0, sup.stderr()
    standby = int((tmp_path / "standby").read_text())
    assert int((tmp_path / "pid.2").read_text()) == standby  # exec'd in the standby: its pid, no new process
    assert int((tmp_path / "pid.1").read_text()) != standby
    assert [e["pid"] for e in sup.events("spawn")][-1] == standby
    assert not alive(standby)


SELF_BREAKING = """#!{py}
import os, sys
os.chmod(__file__, 0o644)  # the next attempt cannot be executed
sys.exit(1)
"""


@pytest.mark.timeout(60)
def test_a_command_that_cannot_be_executed_at_the_restart_fails_as_a_spawn_does(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    agent.write_text(SELF_BREAKING.format(py=PY))
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    with Supervised(tmp_path / "run", [str(agent)], "--no-resume-flag", "--backoff-initial", "0") as sup:
        code = sup.wait(45)
    assert code != 0
    failed = [e for e in sup.events("exit") if e.get("reason") == "spawn-failed"]
    assert failed and failed[0]["code"] == 127, sup.events("exit")
    assert "attempt 2 could not start: Permission denied" in sup.stderr()
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _standby_of(int(p), sup.pid)]
    assert leftovers == []


def _standby_of(pid: int, sup: int) -> bool:
    """A standby left by the supervisor ``sup`` (its program on the command line, its parent gone or ``sup``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return b"execvpe" in cmd and ppid in (sup, 1)


@pytest.mark.timeout(60)
def test_a_standby_killed_meanwhile_is_replaced_by_a_spawn(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(STANDBY_WATCHER.replace('(out / "standby").write_text(str(pid))',
                                             'os.kill(pid, 9); (out / "standby").write_text(str(pid))'))
    with Supervised(tmp_path / "run", [PY, str(agent), str(tmp_path)], "-q", "--no-resume-flag",
                    "--backoff-initial", "0") as sup:
        assert sup.wait(45) == 0, sup.stderr()
    standby = int((tmp_path / "standby").read_text())
    second = int((tmp_path / "pid.2").read_text())
    assert second != standby
    wait_for(lambda: not alive(standby), timeout=10, what="the killed standby reaped")
