"""The standby spawner (``supervise/standby.py``): restarted attempts are started by it as the supervisor's own
children, in the run's cgroup and session layout a ``Popen`` gives, with their secrets pipe; a command that cannot
be executed any more fails as a spawn does; a standby killed meanwhile gives way to ``Popen``; none is left."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ..conftest import ROOT
from .supervisor_util import PY, Supervised

SECRET = "standby-secret-9f2c"

AGENT = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
out = Path(sys.argv[1])
attempt = int(os.environ["AGENT_SUPERVISOR_ATTEMPT"])
mode = sys.argv[2]
info = {{"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "stdin": os.readlink("/proc/self/fd/0"),
         "cgroup": open("/proc/self/cgroup").read()}}
(out / f"a{{attempt}}.json").write_text(json.dumps(info))

def standby():
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # a sibling running the standby's program
        for task in os.listdir(f"/proc/{{os.getppid()}}/task"):
            with open(f"/proc/{{os.getppid()}}/task/{{task}}/children") as f:
                for pid in f.read().split():
                    try:
                        cmd = open(f"/proc/{{pid}}/cmdline", "rb").read()
                    except OSError:
                        continue
                    if b"recv_fds" in cmd:
                        return int(pid)
        time.sleep(0.01)
    sys.exit(3)

if mode in ("kill", "stop") and attempt == 2:
    pid = standby()
    (out / "standby").write_text(str(pid))
    os.kill(pid, 9 if mode == "kill" else 19)  # SIGKILL, or SIGSTOP: alive but never answering
if mode == "secret" and attempt == 4:
    from supervisor import Run
    with Run.open() as run:
        run.add_secret(os.environ["AGENT_VALUE"])
        print("the value is", os.environ["AGENT_VALUE"], flush=True)
    sys.exit(0)
sys.exit(1 if attempt < {last} else 0)
"""


def _agent(tmp_path: Path, last: int) -> Path:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT.format(root=str(ROOT), last=last))
    return agent


def _info(tmp_path: Path, attempt: int) -> dict[str, object]:
    return dict(json.loads((tmp_path / f"a{attempt}.json").read_text()))


def _standbys(sup: int) -> list[int]:
    """Live standby processes of the supervisor ``sup`` (its children, or orphans, running the standby's program)."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"recv_fds" in cmd and ppid in (sup, 1):
            found.append(int(p))
    return found


@pytest.mark.timeout(60)
def test_restarts_are_started_by_the_standby_as_the_supervisors_children_with_their_secrets(tmp_path: Path) -> None:
    env = {**os.environ, "AGENT_VALUE": SECRET}
    env.pop("AGENT_SUPERVISOR_RUN_DIR", None)
    agent = _agent(tmp_path, 4)
    with Supervised(tmp_path / "run", [PY, str(agent), str(tmp_path), "secret"], "--no-resume-flag",
                    "--backoff-initial", "0", env=env) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    spawns = sup.events("spawn")
    assert [bool(e.get("standby")) for e in spawns] == [False, False, True, True]  # made at the first restart
    first = _info(tmp_path, 1)
    for n in (3, 4):
        info = _info(tmp_path, n)
        assert info["ppid"] == sup.pid and info["sid"] == info["pid"] and info["stdin"] == "/dev/null", info
        assert info["pid"] == spawns[n - 1]["pid"]
        if "agent-supervisor." in str(first["cgroup"]):  # in the run's cgroup, as a Popen'd attempt
            assert info["cgroup"] == first["cgroup"]
    log = (tmp_path / "run" / "agent.log").read_text()
    assert "the value is" in log and SECRET not in log  # the secrets pipe reached the supervisor
    assert _standbys(sup.pid) == []


SELF_BREAKING = """#!{py}
import os, sys
if os.environ["AGENT_SUPERVISOR_ATTEMPT"] == "2":
    os.chmod(__file__, 0o644)  # the next attempt cannot be executed
sys.exit(1)
"""


@pytest.mark.timeout(60)
def test_a_command_that_cannot_be_executed_at_a_restart_fails_as_a_spawn_does(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    agent.write_text(SELF_BREAKING.format(py=PY))
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    with Supervised(tmp_path / "run", [str(agent)], "--no-resume-flag", "--backoff-initial", "0") as sup:
        code = sup.wait(45)
    assert code != 0
    failed = [e for e in sup.events("exit") if e.get("reason") == "spawn-failed"]
    assert failed and failed[0]["code"] == 127 and failed[0]["attempt"] == 3, sup.events("exit")
    assert "attempt 3 could not start: Permission denied" in sup.stderr()
    assert _standbys(sup.pid) == []


@pytest.mark.timeout(60)
def test_a_standby_killed_meanwhile_gives_way_to_popen(tmp_path: Path) -> None:
    agent = _agent(tmp_path, 3)
    with Supervised(tmp_path / "run", [PY, str(agent), str(tmp_path), "kill"], "-q", "--no-resume-flag",
                    "--backoff-initial", "0") as sup:
        assert sup.wait(45) == 0, sup.stderr()
    spawns = sup.events("spawn")
    assert len(spawns) == 3 and not spawns[2].get("standby")  # the standby was gone: Popen
    assert _info(tmp_path, 3)["ppid"] == sup.pid
    assert _standbys(sup.pid) == []


@pytest.mark.timeout(90)
def test_a_standby_that_never_answers_gives_way_to_popen_after_its_deadline(tmp_path: Path) -> None:
    """A stopped (or starved) standby does not stall the supervisor: past ``ANSWER_S`` the attempt is spawned."""
    from supervisor.supervise.standby import ANSWER_S

    agent = _agent(tmp_path, 3)
    with Supervised(tmp_path / "run", [PY, str(agent), str(tmp_path), "stop"], "-q", "--no-resume-flag",
                    "--backoff-initial", "0") as sup:
        assert sup.wait(ANSWER_S + 45) == 0, sup.stderr()
    spawns = sup.events("spawn")
    assert len(spawns) == 3 and not spawns[2].get("standby")
    assert _info(tmp_path, 3)["ppid"] == sup.pid
    assert _standbys(sup.pid) == []  # the stopped one was killed
