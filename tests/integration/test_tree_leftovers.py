"""Daemons that clear their environment, without a cgroup, when the supervisor is killed with -9.

The agent keeps double-forking daemons (``setsid``, an empty environment, the
parent gone: only the supervisor's look at its adopted orphans knows them) and
each daemon keeps forking children of its own. Without a cgroup
(``AGENT_SUPERVISOR_NO_CGROUP=1``) the guardian knows the tree from the kernel's
fork events where it may (root), and the lock records the tree the supervisor
last saw, so the next ``supervise`` stops it after the guardian died too.

Every process of the test carries a token in its argv: the test counts survivors
by it and kills them all at the end, whatever happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import orjson
import psutil
import pytest

from supervisor.core import rundir

from ..conftest import ROOT, clean_env, wait_for
from .supervisor_util import PY, Supervised, alive, guardian_of

FAST = ("--backoff-initial", "0.05", "--backoff-max", "0.2", "--stop-grace", "3")

_DAEMON = """
import os, sys, time
out, children = sys.argv[1], int(sys.argv[3])
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
def note(kind):
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, f"{kind} {os.getpid()}\\n".encode())
    os.close(fd)
note("daemon")
for _ in range(children):  # the fork loop: children that leave the session too
    if os.fork() == 0:
        os.setsid()
        note("child")
        while True:
            time.sleep(1)
    time.sleep(0.03)
while True:
    time.sleep(1)
"""

_AGENT = """
import os, subprocess, sys, time
if os.environ.get("AGENT_SUPERVISOR_ATTEMPT", "1") != "1":
    sys.exit(0)
daemon, out, token, count, children = sys.argv[1:6]
n = 0
while int(count) == 0 or n < int(count):
    subprocess.run([sys.executable, daemon, out, token, children], env={}, start_new_session=True,
                   stdin=subprocess.DEVNULL, check=True)
    n += 1
    time.sleep(0.02)
while True:
    time.sleep(1)
"""


class ForkLoop:
    """The agent's files, its token, and the processes that carry the token."""

    def __init__(self, tmp_path: Path, daemons: int, children: int, py: str = PY) -> None:
        self.token = f"t14-{os.getpid()}-{os.urandom(4).hex()}"
        self.out = tmp_path / "pids.txt"
        daemon, agent = tmp_path / "daemon.py", tmp_path / "agent.py"
        daemon.write_text(_DAEMON)
        agent.write_text(_AGENT)
        self.cmd = [py, str(agent), str(daemon), str(self.out), self.token, str(daemons), str(children)]

    def pids(self, kind: str = "daemon") -> list[int]:
        try:
            lines = self.out.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [int(p) for k, p in (ln.split() for ln in lines if ln.count(" ") == 1) if k == kind]

    def survivors(self) -> list[int]:
        found = []
        for p in psutil.process_iter(["cmdline"]):
            if self.token in (p.info["cmdline"] or []) and alive(p.pid):
                found.append(p.pid)
        return found

    def kill_all(self) -> None:
        """Stop every process of the test (repeated: a daemon may fork while the others die)."""
        for _ in range(50):
            left = self.survivors()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # gone meanwhile


def _env() -> dict[str, str]:
    env = clean_env()
    env["AGENT_SUPERVISOR_NO_CGROUP"] = "1"
    return env


def _proc_connector() -> bool:
    """Whether this process may listen to the kernel's fork events (the guardian's real-time path)."""
    from supervisor.supervise.guardian import ForkWatch

    watch = ForkWatch.open()
    if watch is None:
        return False
    watch.close()
    return True


def _wait_gone(pid: int) -> None:
    wait_for(lambda: not alive(pid), timeout=20, what=f"process {pid} to end")


@pytest.mark.timeout(60)
def test_guardian_stops_daemons_born_just_before_a_kill_9(tmp_path: Path) -> None:
    """Daemons keep coming; the supervisor is killed right after one is born: the guardian leaves none."""
    if not _proc_connector():
        pytest.skip("no proc connector here (not root): the guardian polls, with a window of about 1 s")
    loop = ForkLoop(tmp_path, daemons=0, children=20)
    sup = Supervised(tmp_path / "run", loop.cmd, *FAST, env=_env())
    try:
        guardian = guardian_of(sup.pid)
        wait_for(lambda: len(loop.pids()) >= 4, timeout=20, what="4 daemons")
        seen = len(loop.pids())
        wait_for(lambda: len(loop.pids()) > seen, timeout=20, what="one more daemon")  # born a moment ago
        sup.kill()
        _wait_gone(guardian)
        assert "died without stopping its agent" in sup.stderr()
        assert loop.survivors() == []
    finally:
        sup.kill()
        loop.kill_all()


def _recorded_tree(run_dir: Path) -> set[int]:
    try:
        info = orjson.loads((run_dir / rundir.SUPERVISOR_LOCK).read_bytes().strip() or b"null")
    except (FileNotFoundError, orjson.JSONDecodeError):
        return set()
    return {int(item.split(":")[0]) for item in (info or {}).get("tree") or []}


@pytest.mark.timeout(60)
def test_next_supervise_stops_the_recorded_daemons_and_their_children(tmp_path: Path) -> None:
    """Supervisor and guardian killed with -9: the lock's tree (and what it forked since) is stopped next time."""
    loop = ForkLoop(tmp_path, daemons=3, children=1000)
    run_dir = tmp_path / "run"
    sup = Supervised(run_dir, loop.cmd, *FAST, env=_env())
    try:
        guardian = guardian_of(sup.pid)
        daemons = wait_for(lambda: len(loop.pids()) == 3 and loop.pids(), timeout=20, what="3 daemons")
        wait_for(lambda: set(daemons) <= _recorded_tree(run_dir), timeout=20, what="the daemons in the lock")
        agent = sup.events("spawn")[0]["pid"]
        os.kill(guardian, signal.SIGKILL)
        sup.kill()
        _wait_gone(agent)
        wait_for(lambda: len(loop.pids("child")) >= 6, timeout=20, what="the daemons' children")
        assert len(loop.survivors()) >= 9  # nobody stopped the daemons: they go on forking
        with Supervised(run_dir, None, *FAST, env=_env()) as again:
            assert again.wait(30) == 0, again.stderr()
        assert set(daemons) <= set(again.events("supervisor-start")[-1]["leftovers_stopped"])
        assert loop.survivors() == []
    finally:
        sup.kill()
        loop.kill_all()


@pytest.mark.timeout(60)
def test_unprivileged_guardian_stops_the_told_daemons_and_what_they_forked_since() -> None:
    """Not root (no fork events): the daemons of the last ``tree`` line, and their children born after it, die."""
    # the system's python of our version, with the venv's packages: the venv's own may sit where nobody can read
    py = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.getuid() != 0 or not shutil.which("setpriv") or not os.access(py, os.X_OK):
        pytest.skip(f"needs root, setpriv and {py} to run the supervisor as an unprivileged user")
    with tempfile.TemporaryDirectory(prefix="t14-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o777)
        loop = ForkLoop(base, daemons=3, children=1000, py=py)
        run_dir = base / "run"
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                py, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), *FAST, "--", *loop.cmd]
        env = _env()
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        err = base / "sup.err"
        with open(err, "wb") as f:
            sup = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=f, env=env, cwd=ROOT)
        try:
            guardian = guardian_of(sup.pid)
            daemons = wait_for(lambda: len(loop.pids()) == 3 and loop.pids(), timeout=20, what="3 daemons")
            wait_for(lambda: set(daemons) <= _recorded_tree(run_dir), timeout=20, what="the daemons told")
            told = len(loop.pids("child"))
            wait_for(lambda: len(loop.pids("child")) >= told + 3, timeout=20, what="children born since")
            sup.kill()
            _wait_gone(guardian)
            assert "died without stopping its agent" in err.read_text(), err.read_text()
            assert loop.survivors() == []
        finally:
            sup.kill()
            sup.wait()
            loop.kill_all()


def test_a_reused_pid_in_the_lock_is_not_killed(tmp_path: Path) -> None:
    """A recorded pid whose start time differs is another process now: left alone."""
    from supervisor.supervise.lock import kill_recorded_tree

    other = psutil.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        killed = kill_recorded_tree({"tree": [f"{other.pid}:1", "notapid", f"{os.getpid()}:x"]})
        assert killed == [] and alive(other.pid)
    finally:
        other.kill()
        other.wait()


def _event(what: int, *ids: int) -> bytes:
    """A proc connector message as the kernel sends it: headers, ``what``, cpu, time, then the event's ids."""
    body = struct.pack("=IIQ", what, 0, 0) + struct.pack(f"={len(ids)}I", *ids).ljust(24, b"\0")
    return struct.pack("=IHHII", 16 + 20 + len(body), 3, 0, 0, 0) + struct.pack("=IIIIHH", 1, 1, 0, 0, len(body), 0) + body


def test_fork_events_follow_the_tree_only() -> None:
    """Forks from a tracked process are kept (threads not), exits end them; a late root gets its earlier forks."""
    from supervisor.supervise import guardian as g

    procs = [psutil.Popen([PY, "-c", "import time; time.sleep(60)"]) for _ in range(3)]
    a, b, c = (p.pid for p in procs)
    me = os.getpid()
    try:
        watch = g.ForkWatch(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))  # events fed by hand
        watch.take(_event(g.PROC_EVENT_FORK, 1, 1, me, me))  # our own birth, before anyone is tracked
        watch.take(_event(g.PROC_EVENT_FORK, me, me, a, a))  # we fork a
        watch.take(_event(g.PROC_EVENT_EXIT, b, b))  # an earlier process with b's pid ends...
        watch.take(_event(g.PROC_EVENT_FORK, b, b, c, me))  # (a thread: ignored)
        watch.take(_event(g.PROC_EVENT_FORK, me, me, 999999, 999999))  # a child gone before we looked
        assert watch.tree == {}
        watch.add(me)  # told late: what it forked since its birth is taken from the recent forks
        assert set(watch.tree) == {me, a, 999999} and watch.tree[999999] == g.GONE
        watch.take(_event(g.PROC_EVENT_FORK, 999999, 999999, b, b))  # the gone one's fork, reported after
        watch.take(_event(g.PROC_EVENT_EXIT, 999999, 999999))
        assert set(watch.tree) == {me, a, b}
        watch.take(_event(g.PROC_EVENT_FORK, 4242, 4242, c, c))  # an untracked parent's child: not ours
        watch.take(_event(g.PROC_EVENT_EXIT, a, a))
        assert set(watch.tree) == {me, b}
        watch.close()
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_lock_keeps_as_much_of_a_large_tree_as_fits(tmp_path: Path) -> None:
    """Thousands of processes: the first (the roots) are kept, the file stays one valid JSON object."""
    from supervisor.supervise.lock import SupervisorLock

    tmp_path.chmod(0o700)
    lock = SupervisorLock(tmp_path)
    assert lock.acquire() is None
    try:
        items = [f"{100000 + i}:{123456789 + i}" for i in range(5000)]
        lock.record_tree(items)
        kept = orjson.loads((tmp_path / rundir.SUPERVISOR_LOCK).read_bytes())["tree"]
        assert 100 < len(kept) < len(items) and kept == items[: len(kept)]
        lock.clear_child()
        assert "tree" not in orjson.loads((tmp_path / rundir.SUPERVISOR_LOCK).read_bytes())
    finally:
        lock.release()
