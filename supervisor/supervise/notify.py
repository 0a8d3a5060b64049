"""Notifications (``supervise --notify CMD``): a shell command run with one JSON event on its stdin.

Which events are notified (``NOTIFIED``): ``paused`` (a breakpoint), ``asked``
(``run.ask``), ``rollback`` made by the supervisor (the crash loop), ``hang``,
``memory-limit``, and the end of the run: ``succeeded``, ``give-up`` (failed:
the crash-loop limit, or the agent's exit 78) and ``stop``. The JSON is the event
as ``supervisor.jsonl`` holds it plus ``run_dir`` (absolute), ``run_id`` and
``text``, one line for people; ``AGENT_SUPERVISOR_NOTIFY_EVENT`` and
``AGENT_SUPERVISOR_NOTIFY_TEXT`` hold the name and the text for commands that
take arguments (``notify-send``).

CMD is a shell command line, run with ``/bin/sh -c``: pipes, redirections and
``$VARIABLES`` work, so a webhook's secret URL can stay in the environment
instead of ``run.json``, which keeps the commands (``notify``) so that
``supervise --run-dir D`` with no flags keeps notifying.

Nothing here can stall supervision. The commands are run by a process of their
own, the notification runner (``notify_runner.py``: why, there); the supervisor
writes it a line per notification without blocking (a runner that stops reading
costs notifications, counted, never the loop) and reads its answers in its loop.
A command's first failure (an exit code other than 0, its timeout, a drop) is said
once on stderr and recorded once as a ``notify-error`` event; later failures of
the same command are counted, not said again. At the end the supervisor waits at
most ``min(--notify-timeout, FINAL_WAIT_S)`` for the notifications still on
their way, the end of the run among them.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..core import rundir
from ..core.pauses import INTERRUPTED
from ..errors import RunDirError, SupervisorError
from .metrics import format_size

__all__ = ["DEFAULT_TIMEOUT_S", "FINAL_WAIT_S", "MAX_QUEUED", "NOTIFIED", "Notifier", "Settings", "message",
           "notify_text", "recorded", "settings_for"]

DEFAULT_TIMEOUT_S = 10.0
"""``--notify-timeout``: a notification command still running after this many seconds is killed (its group)."""
FINAL_WAIT_S = 5.0
"""At its end the supervisor waits at most this long (and at most the timeout) for notifications on their way."""
MAX_QUEUED = 100
"""Notifications of one command that may wait while it runs; past that the oldest waiting one is dropped."""
MAX_PENDING_BYTES = 4 * 1024 * 1024
"""Notifications the runner has not read yet; past that a new one is dropped (the runner is wedged)."""
MAX_RUNNER_STARTS = 5
"""A runner that died is started again for the next notification, this many times in all."""
RUN_JSON_KEY = "notify"
ENV_EVENT = "AGENT_SUPERVISOR_NOTIFY_EVENT"
ENV_TEXT = "AGENT_SUPERVISOR_NOTIFY_TEXT"
NOTIFIED = frozenset({"paused", "asked", "rollback", "hang", "memory-limit", "give-up", "succeeded", "stop"})
"""The events a notification is sent for (a ``rollback`` only when the supervisor made it: the crash loop)."""
_RUNNER = Path(__file__).with_name("notify_runner.py")


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    """The notification commands of a run and their timeout (``run.json``'s ``notify``)."""

    commands: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S

    def to_json(self) -> dict[str, Any] | None:
        return {"commands": list(self.commands), "timeout_s": self.timeout_s} if self.commands else None


def recorded(run_dir: Path) -> Settings:
    """The settings ``run.json`` keeps (none: ``Settings()``); a malformed field is a ``RunDirError`` naming it."""
    raw = rundir.read_run_json(run_dir).get(RUN_JSON_KEY)
    if raw is None:
        return Settings()
    cmds = raw.get("commands") if isinstance(raw, dict) else None
    timeout = raw.get("timeout_s", DEFAULT_TIMEOUT_S) if isinstance(raw, dict) else None
    if (not isinstance(cmds, list) or not all(isinstance(c, str) and c.strip() for c in cmds)
            or isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        held = orjson.dumps(raw, default=repr).decode()[:60]
        raise RunDirError(f'{run_dir / rundir.RUN_JSON}: "{RUN_JSON_KEY}" is {held}, not an object such as '
                          '{"commands": ["notify-send ..."], "timeout_s": 10}; correct the field or remove it')
    return Settings(tuple(cmds), float(timeout))


def settings_for(run_dir: Path, exists: bool, commands: list[str] | None, timeout: float | None, *,
                 off: bool = False) -> Settings:
    """What ``supervise`` notifies with: ``--notify`` replaces the recorded commands, ``--no-notify`` drops them,
    neither keeps them; ``--notify-timeout`` likewise for the timeout."""
    before = recorded(run_dir) if exists else Settings()
    if off:
        return Settings()
    cmds = tuple(commands) if commands else before.commands
    for c in cmds:
        if not c.strip():
            raise SupervisorError("--notify needs a command, e.g. --notify 'notify-send agent-supervisor \"$"
                                  f"{ENV_TEXT}\"'")
    if timeout is not None and timeout <= 0:
        raise SupervisorError(f"--notify-timeout must be more than 0 seconds, not {timeout:g}")
    return Settings(cmds, before.timeout_s if timeout is None else timeout)


# --------------------------------------------------------------------------- what is sent


def notify_text(ev: Mapping[str, Any], where: str) -> str | None:
    """The one line a person reads for an event (``None``: the event is not notified)."""
    name = ev.get("event")
    run = f"agent-supervisor: run {where}"
    step = ev.get("step")
    in_step = f" in step {step!r}" if step else ""
    if name == "paused":
        reason, pattern = ev.get("reason"), ev.get("pattern")
        why = {"breakpoint": f"breakpoint {pattern!r}", INTERRUPTED: "its last attempt was cut off by a crash",
               "next": "stepping"}.get(str(reason), str(reason))
        return f"{run} paused before step {step!r} ({why})"
    if name == "asked":
        choices = ev.get("choices")
        shown = f" (choices: {', '.join(map(str, choices))})" if isinstance(choices, list) and choices else ""
        return f"{run} asks {ev.get('prompt')!r}{shown}"
    if name == "rollback":
        if ev.get("by") != "supervisor":
            return None  # a person's rollback: they know
        target = repr(ev["checkpoint"]) if ev.get("checkpoint") else "the start"
        return f"{run} is in a crash loop: rolled back to checkpoint {target} ({ev.get('reason')})"
    if name == "hang":
        return (f"{run}: attempt {ev.get('attempt')} hung (no journal record and no output for "
                f"{ev.get('idle_s')} s{in_step}); stopping it")
    if name == "memory-limit":
        rss, limit = ev.get("rss_bytes"), ev.get("max_rss")
        used = format_size(rss) if isinstance(rss, int) else str(rss)
        cap = format_size(limit) if isinstance(limit, int) else str(limit)
        return f"{run}: attempt {ev.get('attempt')} uses {used} of memory, over --max-rss {cap}{in_step}; stopping it"
    if name == "give-up":
        return f"{run} failed: {ev.get('reason')}"
    if name == "succeeded":
        return f"{run} succeeded after {ev.get('attempt')} attempt(s)"
    if name == "stop":
        by = f" by {ev['signal']}" if ev.get("signal") else ""
        return f"{run} stopped{by}; resume with 'agent-supervisor supervise --run-dir {where}'"
    return None


def message(ev: Mapping[str, Any], run_dir: Path, run_id: str, where: str) -> dict[str, Any] | None:
    """The JSON a command gets on stdin: the event, ``run_dir``, ``run_id`` and ``text``; ``None``: not notified."""
    if ev.get("event") not in NOTIFIED:
        return None
    text = notify_text(ev, where)
    if text is None:
        return None
    return {**ev, "run_dir": str(run_dir), "run_id": run_id, "text": text}


# --------------------------------------------------------------------------- the supervisor's side


class Notifier:
    """Sends the notified events to the runner and reports what failed, from the supervisor's loop.

    ``event`` is the ``Reporter``'s second tap (it sees every event as it is
    emitted); ``close`` is the bounded final wait. ``helpers`` is the tree's set of
    our children that are no leftovers: the runner's pid is in it while it lives.
    """

    def __init__(self, settings: Settings, *, run_dir: Path, display_dir: Path, run_id: str,
                 sel: selectors.BaseSelector, helpers: set[int], emit: Callable[..., None],
                 say: Callable[[str], None], redact: Callable[[str], str] = str) -> None:
        self.settings = settings
        self.run_dir = run_dir
        self.where = str(display_dir)
        self.run_id = run_id
        self.final_wait = min(settings.timeout_s, FINAL_WAIT_S)
        self._sel = sel
        self._helpers = helpers
        self._emit = emit
        self._say = say
        self._redact = redact
        self._proc: subprocess.Popen[bytes] | None = None
        self._starts = 0
        self._out = bytearray()  # lines the runner has not taken yet
        self._in = b""  # the runner's answers: a line not whole yet
        self._writing = False  # the runner's stdin is in the loop's selector (``_out`` waits)
        self._n = 0
        self._said: set[Any] = set()
        self._closing = False
        self.sent = 0
        self.delivered = 0
        self.failed = 0
        """Notifications that failed (an exit code, a timeout) or were dropped, said or not."""

    # ------------------------------------------------------------------ runner
    def start(self) -> bool:
        """Start the runner (in a session of its own: the terminal's Ctrl-C is the supervisor's to handle)."""
        self._starts += 1
        argv = [sys.executable, "-I", "-S", str(_RUNNER), "--timeout", repr(self.settings.timeout_s),
                "--final-wait", repr(self.final_wait), "--queue", str(MAX_QUEUED)]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    start_new_session=True, close_fds=True)
        except OSError as e:
            self._failure("runner", None, f"could not start the notification runner: {e.strerror or e}")
            return False
        self._helpers.add(proc.pid)  # before the loop's next sweep: no leftover of the agent
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        os.set_blocking(proc.stdin.fileno(), False)
        os.set_blocking(proc.stdout.fileno(), False)
        self._sel.register(proc.stdout.fileno(), selectors.EVENT_READ, self._on_answers)
        return True

    def _runner_gone(self) -> None:
        """The runner closed its stdout: reap it, take it out of the loop, say so unless we ended it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._unwatch(proc)
        try:
            code = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the runner alone
            code = proc.wait()
        self._helpers.discard(proc.pid)
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        lost = self._out.count(b"\n")
        self._out.clear()
        self._in = b""
        if not self._closing:
            self.failed += lost
            self._failure("runner", None, f"the notification runner exited (code {code}); "
                          f"{lost} notification(s) not handed over were lost; it is started again when needed")

    def _unwatch(self, proc: subprocess.Popen[bytes]) -> None:
        for f in (proc.stdout, proc.stdin):
            if f is not None:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._sel.unregister(f.fileno())
        self._writing = False

    # ------------------------------------------------------------------ events
    def event(self, event: str, attempt: int, fields: dict[str, Any]) -> None:
        """An event was emitted: if it is notified, one line per command to the runner (never blocks)."""
        if event not in NOTIFIED or self._closing:
            return
        ev = {"ts": fields.get("ts") or rundir.utc_now(), "event": event, "attempt": attempt, **fields}
        msg = message(ev, self.run_dir, self.run_id, self.where)
        if msg is None:
            return
        try:
            data = orjson.dumps(msg, option=orjson.OPT_NON_STR_KEYS, default=str).decode() + "\n"
        except TypeError as e:  # nesting too deep for orjson: the event itself was written with the same encoder
            self._failure("encode", event, f"the event could not be encoded: {e}")
            return
        env = {ENV_EVENT: event, ENV_TEXT: msg["text"]}
        for i, cmd in enumerate(self.settings.commands):
            self._n += 1
            self.sent += 1
            line = orjson.dumps({"n": self._n, "i": i, "cmd": cmd, "event": event, "input": data, "env": env})
            self._send(line + b"\n", i, event)

    def _send(self, line: bytes, i: int, event: str) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            self._runner_gone()
        if self._proc is None and (self._starts >= MAX_RUNNER_STARTS or not self.start()):
            self.failed += 1
            self._failure("runner", event, f"no notification runner (started {self._starts} time(s)): "
                          "notifications are dropped")
            return
        if len(self._out) + len(line) > MAX_PENDING_BYTES:
            self.failed += 1
            self._failure(i, event, f"dropped: the notification runner has not read {len(self._out)} bytes "
                          "of earlier notifications")
            return
        self._out += line
        self._flush()

    def _flush(self, *, watch: bool = True) -> None:
        """Hand what waits to the runner, as much as its pipe takes; the rest when the loop says it can
        (``watch=False``: the caller waits itself)."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        fd = proc.stdin.fileno()
        try:
            while self._out:
                del self._out[: os.write(fd, self._out)]
        except BlockingIOError:
            pass  # the pipe is full: the loop tells us when it takes more
        except OSError:
            self._out.clear()  # the runner is gone: its end of file on stdout says so (``_runner_gone``)
        if self._out and not self._writing and watch:
            self._sel.register(fd, selectors.EVENT_WRITE, self._flush)
            self._writing = True
        elif not self._out and self._writing:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(fd)
            self._writing = False

    # ------------------------------------------------------------------ answers
    def _on_answers(self) -> None:
        """The runner's answers (the loop saw its stdout readable): the failures reported, end of file handled."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        try:
            data = os.read(proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._runner_gone()
            return
        *lines, self._in = (self._in + data).split(b"\n")
        for raw in lines:
            try:
                ans = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # not ours to fail on: the runner writes whole lines
            if isinstance(ans, dict):
                self._answer(ans)

    def _answer(self, ans: dict[str, Any]) -> None:
        if ans.get("ok"):
            self.delivered += 1
            return
        self.failed += 1
        i = ans.get("i")
        fields: dict[str, Any] = {k: ans[k] for k in ("code", "timed_out", "dropped", "ms") if k in ans}
        output = str(ans.get("output") or "")
        if output:
            fields["output"] = self._redact(output)
        self._failure(i if isinstance(i, int) else "runner", ans.get("event"), str(ans.get("error")), **fields)

    def _failure(self, key: Any, event: Any, error: str, **fields: Any) -> None:
        """Said once on stderr and recorded once as ``notify-error`` per command (``key``); later ones counted."""
        if key in self._said:
            return
        self._said.add(key)
        cmds = self.settings.commands
        shown = self._redact(cmds[key]) if isinstance(key, int) and 0 <= key < len(cmds) else None
        what = f"notification command {shown!r}" if shown is not None else "notifications"
        last = str(fields.get("output") or "").strip().splitlines()[-1:]
        self._say(f"{what} failed{f' for the {event!r} event' if event else ''}: {error}"
                  + (f"; it said: {last[0][:200]}" if last else "")
                  + ("; later failures of it are counted, not said" if shown is not None else ""))
        self._emit("notify-error", command=shown, error=error, for_event=event, **fields)

    # ------------------------------------------------------------------ the end
    def close(self) -> None:
        """The supervisor ends: hand over what waits, end the runner's input, take its answers for at most
        ``final_wait`` (+2 s for the runner's own start and exit), then let it go."""
        self._closing = True
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return
        deadline = time.monotonic() + self.final_wait + 2.0
        self._unwatch(proc)
        win, rout = proc.stdin.fileno(), proc.stdout.fileno()
        while self._out and self._proc is not None and (left := deadline - time.monotonic()) > 0:
            _, w, _ = select.select([], [win], [], left)
            if w:
                self._flush(watch=False)
        with contextlib.suppress(OSError):
            proc.stdin.close()  # end of file: the runner's final wait begins
        while self._proc is not None and (left := deadline - time.monotonic()) > 0:
            r, _, _ = select.select([rout], [], [], left)
            if r:
                self._on_answers()
        if self._proc is not None:
            self._say(f"the notification runner did not finish within {self.final_wait + 2.0:g} s: killed")
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            self._runner_gone()
