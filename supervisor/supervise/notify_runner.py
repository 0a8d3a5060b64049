"""The notification runner: a small process that runs ``supervise --notify`` commands for the supervisor.

The supervisor is a child subreaper and sweeps every child of its own that is not
the agent or the guardian as the agent's leftovers; a notification command started
by the supervisor itself could be swept (killed, or its exit status reaped away)
by a sweep that ran while it was being started. So the supervisor starts this
script once (``python -I -S notify_runner.py``: the standard library only, about
40 ms and a few MiB), in a session of its own, tells the tree it is no leftover,
and hands it each notification as one JSON line on its stdin:

    {"n": 7, "i": 0, "cmd": "curl ...", "event": "give-up", "input": "<the JSON for stdin>", "env": {...}}

Each command (``i``) has a lane: a thread that runs its notifications one after
the other, so a command gets its events in order; commands run beside each other.
A notification is ``/bin/sh -c CMD`` in a session of its own, with ``input`` on
its stdin, its output kept in a temporary file (the last lines are reported when
it fails); past ``--timeout`` its process group gets SIGKILL. When it exits,
whatever it left in its group is stopped too: nothing of a notification outlives
it. At most ``--queue`` notifications wait in a lane; past that the oldest waiting
one is dropped (the newest, e.g. the end of the run, is the one to deliver).

It answers on stdout, one JSON line per notification: ``{"n", "i", "event", "ok": true}``
or with ``error`` (and ``code``, ``timed_out``, ``dropped``, ``output``).

End of file on stdin (the supervisor is done, or died) starts the final wait: the
lanes go on for ``--final-wait`` seconds, then what still runs is killed, what
still waits is dropped (each reported), and the runner exits.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

OUTPUT_TAIL = 400
"""How many bytes of a failed command's output are reported (its last ones)."""
SHELL = "/bin/sh"


class Out:
    """The runner's stdout: one JSON line per report, from any thread; a supervisor gone is no error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd = sys.stdout.fileno()

    def report(self, item: dict[str, Any], **fields: Any) -> None:
        rec = {"n": item.get("n"), "i": item.get("i"), "event": item.get("event"), **fields}
        line = (json.dumps(rec, default=str) + "\n").encode()
        with self._lock, contextlib.suppress(OSError):
            while line:
                line = line[os.write(self._fd, line):]


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class Lane(threading.Thread):
    """One command's notifications, one at a time and in order; at most ``queue`` of them wait."""

    def __init__(self, out: Out, timeout: float, queue: int) -> None:
        super().__init__(name="notify-lane", daemon=True)
        self.out = out
        self.timeout = timeout
        self.queue = queue
        self.waiting: collections.deque[dict[str, Any]] = collections.deque()
        self.cond = threading.Condition()
        self.final: float | None = None
        """Set at the supervisor's end: nothing runs past this time."""
        self.running: subprocess.Popen[bytes] | None = None

    def put(self, item: dict[str, Any]) -> None:
        with self.cond:
            if len(self.waiting) >= self.queue:
                old = self.waiting.popleft()
                self.out.report(old, error=f"dropped: {self.queue} notifications of this command were waiting already",
                                dropped=True)
            self.waiting.append(item)
            self.cond.notify()

    def finish(self, final: float) -> None:
        with self.cond:
            self.final = final
            self.cond.notify()

    def kill_running(self) -> None:
        """The final wait is over: the notification still running is killed (its lane reports it)."""
        with self.cond:
            proc = self.running
            if proc is not None and proc.returncode is None:
                _kill_group(proc.pid)

    def run(self) -> None:
        while True:
            with self.cond:
                while not self.waiting and self.final is None:
                    self.cond.wait()
                if not self.waiting:
                    return
                item = self.waiting.popleft()
                final = self.final
            if final is not None and time.monotonic() >= final:
                self.out.report(item, error="dropped: the supervisor exited before its turn came", dropped=True)
                continue
            try:
                self._one(item)
            except Exception as e:  # a bug here must not end the lane: the next notifications still go out
                self.out.report(item, error=f"notification runner: {type(e).__name__}: {e}")

    def _one(self, item: dict[str, Any]) -> None:
        env = {**os.environ, **item.get("env", {})}
        started = time.monotonic()
        with tempfile.TemporaryFile() as log:
            try:
                with self.cond:
                    # in a session of its own: its group is killed at the timeout, a Ctrl-C does not reach it
                    proc = subprocess.Popen([SHELL, "-c", str(item.get("cmd"))], stdin=subprocess.PIPE, stdout=log,
                                            stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True)
                    self.running = proc
            except OSError as e:
                self.out.report(item, error=f"could not start: {e.strerror or e}")
                return
            timed_out = self._wait(proc, str(item.get("input", "")).encode(), started)
            with self.cond:
                self.running = None
            _kill_group(proc.pid)  # what it left in its group: nothing of a notification outlives it
            code = proc.returncode
            ms = round((time.monotonic() - started) * 1000)
            final = self.final
            if timed_out:
                self.out.report(item, error=f"timed out after {self.timeout:g} s: killed", timed_out=True, ms=ms,
                                output=_tail(log))
            elif code == -signal.SIGKILL and final is not None and time.monotonic() >= final:
                self.out.report(item, error="killed: still running when the supervisor's final wait was over",
                                timed_out=True, ms=ms, output=_tail(log))
            elif code != 0:
                how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                self.out.report(item, error=how, code=code, ms=ms, output=_tail(log))
            else:
                self.out.report(item, ok=True, ms=ms)

    def _wait(self, proc: subprocess.Popen[bytes], data: bytes, started: float) -> bool:
        """Feed ``data`` and wait for the exit, at most the timeout; ``True`` if it was killed for it."""
        deadline = started + self.timeout
        try:
            proc.communicate(data, timeout=max(0.0, deadline - time.monotonic()))
            return False
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
            return True


def _tail(f: Any) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - OUTPUT_TAIL))
    return str(f.read().decode(errors="replace").strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="runs the supervisor's notification commands (started by supervise --notify)")
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--final-wait", type=float, required=True)
    ap.add_argument("--queue", type=int, required=True)
    args = ap.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP):  # the supervisor's terminal is not ours: it ends us by EOF
        signal.signal(sig, signal.SIG_IGN)
    out = Out()
    lanes: dict[Any, Lane] = {}
    for raw in sys.stdin.buffer:
        try:
            item = json.loads(raw)
        except ValueError:
            continue  # the supervisor writes whole lines; a torn one (it died mid-write) is no notification
        if not isinstance(item, dict):
            continue
        lane = lanes.get(item.get("i"))
        if lane is None:
            lane = lanes[item.get("i")] = Lane(out, args.timeout, max(1, args.queue))
            lane.start()
        lane.put(item)
    final = time.monotonic() + args.final_wait
    for lane in lanes.values():
        lane.finish(final)
    for lane in lanes.values():
        lane.join(max(0.0, final - time.monotonic()))
    for lane in lanes.values():
        lane.kill_running()
    for lane in lanes.values():
        lane.join(5.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
