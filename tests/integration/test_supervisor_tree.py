"""Process-tree cleanup with real process trees that escape the agent's group and session.

Each test runs twice: with the run's cgroup v2 (skipped where this machine has
no writable one) and without (``AGENT_SUPERVISOR_NO_CGROUP=1``: the process
group, the session, the subreaper sweep and the guardian only), so both paths of
``process.py`` are proven on every machine that has a cgroup, and the fallback
on every machine.

The tree (``supervisor_agent.py tree``): a setsid child A that starts its own
setsid child B, and a double-forked daemon D with an empty environment.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import orjson
import psutil
import pytest

from supervisor.core import rundir
from supervisor.supervise.process import CGROUP_PREFIX, Cgroup, cgroup2_base

from ..conftest import clean_env, wait_for
from .supervisor_util import (
    PY,
    TEST_AGENT,
    Supervised,
    alive,
    guardian_of,
    helper_agent,
    kill_pids,
)

FAST = ("--backoff-initial", "0.05", "--backoff-max", "0.2", "--stop-grace", "3")


def _cgroup_works() -> bool:
    cg = Cgroup.create(f"{CGROUP_PREFIX}.probe.{os.getpid()}")
    if cg is None:
        return False
    cg.remove()
    return True


CGROUP = _cgroup_works()


@pytest.fixture(params=["cgroup", "subreaper"])
def mode(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    env = clean_env()
    if request.param == "cgroup":
        if not CGROUP:
            pytest.skip("no writable cgroup v2 here (the subreaper variant still runs)")
    else:
        env["AGENT_SUPERVISOR_NO_CGROUP"] = "1"
    return request.param, env


def tree_pids(run_dir: Path) -> list[int]:
    """A, B and D, once all three wrote their pid (the chain's line "A B" and the daemon's "D", in either order)."""
    path = run_dir / "tree.txt"
    text = wait_for(lambda: path.exists() and len(path.read_text().split()) >= 3 and path.read_text(),
                    timeout=20, what="tree.txt with 3 pids")
    return [int(x) for x in str(text).split()]


def in_run_cgroup(pid: int) -> bool:
    try:
        return f"/{CGROUP_PREFIX}." in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def leftover_cgroups(sup_pid: int) -> list[Path]:
    base = cgroup2_base()
    return list(base.glob(f"{CGROUP_PREFIX}.{sup_pid}.*")) if base is not None else []


@pytest.mark.timeout(60)
def test_tree_is_gone_after_a_crash_and_after_a_normal_exit(tmp_path: Path, mode: tuple[str, dict[str, str]]) -> None:
    """Attempt 1 leaves the tree and crashes; its sweep stops all of it, B and D included."""
    _, env = mode
    run_dir = tmp_path / "run"
    pids: list[int] = []
    try:
        with Supervised(run_dir, helper_agent("tree", "crash"), *FAST, env=env) as sup:
            pids = tree_pids(run_dir)
            assert sup.wait(30) == 0, sup.stderr()
            assert [p for p in pids if alive(p)] == []
            crash = sup.events("exit")[0]
            assert crash["code"] == 1 and set(pids) <= set(crash["leftovers_killed"])
            assert leftover_cgroups(sup.pid) == []
        # a normal exit (code 0) that leaves the tree behind: swept as well
        run2 = tmp_path / "run2"
        with Supervised(run2, helper_agent("tree", "exit"), *FAST, env=env) as sup2:
            more = tree_pids(run2)
            pids += more
            assert sup2.wait(30) == 0, sup2.stderr()
            assert [p for p in more if alive(p)] == []
            assert rundir.read_run_json(run2)["status"] == "succeeded"
            assert leftover_cgroups(sup2.pid) == []
    finally:
        kill_pids(pids)


@pytest.mark.timeout(60)
def test_tree_is_gone_after_a_sigterm_stop(tmp_path: Path, mode: tuple[str, dict[str, str]]) -> None:
    name, env = mode
    run_dir = tmp_path / "run"
    pids: list[int] = []
    with Supervised(run_dir, helper_agent("tree", "sleep"), *FAST, env=env) as sup:
        try:
            pids = tree_pids(run_dir)
            agent = sup.events("spawn")[0]["pid"]
            assert all(alive(p) for p in pids)
            # the cgroup holds the whole tree, whatever sessions it made (and only there)
            assert all(in_run_cgroup(p) for p in [agent, *pids]) is (name == "cgroup")
            sup.proc.send_signal(signal.SIGTERM)
            assert sup.wait(30) == 128 + signal.SIGTERM
            assert [p for p in [agent, *pids] if alive(p)] == []
            assert rundir.read_run_json(run_dir)["status"] == "stopped"
            assert leftover_cgroups(sup.pid) == []
        finally:
            kill_pids(pids)


@pytest.mark.timeout(60)
def test_agent_behind_sh_dies_with_a_supervisor_killed_by_sigkill(tmp_path: Path, mode: tuple[str, dict[str, str]]) -> None:
    """PDEATHSIG reaches only ``sh``: the guardian stops the python agent under it and the escaped tree."""
    _, env = mode
    run_dir = tmp_path / "run"
    cmd = ["sh", "-c", f'"{PY}" "{TEST_AGENT}" tree sleep "$@"; exit $?', "sh"]
    sup = Supervised(run_dir, cmd, *FAST, env=env)
    pids: list[int] = []
    try:
        pids = tree_pids(run_dir)
        sh = sup.events("spawn")[0]["pid"]
        agent = [c.pid for c in psutil.Process(sh).children()]
        assert len(agent) == 1
        pids += agent
        # the supervisor has looked at the tree once (the guardian learns of D, outside any session, that way)
        wait_for(lambda: sup.try_status().get("processes", 0) >= 5, timeout=10, what="a sample of the whole tree")
        sup.kill()
        wait_for(lambda: not [p for p in [sh, *pids] if alive(p)], timeout=10,
                 what=f"the tree to die with its supervisor: {[p for p in [sh, *pids] if alive(p)]}")
        # the guardian said so, and the cgroup is gone
        wait_for(lambda: "died without stopping its agent" in sup.stderr(), timeout=10, what="the guardian's line")
        wait_for(lambda: leftover_cgroups(sup.pid) == [], timeout=10, what="the cgroup removed")
        # the run resumes (no leftovers to stop: the guardian stopped them)
        with Supervised(run_dir, None, *FAST, env=env) as again:
            assert again.wait(30) == 0, again.stderr()
        assert again.events("supervisor-start")[-1]["leftovers_stopped"] == []
    finally:
        sup.kill()
        kill_pids(pids)


@pytest.mark.timeout(60)
def test_next_supervise_stops_what_a_dead_supervisor_and_guardian_left(tmp_path: Path, mode: tuple[str, dict[str, str]]) -> None:
    """Supervisor and guardian both killed with -9: the next ``supervise`` finds the tree (cgroup, session, env, lock)."""
    name, env = mode
    run_dir = tmp_path / "run"
    sup = Supervised(run_dir, helper_agent("tree", "sleep"), *FAST, env=env)
    pids: list[int] = []
    try:
        pids = tree_pids(run_dir)
        agent = sup.events("spawn")[0]["pid"]
        lines = [ln.split() for ln in (run_dir / "tree.txt").read_text().splitlines()]
        a, b = (int(x) for x in next(ln for ln in lines if len(ln) == 2))  # the setsid chain (in either order)
        d = int(next(ln for ln in lines if len(ln) == 1)[0])  # the daemon
        if name != "cgroup":  # without one, D is known by the tree the supervisor saw and recorded in the lock
            lock = run_dir / rundir.SUPERVISOR_LOCK
            wait_for(lambda: f"{d}:" in str(orjson.loads(lock.read_bytes()).get("tree")), timeout=10,
                     what="the daemon in the tree recorded in the lock")
        os.kill(guardian_of(sup.pid), signal.SIGKILL)
        sup.kill()
        wait_for(lambda: not alive(agent), timeout=10, what="the agent to die with its supervisor (PDEATHSIG)")
        assert all(alive(p) for p in pids)  # nobody stopped the rest yet
        with Supervised(run_dir, None, *FAST, env=env) as again:
            assert again.wait(30) == 0, again.stderr()
        stopped = set(again.events("supervisor-start")[-1]["leftovers_stopped"])
        # A and B carry the run's environment; D only the cgroup, or the tree recorded in the lock, can find
        assert {a, b, d} <= stopped
        assert [p for p in (a, b, d) if alive(p)] == []
        assert leftover_cgroups(sup.pid) == []
    finally:
        sup.kill()
        kill_pids(pids)
