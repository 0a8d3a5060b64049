"""Unit tests of the supervisor's parts: states, policy, sizes, lock, leftovers, agent log, events, control socket."""

from __future__ import annotations

import contextlib
import os
import random
import selectors
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import rundir
from supervisor.core.events import EventLog, read_events
from supervisor.core.redact import Redactor
from supervisor.supervise.agentlog import AgentLog
from supervisor.supervise.control import (
    ControlClient,
    ControlServer,
    ControlUnavailable,
)
from supervisor.supervise.lock import (
    LockedError,
    SupervisorLock,
    find_leftovers,
    stop_processes,
)
from supervisor.supervise.metrics import TreeSampler, parse_size
from supervisor.supervise.policy import Options, backoff_delay, is_progress
from supervisor.supervise.process import stop_tree
from supervisor.supervise.states import (
    ENTRY_EVENTS,
    InvalidTransition,
    ProcessState,
    StateChange,
    StateMachine,
    StopRequest,
)

from ..conftest import wait_for
from ..integration.supervisor_util import alive, kill_pids

S = ProcessState


def test_state_machine_guards_and_notifies() -> None:
    seen: list[StateChange] = []
    sm = StateMachine(listeners=[seen.append])
    sm.change(S.RUNNING, pid=1)
    sm.change(S.BACKOFF, delay_s=0.5)
    sm.change(S.PAUSED)
    with pytest.raises(InvalidTransition, match="from paused to running"):
        sm.change(S.RUNNING)
    sm.change(S.STARTING)
    sm.change(S.RUNNING)
    sm.change(S.SUCCEEDED)
    assert sm.state.terminal
    with pytest.raises(InvalidTransition, match="from succeeded to starting"):
        sm.change(S.STARTING)
    assert [(c.old.value, c.new.value) for c in seen] == [
        ("starting", "running"), ("running", "backoff"), ("backoff", "paused"),
        ("paused", "starting"), ("starting", "running"), ("running", "succeeded"),
    ]
    assert seen[0].info == {"pid": 1}
    assert {s.value for s in S} == {"starting", "running", "backoff", "stopping", "stopped", "paused", "succeeded", "failed"}


def test_every_state_change_records_its_event() -> None:
    from supervisor.core.events import EVENTS

    assert set(ENTRY_EVENTS) == set(S) and {e for e in ENTRY_EVENTS.values() if e} <= EVENTS
    seen: list[tuple[str | None, dict]] = []
    sm = StateMachine(listeners=[lambda ch: seen.append((ch.event, ch.info))])
    sm.change(S.RUNNING, pid=7, argv=["a"], resume=False)
    first = sm.stop(StopRequest("hang"), event="hang", pid=7, idle_s=1.0)
    assert first is None and sm.state is S.STOPPING and sm.pending == StopRequest("hang")
    assert sm.stop(StopRequest("stop")) == StopRequest("hang")  # already stopping: the request is replaced
    assert sm.take_pending() == StopRequest("stop") and sm.pending is None
    sm.change(S.BACKOFF, delay_s=0.5, attempts_without_progress=1)
    assert sm.backoff_s == 0.5 and sm.backoff_until is not None and sm.backoff_until - sm.since == 0.5
    assert sm.set_paused(True) and not sm.set_paused(True)  # the backoff is cut short into PAUSED
    assert sm.state is S.PAUSED and sm.backoff_until is None
    assert sm.set_paused(False)
    sm.change(S.STARTING, reason="resume", resume=True)
    with pytest.raises(InvalidTransition, match="records 'spawn', not 'hang'"):
        sm.change(S.RUNNING, event="hang")
    sm.change(S.RUNNING, pid=8, argv=["a"], resume=True)
    sm.change(S.SUCCEEDED, status="succeeded", restarts=1)
    assert [e for e, _ in seen] == ["spawn", "hang", "backoff", "pause", None, "resume", "restart", "spawn", "succeeded"]
    assert seen[1][1] == {"pid": 7, "idle_s": 1.0} and seen[-1][1] == {"status": "succeeded", "restarts": 1}


def test_stop_tree_signals_the_group_then_kills_and_logs_each_step() -> None:
    import signal as sig

    stubborn = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        lines: list[str] = []
        assert stop_tree([parent], 0.3, pgid=parent.pid, log=lines.append, what="agent") == []
        assert parent.wait(5) == -sig.SIGKILL  # SIGTERM was ignored: SIGKILL after the grace period
        assert not alive(grandchild)  # the group's other member went with the SIGTERM
        assert lines[0] == f"stopping process group {parent.pid} (agent [{parent.pid}]): SIGTERM, up to 0.3 s, then SIGKILL"
        assert "still running after 0.3 s: SIGKILL" in lines[1] and lines[2].endswith("killed")
        quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        lines.clear()
        assert stop_tree([quiet], 5.0, log=lines.append) == []
        assert quiet.returncode == -sig.SIGTERM and "exited" in lines[-1] and len(lines) == 2
        assert stop_tree([], 1.0, log=lines.append) == [] and len(lines) == 2  # nothing to stop: no log
    finally:
        kill_pids([parent.pid])
        parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]


def test_backoff_grows_is_capped_and_jittered() -> None:
    o = Options(backoff_initial=0.5, backoff_max=4.0, backoff_factor=2.0, backoff_jitter=0.0)
    assert [backoff_delay(o, n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    o.backoff_jitter = 0.25
    rng = random.Random(7)
    delays = [backoff_delay(o, 2, rng) for _ in range(200)]
    assert min(delays) >= 0.75 and max(delays) <= 1.25 and len(set(delays)) > 50
    assert max(backoff_delay(o, 10, rng) for _ in range(100)) <= 4.0


def test_progress_is_a_successful_step_or_a_checkpoint() -> None:
    assert is_progress({"kind": "step", "output": 1})
    assert is_progress({"step": "x", "output": 1})  # a hand-written line: kind absent means step
    assert is_progress({"kind": "checkpoint", "name": "c"})
    assert not is_progress({"kind": "step", "error": {"message": "boom"}})
    for kind in ("start", "begin", "note", "rollback"):
        assert not is_progress({"kind": kind})


def test_parse_size() -> None:
    assert parse_size("512M") == 512 * 2**20
    assert parse_size("2G") == 2 * 2**30
    assert parse_size("1.5GiB") == int(1.5 * 2**30)
    assert parse_size("100") == 100
    assert parse_size("64kb") == 64 * 1024
    for bad in ("", "lots", "-1M", "12Q", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)


# --------------------------------------------------------------------------- lock and leftovers

_HOLDER = """
import sys, time
from pathlib import Path
from supervisor.supervise.lock import SupervisorLock
lock = SupervisorLock(Path(sys.argv[1]))
lock.acquire()
lock.record_child(int(sys.argv[2]), float(sys.argv[3]))
print("locked", flush=True)
time.sleep(60)
"""


def test_lock_refuses_a_second_holder_and_is_taken_over_after_a_kill_9(tmp_path: Path) -> None:
    import psutil

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path), str(sleeper.pid), str(psutil.Process(sleeper.pid).create_time())],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        lock = SupervisorLock(tmp_path)
        with pytest.raises(LockedError, match=f"supervised by pid {holder.pid}.*agent pid {sleeper.pid}"):
            lock.acquire()
        lock_file = tmp_path / rundir.SUPERVISOR_LOCK
        assert rundir.flock_held(lock_file) and orjson.loads(lock_file.read_bytes())["pid"] == holder.pid
        holder.kill()
        holder.wait()
        assert lock_file.exists() and not rundir.flock_held(lock_file)  # the file stays, the flock went with its holder
        previous = lock.acquire()
        assert previous is not None and previous["pid"] == holder.pid and previous["child"]["pid"] == sleeper.pid
        leftovers = find_leftovers(tmp_path, previous)
        assert [p.pid for p in leftovers] == [sleeper.pid]
        assert stop_processes(leftovers, grace=2.0) == [sleeper.pid]
        assert not alive(sleeper.pid)  # (psutil reaped our child: Popen cannot see its code)
        sleeper.wait(timeout=5)
        lock.release()
        assert not (tmp_path / rundir.SUPERVISOR_LOCK).exists()
    finally:
        kill_pids([holder.pid, sleeper.pid])
        holder.wait()
        sleeper.wait()
        if holder.stdout:
            holder.stdout.close()


def test_a_reused_pid_is_not_a_leftover(tmp_path: Path) -> None:
    me = os.getpid()
    previous = {"pid": 999999, "child": {"pid": me, "create_time": 1.0, "sid": me}}  # same pid, other create time
    assert find_leftovers(tmp_path, previous) == []
    assert find_leftovers(tmp_path, None) == []


def test_tree_sampler_counts_the_whole_tree() -> None:
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "print(p.pid, flush=True); time.sleep(30)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        sampler = TreeSampler(parent.pid)
        s = sampler.sample()
        assert s.processes == 2 and s.rss_bytes > 2_000_000 and s.threads >= 2
        s = sampler.sample()
        assert s.cpu_percent >= 0.0
    finally:
        kill_pids([parent.pid, grandchild])
        parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]


# --------------------------------------------------------------------------- agent log and events


def test_agent_log_lines_redaction_tail_and_rotation(tmp_path: Path) -> None:
    secret = "sk-" + "a1b2c3d4" * 4
    log = AgentLog(tmp_path, redact=Redactor([secret], from_env=False), max_bytes=600, tee=False)
    log.begin_attempt(3, 1234, ["agent", "--x"])
    log.feed("stdout", b"hello ")
    log.feed("stdout", b"world\nsecond")
    log.feed("stderr", f"key is {secret}\n".encode())
    log.end_attempt()  # the unfinished "second" is written
    text = (tmp_path / "agent.log").read_text()
    assert "[3:supervisor] attempt 3 started, pid 1234: agent --x" in text
    assert "[3:stdout] hello world\n" in text and "[3:stdout] second\n" in text
    assert secret not in text and "[3:stderr] key is [REDACTED]" in text
    assert log.stderr_tail() == ["key is [REDACTED]"]
    for i in range(20):
        log.feed("stdout", f"line {i}\n".encode())
    log.close()
    sealed = sorted(p.name for p in tmp_path.glob("agent.0*.log"))
    assert sealed and sealed[0] == "agent.000001.log"
    everything = "".join((tmp_path / n).read_text() for n in sealed) + (tmp_path / "agent.log").read_text()
    assert all(f"line {i}\n" in everything for i in range(20))  # rotation loses nothing
    assert (tmp_path / "agent.log").stat().st_mode & 0o777 == 0o600


def test_agent_log_splits_an_endless_line(tmp_path: Path) -> None:
    log = AgentLog(tmp_path, tee=False)
    log.begin_attempt(1, 1, ["a"])
    log.feed("stdout", b"x" * (200 * 1024))
    log.close()
    lines = (tmp_path / "agent.log").read_bytes().splitlines()
    assert len(lines) == 5 and sum(ln.count(b"x") for ln in lines) == 200 * 1024


def test_event_log_moves_a_torn_line_aside(tmp_path: Path) -> None:
    (tmp_path / "supervisor.jsonl").write_bytes(b'{"ts":"t","event":"spawn","attempt":1}\n{"ts":"t","ev')
    ev = EventLog(tmp_path)
    ev.emit("exit", 1, code=1)
    with pytest.raises(ValueError):
        ev.emit("bogus", 1)
    ev.close()
    assert [e["event"] for e in read_events(tmp_path)] == ["spawn", "exit"]
    assert (tmp_path / "supervisor.jsonl.torn").read_bytes() == b'{"ts":"t","ev\n'


# --------------------------------------------------------------------------- control socket


def test_control_socket_protocol_on_a_long_path(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep / "control.sock")) > 108  # too long for sockaddr_un: reached via /proc/self/fd
    sel = selectors.DefaultSelector()
    got: list[dict] = []

    def handler(req: dict, reply) -> None:  # type: ignore[no-untyped-def]
        got.append(req)
        reply({"ok": True, "echo": req["cmd"]})

    server = ControlServer(deep, sel, handler)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for key, _ in sel.select(0.05):
                key.data()

    t = threading.Thread(target=loop)
    t.start()
    try:
        assert (deep / "control.sock").stat().st_mode & 0o777 == 0o600
        assert ControlClient(deep).request({"cmd": "status"}) == {"ok": True, "echo": "status"}
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(f"/proc/self/fd/{os.open(deep, os.O_PATH)}/control.sock")
            s.sendall(b"not json\n[1, 2]\n{\"cmd\": \"pause\"}\n")
            buf = b""
            while buf.count(b"\n") < 3:
                buf += s.recv(4096)
        answers = [orjson.loads(ln) for ln in buf.splitlines()]
        assert answers[0]["ok"] is False and "not JSON" in answers[0]["error"]
        assert answers[1]["ok"] is False and '"cmd"' in answers[1]["error"]
        assert answers[2] == {"ok": True, "echo": "pause"}
    finally:
        stop.set()
        t.join()
        server.close()
        sel.close()
    assert not (deep / "control.sock").exists()
    with pytest.raises(ControlUnavailable, match="no supervisor is running"):
        ControlClient(deep).request({"cmd": "status"})


def test_request_lines_are_scanned_once_and_bounded() -> None:
    """The control parser: each byte scanned once (no quadratic re-scan of a growing line), blank lines skipped in
    bulk and counted toward the bound, a line over ``MAX_REQUEST`` refused."""
    from supervisor.supervise.control import MAX_REQUEST, _Conn

    a, b = socket.socketpair()
    try:
        c = _Conn(a)
        # a request arriving a byte at a time: the scan position follows the end, never restarts at 0
        req = b'{"cmd": "status", "pad": "' + b"x" * 3000 + b'"}'
        for i, byte in enumerate(req):
            c.buf.append(byte)
            assert c.next_line() is None and c.scanned == i + 1
        c.buf += b"\n\n\n   \n" + b'{"cmd": "stop"}\n'
        assert c.next_line() == req and c.next_line() == b'{"cmd": "stop"}' and c.next_line() is None
        # blank lines alone: dropped as they come, and a connection sending only them is cut off at the bound
        c.buf += b"\n" * (MAX_REQUEST // 2)
        assert c.next_line() is None and len(c.buf) == 0 and c.junk == MAX_REQUEST // 2
        c.buf += b"\n" * (MAX_REQUEST // 2 + 1)
        with pytest.raises(ValueError, match="longer than"):
            c.next_line()
        # a line longer than the bound, with or without its newline
        c2 = _Conn(a)
        c2.buf += b"x" * (MAX_REQUEST + 1)
        with pytest.raises(ValueError, match="longer than"):
            c2.next_line()
        c3 = _Conn(a)
        c3.buf += b"y" * MAX_REQUEST + b"\n"
        assert c3.next_line() == b"y" * MAX_REQUEST
    finally:
        a.close()
        b.close()


def test_tree_sampler_takes_a_known_member_list(tmp_path: Path) -> None:
    """With the run's cgroup the tree is known: ``members`` is sampled as given, the root included."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    q = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        s = TreeSampler(p.pid).sample(members=[q.pid, 999_999_999])
        assert s.processes == 2 and s.rss_bytes > 0
    finally:
        for x in (p, q):
            x.kill()
            x.wait()


def test_steps_in_flight_are_paired_by_position() -> None:
    """Concurrent steps interleave their begins and ends: the supervisor's in-flight step follows each pos."""
    from supervisor.supervise.policy import Attempt

    a = Attempt(number=1, pid=1)
    a.flying.update({3: "search:a", 4: "search:b", 5: "search:c"})
    assert a.in_flight == "search:a (+2 more in flight)"
    a.flying.pop(3)
    a.flying.pop(5)
    assert a.in_flight == "search:b"
    a.flying.clear()
    assert a.in_flight is None


def _serve(run_dir: Path, handler: Any) -> Any:
    """A ControlServer driven by a thread's selector loop (with ``pump``, as the supervisor's loop calls it)."""
    sel = selectors.DefaultSelector()
    server = ControlServer(run_dir, sel, handler)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for key, _ in sel.select(0.02):
                key.data()
            server.pump()

    t = threading.Thread(target=loop)
    t.start()

    def close() -> None:
        stop.set()
        t.join()
        server.close()
        sel.close()

    return close


def _connect(run_dir: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(run_dir / "control.sock"))
    return s


@pytest.mark.timeout(30)
def test_an_idle_control_connection_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends nothing (or half a line) is closed after the idle timeout; one waiting for its answer
    is not (issue 28, item 7)."""
    from supervisor.supervise import control

    monkeypatch.setattr(control, "IDLE_TIMEOUT_S", 0.3)
    held: list[Any] = []
    close = _serve(tmp_path, lambda req, reply: held.append(reply))  # never answers by itself
    idle, partial, waiting = _connect(tmp_path), _connect(tmp_path), _connect(tmp_path)
    try:
        partial.sendall(b'{"cmd": ')
        waiting.sendall(b'{"cmd": "stop"}\n')
        wait_for(lambda: len(held) == 1, timeout=10, what="the request handed over")
        assert idle.recv(10) == b"" and partial.recv(10) == b""  # closed by the supervisor side
        waiting.settimeout(1.0)
        with pytest.raises(TimeoutError):
            waiting.recv(10)  # still open, well past the idle timeout: it waits for its answer
        held[0]({"ok": True})
        waiting.settimeout(10)
        assert orjson.loads(waiting.recv(100)) == {"ok": True}
    finally:
        for s in (idle, partial, waiting):
            s.close()
        close()


@pytest.mark.timeout(30)
def test_a_full_control_socket_is_busy_never_absent(tmp_path: Path) -> None:
    """Every slot holds a request waiting for its answer: a new client hears "busy" (ControlBusy, a kind of
    ControlTimeout), never "no supervisor"; with idle slots, the longest idle one makes room instead."""
    from supervisor.errors import ControlBusy
    from supervisor.supervise.control import MAX_CONNECTIONS

    held: list[Any] = []
    close = _serve(tmp_path, lambda req, reply: held.append(reply) if req["cmd"] == "hold" else reply({"ok": True}))
    socks = [_connect(tmp_path) for _ in range(MAX_CONNECTIONS)]
    try:
        assert ControlClient(tmp_path).request({"cmd": "status"}) == {"ok": True}  # 64 idle: one made room
        for s in socks:
            with contextlib.suppress(OSError):
                s.sendall(b'{"cmd": "hold"}\n')
        wait_for(lambda: len(held) >= MAX_CONNECTIONS - 1, timeout=10, what="the held requests")
        extra = [_connect(tmp_path) for _ in range(MAX_CONNECTIONS - len(held))]
        for s in extra:
            s.sendall(b'{"cmd": "hold"}\n')
        wait_for(lambda: len(held) == MAX_CONNECTIONS, timeout=10, what="every slot waiting")
        with pytest.raises(ControlBusy, match="busy"):
            ControlClient(tmp_path).request({"cmd": "status"})
        socks += extra
    finally:
        for s in socks:
            s.close()
        close()
