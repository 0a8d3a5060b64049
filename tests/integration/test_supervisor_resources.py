"""The supervisor does not abandon a run: junk on the control socket, too many connections, no file
descriptors, a full disk, another writer on the journal. Real supervisors, real sockets, a real tmpfs."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest

from supervisor.core import rundir
from supervisor.core.events import EVENTS
from supervisor.supervise.control import MAX_CONNECTIONS, MAX_REQUEST, _sock_path

from ..conftest import ROOT, clean_env, wait_for
from .supervisor_util import PY, Supervised, alive, helper_agent, kept_full, small_tmpfs

SLEEPER = [PY, "-c", "import time\nwhile True: time.sleep(1)"]


def connect(run_dir: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    with _sock_path(run_dir) as p:
        s.connect(p)
    return s


def status_rtt(run_dir: Path) -> float:
    s = connect(run_dir)
    try:
        t0 = time.perf_counter()
        s.sendall(b'{"cmd": "status"}\n')
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            assert chunk, "closed without an answer"
            buf += chunk
        dt = time.perf_counter() - t0
        assert orjson.loads(buf.split(b"\n")[0])["ok"] is True
        return dt
    finally:
        s.close()


def read_until_closed(s: socket.socket) -> bytes:
    buf = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            buf += chunk
    return buf


@pytest.mark.timeout(60)
def test_junk_on_the_control_socket_is_cut_off_and_does_not_stall_supervision(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Supervised(run_dir, SLEEPER, "-q") as sup:
        wait_for(lambda: sup.try_status().get("state") == "running", timeout=20, what="the agent running")
        baseline = min(status_rtt(run_dir) for _ in range(5))
        junk = connect(run_dir)
        sent = 0
        t0 = time.perf_counter()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            chunk = b"\n" * 65536
            while sent < 4 * 1024 * 1024:
                junk.sendall(chunk)
                sent += len(chunk)
        # the behaviour: one error, then the connection is closed, long before 4 MB were taken
        answer = read_until_closed(junk)
        junk.close()
        assert sent < 4 * 1024 * 1024, "4 MB of blank lines were accepted"
        assert answer.count(b"\n") == 1 and f"longer than {MAX_REQUEST} bytes".encode() in answer
        # a long line without a newline: the same
        long_line = connect(run_dir)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            long_line.sendall(b"x" * (MAX_REQUEST + 65536))
        assert b"longer than" in read_until_closed(long_line)
        long_line.close()
        # and supervision goes on: a status round trip right after, close to the baseline
        after = min(status_rtt(run_dir) for _ in range(3))
        print(f"status round trip {baseline * 1000:.2f} ms before, {after * 1000:.2f} ms after; junk cut after "
              f"{sent} bytes in {time.perf_counter() - t0:.3f} s")
        assert after < max(20 * baseline, 0.25)
        assert sup.proc.poll() is None and sup.status()["state"] == "running"


@pytest.mark.timeout(60)
def test_many_requests_on_one_connection_are_all_answered_in_order(tmp_path: Path) -> None:
    """More requests than one turn of the loop handles (32): the rest are answered on the next turns."""
    run_dir = tmp_path / "run"
    with Supervised(run_dir, SLEEPER, "-q") as sup:
        wait_for(lambda: sup.try_status().get("state") == "running", timeout=20, what="the agent running")
        s = connect(run_dir)
        s.sendall(b'{"cmd": "status"}\n\n  \n' * 100)
        buf = b""
        while buf.count(b"\n") < 100:
            chunk = s.recv(65536)
            assert chunk
            buf += chunk
        s.close()
        assert all(orjson.loads(line)["ok"] for line in buf.splitlines())


@pytest.mark.timeout(60)
def test_idle_connections_never_hide_the_supervisor(tmp_path: Path) -> None:
    """64 idle connections (a slowloris: each sends a byte now and then, never a line) hold every slot: a new one
    makes room by closing the longest idle, so ``status`` still answers live and ``stop`` stops (issue 28, item 7:
    it said no supervisor runs and ``stop`` exited 0 with "nothing to stop"). Descriptors stay bounded."""
    run_dir = tmp_path / "run"
    with Supervised(run_dir, SLEEPER, "-q") as sup:
        wait_for(lambda: sup.try_status().get("state") == "running", timeout=20, what="the agent running")
        socks = [connect(run_dir) for _ in range(MAX_CONNECTIONS)]
        try:
            wait_for(lambda: len(psutil.Process(sup.pid).net_connections(kind="unix")) >= MAX_CONNECTIONS,
                     timeout=10, what="the connections accepted")
            for s in socks[::2]:
                s.sendall(b"{")  # half of them trickle bytes: still no whole request
            fds_at_limit = psutil.Process(sup.pid).num_fds()
            for _ in range(100):
                assert status_rtt(run_dir) < 5  # answered, never "too many"
            assert psutil.Process(sup.pid).num_fds() <= fds_at_limit + 2
            st = subprocess.run([PY, "-m", "supervisor", "status", str(run_dir), "--json"], capture_output=True,
                                text=True, timeout=30, env=clean_env())
            assert st.returncode == 0, st.stderr
            assert orjson.loads(st.stdout)["live"] is True
            stop = subprocess.run([PY, "-m", "supervisor", "stop", str(run_dir)], capture_output=True, text=True,
                                  timeout=45, env=clean_env())
            assert stop.returncode == 0 and "stopped" in stop.stdout, (stop.stdout, stop.stderr)
            assert "nothing to stop" not in stop.stderr
        finally:
            for s in socks:
                s.close()
        assert sup.wait(timeout=30) == 0


def _set_nofile(pid: int, soft: int) -> tuple[int, int]:
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, old[1]))
    return old


@pytest.mark.timeout(60)
def test_out_of_descriptors_the_supervisor_keeps_supervising(tmp_path: Path) -> None:
    """RLIMIT_NOFILE lowered under the supervisor's feet: accept fails, a restart fails; it waits, then goes on."""
    run_dir = tmp_path / "run"
    script = "import os, time\nif os.environ['AGENT_SUPERVISOR_ATTEMPT'] == '1':\n    time.sleep(600)\n"
    with Supervised(run_dir, [PY, "-c", script], "--backoff-initial", "0.05", "--give-up-after", "2") as sup:
        st = wait_for(lambda: (lambda s: s if s.get("state") == "running" else None)(sup.try_status()),
                      timeout=20, what="the agent running")
        agent = st["pid"]  # type: ignore[index]
        try:
            old = _set_nofile(sup.pid, 3)  # not one more descriptor: lower than those open
        except (PermissionError, OSError) as e:
            pytest.skip(f"cannot lower another process's RLIMIT_NOFILE here: {e}")
        try:
            # control connections: accept fails with EMFILE; the supervisor pauses accepting, it does not exit
            for _ in range(20):
                with contextlib.suppress(OSError):
                    connect(run_dir).close()
            # the agent crashes: the restart cannot make pipes; no attempt is counted, no give-up
            os.kill(agent, signal.SIGKILL)
            wait_for(lambda: "starting the agent failed: Too many open files" in sup.stderr(), timeout=20,
                     what="the spawn failure said on stderr")
            wait_for(lambda: len(sup.events("backoff")) >= 3, timeout=20, what="three backoffs")
            assert sup.proc.poll() is None, sup.stderr()
            assert "accepting a control connection" in sup.stderr()
            assert not sup.events("give-up")
        finally:
            resource.prlimit(sup.pid, resource.RLIMIT_NOFILE, old)
        # descriptors are back: attempt 2 starts and succeeds
        assert sup.wait(30) == 0, sup.stderr()
    spawns = sup.events("spawn")
    assert [s["attempt"] for s in spawns] == [1, 2]
    assert any(str(b.get("reason", "")).startswith("resources") for b in sup.events("backoff"))
    assert rundir.read_run_json(run_dir)["status"] == "succeeded"
    if "resource-error" in EVENTS:
        errs = [e for ev in sup.events("resource-error") for e in ev["errors"]]
        assert {e["errno"] for e in errs} >= {"EMFILE"}


@pytest.mark.timeout(60)
def test_disk_full_the_supervisor_keeps_supervising_and_writes_everything_once_space_is_back(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", "2m") as mnt:
        run_dir = mnt / "run"
        go1, go2 = tmp_path / "go1", tmp_path / "go2"
        script = (
            "import os, sys, time\n"
            "if os.environ['AGENT_SUPERVISOR_ATTEMPT'] == '1':\n"
            f"    while not os.path.exists({str(go1)!r}):\n        time.sleep(0.02)\n"
            "    for i in range(3000):\n        print('output line', i, 'x' * 100)\n"
            "    sys.exit(3)\n"
            f"if not os.path.exists({str(go2)!r}):\n    time.sleep(0.05)\n    sys.exit(3)\n"
        )
        opts = ("--backoff-initial", "0.02", "--backoff-max", "0.05", "--rollback-after", "0", "--give-up-after", "10000")
        sup = Supervised(run_dir, [PY, "-c", script], *opts, out_dir=tmp_path)  # its own output off the full disk
        with sup:
            wait_for(lambda: sup.try_status().get("state") == "running", timeout=20, what="the agent running")
            with kept_full(mnt / "filler"):
                go1.touch()
                # attempt 1 prints 300 KB (agent.log cannot take it) and exits 3; later attempts exit 3 at once:
                # soon the events cannot be written either (tmpfs fills the file's last page first)
                wait_for(lambda: "writing supervisor.jsonl failed: No space left on device" in sup.stderr(),
                         timeout=30, what="an event write failing")
                # the supervisor goes on: more attempts run, their events wait in memory
                live = sup.status()["attempt"]
                wait_for(lambda: sup.status()["attempt"] >= live + 2, timeout=20, what="two more attempts")
                assert "writing agent.log failed: No space left on device" in sup.stderr()
                assert sup.events("spawn")[-1]["attempt"] < sup.status()["attempt"]
                live_errors = sup.status()["resource_errors"]
                assert live_errors["writing supervisor.jsonl: ENOSPC"] >= 1
                r = subprocess.run([PY, "-m", "supervisor", "status", str(run_dir)], capture_output=True, text=True,
                                   timeout=30, env=clean_env(), cwd=ROOT, check=True)
                assert "resources  writing supervisor.jsonl: ENOSPC failed" in r.stdout, r.stdout
            # space is back: the events are written, in order, and run.json catches up
            wait_for(lambda: sup.events("spawn")[-1]["attempt"] >= live + 2, timeout=20,
                     what="the deferred events written")
            go2.touch()
            assert sup.wait(30) == 0, sup.stderr()
        spawns = [e["attempt"] for e in sup.events("spawn")]
        assert spawns == list(range(1, len(spawns) + 1))  # none lost, none twice, in order
        assert rundir.read_run_json(run_dir)["attempts"] == spawns[-1]
        names = [e["event"] for e in sup.events()]
        # the resource-error summary is written once space is back, possibly after the end
        ends = [n for n in names if n != "resource-error"]
        assert ends[:2] == ["supervisor-start", "spawn"] and "exit" in ends and ends[-1] == "succeeded", names
        exit1 = sup.events("exit")[0]
        assert exit1["attempt"] == 1 and exit1["code"] == 3
        # every line of both files is whole (the torn part of a failed write was cut off)
        for name in (rundir.SUPERVISOR_EVENTS, rundir.AGENT_LOG):
            data = (run_dir / name).read_bytes()
            assert data.endswith(b"\n")
            if name == rundir.SUPERVISOR_EVENTS:
                for line in data.splitlines():
                    orjson.loads(line)
        assert rundir.read_run_json(run_dir)["status"] == "succeeded"
        if "resource-error" in EVENTS:
            errs = [e for ev in sup.events("resource-error") for e in ev["errors"]]
            assert "ENOSPC" in {e["errno"] for e in errs}
            assert any(ev.get("agent_log_bytes_lost") for ev in sup.events("resource-error"))


@pytest.mark.timeout(60)
def test_another_writers_steps_are_not_the_attempts_progress(tmp_path: Path) -> None:
    """An agent run by hand takes the journal during a backoff: the supervised attempts fail on its lock and are
    crashes (backoff, give-up), not credited with its steps (27 instant restarts in 6 s before)."""
    run_dir = tmp_path / "run"
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "if os.environ['AGENT_SUPERVISOR_ATTEMPT'] == '1':\n    sys.exit(3)\n"
        "from supervisor import Run\n"
        "with Run.open() as run:\n    run.step('mine', lambda: 1)\n"
    )
    opts = ("--backoff-initial", "0.6", "--backoff-factor", "1", "--backoff-jitter", "0", "--rollback-after", "0",
            "--give-up-after", "4")
    holder: subprocess.Popen[bytes] | None = None
    try:
        with Supervised(run_dir, [PY, "-c", script], *opts) as sup:
            sup.wait_event("backoff")
            env = clean_env()
            env["AGENT_SUPERVISOR_RUN_DIR"] = str(run_dir)  # the run directory, as a person would pass it
            holder = subprocess.Popen([*helper_agent("lockholder", "30")], env=env, cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(lambda: (run_dir / "lockholder.txt").exists(), timeout=20, what="the other writer")
            rc = sup.wait(30)
        assert rc == 1, sup.stderr()
        exits = sup.events("exit")
        assert len(exits) == 4 and all(e["progress"] == 0 for e in exits), exits
        assert all(e["code"] not in (0, None) for e in exits)
        assert len(sup.events("backoff")) == 3
        assert [r["reason"] for r in sup.events("restart")] == ["crash"] * 3
        assert sup.events("give-up")
        assert holder.poll() is None  # it was never ours to stop
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()


@pytest.mark.timeout(60)
def test_an_agent_behind_sh_is_credited_with_its_own_steps(tmp_path: Path) -> None:
    """The start record's pid is the python under ``sh -c``, a descendant of the attempt: its steps count."""
    run_dir = tmp_path / "run"
    script = (
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from supervisor import Run\n"
        "with Run.open() as run:\n"
        "    run.step('s', lambda: 1)\n"
        "    time.sleep(0.3)\n"
        "    if os.environ['AGENT_SUPERVISOR_ATTEMPT'] == '1':\n        os._exit(1)\n"
        "    run.step('t', lambda: 2)\n"
    )
    cmd = ["sh", "-c", f'"{PY}" -c "$0"; exit $?', script]
    with Supervised(run_dir, cmd, "--backoff-initial", "5") as sup:
        assert sup.wait(30) == 0, sup.stderr()
    exits = sup.events("exit")
    assert exits[0]["code"] == 1 and exits[0]["progress"] == 1
    assert not sup.events("backoff")  # progress: restarted at once
    assert sys.platform == "linux" and not alive(exits[0]["pid"])


@pytest.mark.timeout(60)
def test_a_full_disk_at_the_start_is_not_bad_input(tmp_path: Path) -> None:
    """Nothing can be written at the start: one line that says so, exit 75 (EX_TEMPFAIL), not 2 ("bad input")."""
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        run_dir = mnt / "run"
        run_dir.mkdir(mode=0o700)
        with kept_full(mnt / "filler"):
            r = subprocess.run([PY, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), "--", "true"],
                               capture_output=True, text=True, timeout=30, env=clean_env(), cwd=ROOT)
    assert r.returncode == 75, r.stderr
    assert r.stderr.count("\n") == 1 and "No space left on device" in r.stderr and "Traceback" not in r.stderr
    assert "run the same command again" in r.stderr


@pytest.mark.timeout(60)
def test_the_final_status_waits_for_space_then_is_written(tmp_path: Path) -> None:
    """The agent succeeds on a full disk: the end is retried (not lost, not a traceback) and written once space is back."""
    with small_tmpfs(tmp_path / "mnt", "2m") as mnt:
        run_dir = mnt / "run"
        go = tmp_path / "go"
        script = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.02)\n"
        with Supervised(run_dir, [PY, "-c", script], out_dir=tmp_path) as sup:
            wait_for(lambda: sup.try_status().get("state") == "running", timeout=20, what="the agent running")
            with kept_full(mnt / "filler"):
                # a few events first, so the event file's last page is full too
                for _ in range(40):
                    sup.request({"cmd": "pause"})
                    sup.request({"cmd": "resume"})
                go.touch()
                wait_for(lambda: "writing the final status to run.json failed" in sup.stderr(), timeout=20,
                         what="the final status failing to be written")
                assert sup.proc.poll() is None  # still trying
            assert sup.wait(20) == 0, sup.stderr()
        assert rundir.read_run_json(run_dir)["status"] == "succeeded"
        assert sup.events()[-1]["event"] in ("succeeded", "resource-error")
        assert sup.events("succeeded")
