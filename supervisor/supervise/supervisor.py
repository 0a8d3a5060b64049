"""The Supervisor: runs the agent, restarts it with the resume flag, and answers the control socket.

One thread, one ``selectors`` loop. It wakes for: the child's exit (pidfd), its
output (pipes, teed to the terminal and ``agent.log``), control requests,
signals (a wakeup fd), and timers (backoff, stop grace, the journal poll every
0.1 s, psutil figures every second). A crash is therefore seen at once, not on
a tick.

Policy (the defaults are in ``--help``; ``policy.decide`` makes the decision from
the facts, this class carries it out; every state change records its event
through the state machine's one listener):

- exit 0: succeeded. Exit 78 (``EXIT_FAILED``): failed, no restart.
- exit 75 (``EXIT_ROLLBACK``, the SDK appended a rollback): restart now, it is progress; an exit 75
  whose attempt committed no rollback record is a crash (backoff and give-up as below).
- any other exit or a signal: restart with the resume flag. If the attempt made
  progress (a successful step or a checkpoint committed to the journal since it
  started) the restart is immediate and the count of attempts without progress
  resets; otherwise wait ``initial * factor**(n-1)`` seconds (capped, +-jitter).
- crash loop: after ``rollback_after`` attempts in a row without progress, one
  automatic rollback to the latest checkpoint (reason ``crash-loop``); after
  ``give_up_after``, give up: status failed, a summary, exit 1.
- hang (no journal record and no output for ``hang_timeout`` s) and memory
  limit (the tree's RSS over ``max_rss``): stop the tree, then as a crash.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..core import rundir
from ..core.events import EventLog, read_events
from ..core.history import Fold
from ..core.journal import JournalReader, journal_locked
from ..core.records import Kind, step_name
from ..core.redact import Redactor
from ..errors import JournalLockedError, SupervisorError
from .agentlog import AgentLog
from .commands import ControlCommands
from .control import ControlServer, Reply
from .lock import SupervisorLock, find_leftovers, stop_processes
from .metrics import TreeSample, TreeSampler
from .persister import Persister
from .policy import (
    Action,
    Attempt,
    Facts,
    Options,
    Pending,
    Rollback,
    decide,
    is_progress,
)
from .process import (
    Child,
    ExitStatus,
    become_subreaper,
    kill_leftovers,
    own_orphans,
    reap_orphans,
)
from .rollback import append_rollback
from .signals import SignalInbox
from .states import ProcessState, StateChange, StateMachine, StopRequest

__all__ = ["EXIT_GAVE_UP", "Options", "Supervisor"]

S = ProcessState
EXIT_GAVE_UP = 1
"""The supervisor's exit code when the run failed (gave up, or the agent exited 78)."""

JOURNAL_POLL_S = 0.1
METRICS_INTERVAL_S = 1.0


class Supervisor:
    """Supervises one run directory. ``prepare()`` then ``run()``; ``run`` returns the exit code."""

    def __init__(self, run_dir: Path, argv: list[str], opts: Options, *, cwd: str | None = None) -> None:
        self.run_dir = run_dir.resolve()
        self.display_dir = run_dir
        self.argv = argv
        self.opts = opts
        self.cwd = cwd or os.getcwd()
        self.sm = StateMachine()
        self.sm.listeners.append(self._on_state)
        self.state_since = rundir.utc_now()
        self.sel = selectors.DefaultSelector()
        self.lock = SupervisorLock(self.run_dir)
        self.events: EventLog | None = None
        self.log: AgentLog | None = None
        self.server: ControlServer | None = None
        self.reader = JournalReader(self.run_dir)
        self.records = 0
        self.attempt_no = 0
        self.restarts = 0
        self.no_progress = 0
        self.crash_loop_rolled_back = False
        self.child: Child | None = None
        self.cur: Attempt | None = None
        self.attempts: list[Attempt] = []
        self.sampler: TreeSampler | None = None
        self.sample = TreeSample()
        self.started = time.monotonic()
        self.exit_code = 0
        self._stop_deadline: float | None = None
        self._backoff_reason = "crash"  # the restart event after a backoff names the exit that caused it
        self._next_poll = 0.0
        self._next_metrics = 0.0
        self._journal_stat: tuple[int, int] = (-1, -1)
        self.signals = SignalInbox(self.sel, self._on_stop_signal)
        self._stop_signal: int | None = None
        self._leftovers: list[int] = []
        self.run_id = run_dir.name
        self.persist = Persister()
        self._high_water: int | None = None  # effective steps before a crash-loop rollback
        # the effective history, folded incrementally from what poll_journal reads (flat memory):
        # the effective step count and the checkpoint a rollback names, without re-reading the journal
        self.fold = Fold(keep=False)

    # ------------------------------------------------------------------ output
    def say(self, text: str) -> None:
        """A progress line on stderr (silenced by ``-q``)."""
        if self.opts.quiet:
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"agent-supervisor: {text}\n")
            sys.stderr.flush()

    def emit(self, event: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(event, self.attempt_no, **fields)

    def _on_state(self, ch: StateChange) -> None:
        """Write the change's event (the one place state changes are recorded); remember when the state changed."""
        if ch.old is not ch.new:
            self.state_since = rundir.utc_now()
        if ch.event is not None:
            self.emit(ch.event, **ch.info)

    # ------------------------------------------------------------------ preparation
    def prepare(self) -> None:
        """Take the lock, stop leftovers of a supervisor killed with -9, open the files. Raises on bad input."""
        previous = self.lock.acquire()
        try:
            self._stop_leftovers(previous)
            self._check_journal_free()
            meta = rundir.read_run_json(self.run_dir)
            exists = (self.run_dir / rundir.RUN_JSON).exists()
            # run.json is written after a spawn; the spawn event is written first (a supervisor killed
            # in between must not make the next one reuse an attempt number)
            recorded = [e.get("attempt") for e in read_events(self.run_dir)]
            self.attempt_no = max([int(meta.get("attempts") or 0) if exists else 0]
                                  + [a for a in recorded if isinstance(a, int)])
            changes: dict[str, Any] = {
                "command": self.argv,
                "cwd": self.cwd,
                "status": "running",
                "supervisor_pid": os.getpid(),
                "attempts": self.attempt_no,
                "ended": None,
            }
            if not exists:
                changes.update(id=self.run_dir.name, created=rundir.utc_now())
            self.run_id = str(rundir.update_run_json(self.run_dir, **changes).get("id") or self.run_dir.name)
            self.events = EventLog(self.run_dir)
            self.log = AgentLog(
                self.run_dir, redact=Redactor(), max_bytes=self.opts.log_max_bytes, tee=self.opts.tee
            )
            # one read of the journal at the start (the resume view: steps stay unparsed), then read_new
            self.fold.extend(self.reader.load(lazy=True))
            self.records = self.reader.end_seq
            self.server = ControlServer(self.run_dir, self.sel, ControlCommands(self).handle)
        except BaseException:
            self._close_files()
            self.lock.release()
            raise
        become_subreaper()
        self.emit(
            "supervisor-start", pid=os.getpid(), argv=self.argv, run_dir=str(self.run_dir),
            resumed_run=self.attempt_no > 0, leftovers_stopped=self._leftovers,
        )

    def _stop_leftovers(self, previous: dict[str, Any] | None) -> None:
        procs = find_leftovers(self.run_dir, previous)
        if procs:
            self.say(f"stopping {len(procs)} leftover process(es) of the previous supervisor: {[p.pid for p in procs]}")
            self._leftovers = stop_processes(procs, self.opts.stop_grace, log=self.say)

    def _check_journal_free(self) -> None:
        """Refuse if an agent runs on this run directory without us (it holds the journal lock)."""
        if journal_locked(self.run_dir):
            raise JournalLockedError(
                f"an agent is already writing the journal of {self.display_dir} without a supervisor; "
                "stop it first, then supervise the run (it resumes)"
            )

    # ------------------------------------------------------------------ main loop
    def run(self) -> int:
        """Run until the agent succeeds, fails for good, or a stop is requested; return the exit code."""
        self.signals.install()
        try:
            self.spawn(reason="start")
            while not self.sm.state.terminal:
                timeout = self._timeout()
                for key, _ in self.sel.select(timeout):
                    key.data()
                    if self.sm.state.terminal:
                        break
                self._timers()
        finally:
            self._emergency_cleanup()
            self.signals.restore()
            self._close_files()
            self.lock.release()
        return self.exit_code

    def _timeout(self) -> float:
        now = time.monotonic()
        deadlines = [self._next_poll, self._next_metrics] if self.child else []
        if self._stop_deadline is not None:
            deadlines.append(self._stop_deadline)
        if self.sm.backoff_until is not None:
            deadlines.append(self.sm.backoff_until)
        if not deadlines:
            return 1.0
        return max(0.0, min(deadlines) - now)

    def _timers(self) -> None:
        now = time.monotonic()
        if self.log is not None:
            self.log.flush_tee()
        for e in self.persist.take_errors():
            self.say(f"could not write run state: {e}")
        if self.sm.backoff_until is not None and now >= self.sm.backoff_until and self.sm.state is S.BACKOFF:
            self.spawn(reason=self._backoff_reason)
            return
        if self.child is None:
            return
        if self._stop_deadline is not None and now >= self._stop_deadline:
            self._stop_deadline = None
            self.say(f"attempt {self.attempt_no} did not stop within {self.opts.stop_grace:g} s: SIGKILL to its process group")
            self.child.signal_group(signal.SIGKILL)
        if now >= self._next_poll:
            self._next_poll = now + JOURNAL_POLL_S
            self.poll_journal()
            self._check_hang(now)
        if now >= self._next_metrics and self.child is not None:
            self._next_metrics = now + METRICS_INTERVAL_S
            self._sample_metrics()

    # ------------------------------------------------------------------ spawning
    def _child_argv(self, resume: bool) -> list[str]:
        flag = self.opts.resume_flag
        if resume and flag and flag not in self.argv:
            return [*self.argv, flag]
        return list(self.argv)

    def spawn(self, *, reason: str) -> None:
        assert self.log is not None
        self.attempt_no += 1
        resume = self.attempt_no > 1 or self.records > 0
        if reason != "start":
            self.restarts += 1
        if self.sm.state is not S.STARTING:
            self.sm.change(S.STARTING, reason=reason, resume=resume)
        argv = self._child_argv(resume)
        env = dict(os.environ)
        env.update(
            {
                rundir.ENV_RUN_DIR: str(self.run_dir),
                rundir.ENV_RUN_ID: self.run_id,
                rundir.ENV_ATTEMPT: str(self.attempt_no),
                rundir.ENV_RESUME: "1" if resume else "0",
                rundir.ENV_SUPERVISED: str(os.getpid()),
            }
        )
        # Python agents buffer a piped stdout: the terminal, agent.log and the hang watchdog would see nothing
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            child = Child(argv, env, cwd=self.cwd)
        except OSError as e:
            # the command vanished or lost its x bit since the check: a failed attempt, not a crash of ours
            self.say(f"attempt {self.attempt_no} could not start: {e.strerror or e}")
            self.emit("exit", pid=None, code=127, signal=None, uptime_s=0.0, step=None, stderr_tail=[str(e)],
                      progress=0, reason="spawn-failed", leftovers_killed=[])
            self.cur = Attempt(self.attempt_no, 0, self.records)
            self.cur.status = ExitStatus(127, None)
            self.attempts.append(self.cur)
            self._after_exit(self.cur, None)
            return
        self.child = child
        self.cur = Attempt(self.attempt_no, child.pid, self.records)
        self.attempts.append(self.cur)
        self.sampler = TreeSampler(child.pid)
        self.sel.register(child.pidfd, selectors.EVENT_READ, self._on_child_exit)
        self.sel.register(child.out_fd, selectors.EVENT_READ, lambda: self._on_output("stdout"))
        self.sel.register(child.err_fd, selectors.EVENT_READ, lambda: self._on_output("stderr"))
        self.log.begin_attempt(self.attempt_no, child.pid, argv)
        self.sm.change(S.RUNNING, pid=child.pid, argv=argv, resume=resume)
        now = time.monotonic()
        self._next_poll = now + JOURNAL_POLL_S
        self._next_metrics = now + 0.2  # a first figure soon, for a status right after the start
        self.say(f"attempt {self.attempt_no} started (pid {child.pid}){' with ' + self.opts.resume_flag if resume and self.opts.resume_flag else ''}")
        self.lock.record_child(child.pid, child.create_time)
        # durability off the restart path (the spawn event above is already written, not yet fsynced)
        events, n = self.events, self.attempt_no
        assert events is not None

        def persist() -> None:
            rundir.update_run_json(self.run_dir, attempts=n, status="running")
            events.flush()

        self.persist.submit(persist)

    # ------------------------------------------------------------------ child I/O
    def _on_output(self, stream: str) -> None:
        child = self.child
        if child is None:
            return
        fd = child.out_fd if stream == "stdout" else child.err_fd
        data = child.read_available(fd)
        if data is None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(fd)
            return
        if data:
            assert self.log is not None
            self.log.feed(stream, data)
            if self.cur is not None:
                self.cur.last_activity = time.monotonic()

    def poll_journal(self) -> None:
        """Read the journal records committed since the last poll (only if the file changed)."""
        try:
            st = os.stat(self.run_dir / rundir.JOURNAL)
            key = (st.st_ino, st.st_size)
        except FileNotFoundError:
            key = (-1, 0)
        if key == self._journal_stat:
            return
        self._journal_stat = key
        new = self.reader.read_new()
        if not new:
            return
        self.fold.extend(new)
        cur = self.cur
        for ent in new:
            if not isinstance(ent, dict):  # a bad line (read_new never returns lazy records)
                self.records = max(self.records, ent.seq + 1)
                continue
            self.records = max(self.records, int(ent.get("seq", 0)) + 1)
            if cur is None:
                continue
            kind = ent.get("kind", Kind.STEP)
            if kind == Kind.BEGIN:
                cur.in_flight = step_name(ent)
            elif kind in (Kind.STEP, Kind.START, Kind.ROLLBACK):
                cur.in_flight = None
            if is_progress(ent):
                cur.progress += 1
            elif kind == Kind.ROLLBACK:
                cur.rollbacks += 1
        if cur is not None:
            cur.last_activity = time.monotonic()

    def _check_hang(self, now: float) -> None:
        limit = self.opts.hang_timeout
        cur = self.cur
        if not limit or cur is None or self.sm.state is not S.RUNNING:
            return
        idle = now - cur.last_activity
        if idle >= limit:
            self.say(f"attempt {cur.number} hung: no journal record and no output for {idle:.1f} s"
                     f"{' in step ' + cur.in_flight if cur.in_flight else ''}; stopping it")
            self.begin_stop(Pending.HANG, event="hang", pid=cur.pid, idle_s=round(idle, 3), step=cur.in_flight,
                            hang_timeout_s=limit)

    def _sample_metrics(self) -> None:
        if self.sampler is None or self.child is None:
            return
        reap_orphans(self.child.pid)  # adopted grandchildren that died meanwhile: no zombies
        self.sample = self.sampler.sample([p.pid for p in own_orphans(self.child.pid)])
        limit = self.opts.max_rss
        if limit and self.sample.rss_bytes > limit and self.sm.state is S.RUNNING:
            self.say(f"attempt {self.attempt_no} uses {self.sample.rss_bytes} bytes of memory, over --max-rss {limit}; stopping it")
            self.begin_stop(Pending.MEMORY_LIMIT, event="memory-limit", pid=self.child.pid,
                            rss_bytes=self.sample.rss_bytes, max_rss=limit,
                            step=self.cur.in_flight if self.cur else None)

    # ------------------------------------------------------------------ stopping
    def begin_stop(self, action: Pending, sig: int = signal.SIGTERM, *, info: dict[str, Any] | None = None,
                   event: str | None = None, **fields: Any) -> None:
        """Send ``sig`` to the child's group; SIGKILL after the grace period. ``action`` says what comes next.

        ``info`` is kept for what comes next (a rollback's checkpoint and reply);
        ``event`` and ``fields`` are the event a watchdog's stop records.
        A stop by SIGINT forwards SIGINT (a Python agent gets its KeyboardInterrupt and
        closes cleanly); everything else sends SIGTERM, as systemd and docker do.
        """
        assert self.child is not None
        previous = self.sm.stop(StopRequest(action, info or {}), event=event, **fields)
        if previous is not None and "reply" in previous.info and action != previous.action:
            previous.info["reply"]({"ok": False, "error": f"the supervisor is stopping the agent for {action.value!r} first; retry"})
        self._stop_deadline = time.monotonic() + self.opts.stop_grace
        self.child.signal_group(sig)

    def _on_child_exit(self) -> None:
        child, cur = self.child, self.cur
        assert child is not None and cur is not None and self.log is not None
        status = child.reap()
        cur.uptime_s = round(child.uptime, 3)
        cur.status = status
        self.sel.unregister(child.pidfd)
        # what the child wrote last: its output, then its journal (for the step in flight)
        for fd, stream in ((child.out_fd, "stdout"), (child.err_fd, "stderr")):
            data = child.read_available(fd)
            if data:
                self.log.feed(stream, data)
        self._journal_stat = (-1, -1)
        self.poll_journal()
        grace = min(self.opts.stop_grace, 3.0)
        killed = kill_leftovers(child.pgid, grace, log=self.say)
        for fd, stream in ((child.out_fd, "stdout"), (child.err_fd, "stderr")):
            data = child.read_available(fd)
            if data:
                self.log.feed(stream, data)
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(fd)
        self.log.end_attempt()
        child.close()
        self.child = None
        self.sampler = None
        self._stop_deadline = None
        pending = self.sm.take_pending()
        cur.reason = pending.action if pending else None
        step = cur.in_flight
        self.emit(
            "exit", pid=cur.pid, code=status.code, signal=status.signal, uptime_s=cur.uptime_s, step=step,
            stderr_tail=self.log.stderr_tail(), progress=cur.progress, reason=cur.reason,
            leftovers_killed=killed,
        )
        where = f" in step {step}" if step else ""
        self.say(f"attempt {cur.number} exited with {status.describe()}{where} after {cur.uptime_s:.1f} s"
                 + (f" ({cur.reason})" if cur.reason else "")
                 + (f"; stopped {len(killed)} leftover process(es)" if killed else ""))
        with contextlib.suppress(OSError):
            self.lock.clear_child()
        self._after_exit(cur, pending)

    def _after_exit(self, cur: Attempt, pending: StopRequest | None) -> None:
        """Carry out what ``policy.decide`` says from the facts of the attempt that ended."""
        status = cur.status
        assert status is not None
        action = Pending(pending.action) if pending else None
        d = decide(Facts(
            code=status.code, signal=status.signal, progress=cur.progress, no_progress=self.no_progress,
            crash_loop_rolled_back=self.crash_loop_rolled_back, paused=self.sm.paused, pending=action,
            high_water=self._high_water, effective_steps=self.fold.step_count, rolled_back=cur.rollbacks > 0,
        ), self.opts)
        self.no_progress = d.no_progress
        self.crash_loop_rolled_back = d.crash_loop_rolled_back
        self._high_water = d.high_water
        if d.action is Action.STOP:
            self._finish(S.STOPPED, "stopped")
            return
        if d.action is Action.SUCCEED:
            self._finish(S.SUCCEEDED, "succeeded")
            return
        if d.action is Action.FAIL:
            self.say(f"attempt {cur.number} reported a permanent failure (exit {rundir.EXIT_FAILED}): not restarting")
            self._finish(S.FAILED, "failed", reason=d.reason)
            return
        if d.action is Action.GIVE_UP:
            self._give_up()
            return
        if d.rollback is Rollback.REQUESTED:
            assert pending is not None
            self.do_rollback(**pending.info)
        elif d.rollback is Rollback.CRASH_LOOP:
            self._crash_loop_rollback()
        reason = d.reason or "crash"
        if d.action is Action.PAUSE:
            self.sm.change(S.PAUSED, after=reason)
            self.say("restarts are paused: waiting for 'resume'")
        elif d.action is Action.RESTART:
            self.spawn(reason=reason)
        else:
            self._backoff_reason = reason
            self.sm.change(S.BACKOFF, **d.event_fields)
            self.say(f"no progress in {self.no_progress} attempt(s) in a row: restarting in {d.delay_s:.2f} s")
            assert self.events is not None
            self.persist.submit(self.events.flush)

    def _crash_loop_rollback(self) -> None:
        """Roll back once to the latest checkpoint; later attempts count as progress only past the old high-water mark.

        Without the mark, re-running the abandoned steps would look like progress
        and a deterministic crash would loop forever between rollback and crash.
        """
        fold = self.fold
        if not fold.steps_after_checkpoint:
            self.say("crash loop: nothing after the latest checkpoint to roll back")
            return
        target = fold.checkpoints[-1] if fold.checkpoints else None
        ref = str(target["seq"]) if target else "start"
        high_water = fold.step_count
        try:
            self.do_rollback(ref, f"crash-loop: {self.no_progress} attempts in a row without progress", "supervisor")
        except SupervisorError as e:
            self.say(f"automatic rollback failed: {e}")
            return
        self._high_water = high_water

    def do_rollback(self, checkpoint: str, reason: str, by: str, reply: Reply | None = None) -> None:
        try:
            self._journal_stat = (-1, -1)
            self.poll_journal()  # the fold is up to date (the agent is gone: nothing more comes)
            rec = append_rollback(self.run_dir, checkpoint, reason, by=by, fold=self.fold)
        except SupervisorError as e:
            if reply is None:
                raise
            reply({"ok": False, "error": str(e)})
            return
        name = rec.get("checkpoint")
        self.emit("rollback", checkpoint=name, seq=rec["seq"], reason=reason, by=by)
        self.say(f"rolled back to {name or 'the start of the run'} ({reason})")
        if reply is not None:
            reply({"ok": True, "checkpoint": name, "seq": rec["seq"], "live": True})

    def _give_up(self) -> None:
        recent = self.attempts[-self.opts.give_up_after :]
        summary = [
            {"attempt": a.number, "code": a.status.code if a.status else None,
             "signal": a.status.signal if a.status else None, "step": a.in_flight,
             "uptime_s": a.uptime_s, "reason": a.reason}
            for a in recent
        ]
        self.say(f"gave up after {self.no_progress} attempts in a row without progress; the run directory keeps everything:")
        for s in summary:
            how = f"signal {s['signal']}" if s["signal"] else f"code {s['code']}"
            self.say(f"  attempt {s['attempt']}: {how} after {s['uptime_s']:.1f} s"
                     + (f" in step {s['step']}" if s["step"] else "") + (f" ({s['reason']})" if s["reason"] else ""))
        self._finish(S.FAILED, "failed", reason=f"{self.no_progress} attempts without progress", attempts=summary)

    def _finish(self, state: ProcessState, status: str, **fields: Any) -> None:
        """Enter a terminal state (it records its event), then ``run.json`` and the exit code."""
        if state is S.STOPPED and self._stop_signal:
            fields["signal"] = signal.Signals(self._stop_signal).name
        self.sm.change(state, status=status, restarts=self.restarts, **fields)
        self.persist.drain()  # the final status is written last
        rundir.update_run_json(self.run_dir, status=status, ended=rundir.utc_now(), attempts=self.attempt_no)
        if state is S.SUCCEEDED:
            self.exit_code = 0
            self.say(f"run succeeded after {self.attempt_no} attempt(s)")
        elif state is S.FAILED:
            self.exit_code = EXIT_GAVE_UP
        else:
            self.exit_code = 128 + self._stop_signal if self._stop_signal else 0
            self.say(f"stopped; resume with 'agent-supervisor supervise --run-dir {self.display_dir}'")

    # ------------------------------------------------------------------ signals
    def _on_stop_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self._stop_signal is not None and self.child is not None:
            self.say(f"{name} again: SIGKILL to the agent's process group")
            self.child.signal_group(signal.SIGKILL)
            return
        self._stop_signal = sig
        self.say(f"{name}: stopping the agent (grace {self.opts.stop_grace:g} s, then SIGKILL)")
        self.request_stop(signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM)

    def request_stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop for good: the agent's group gets ``sig``; in backoff or paused, stop at once."""
        if self.child is not None:
            self.begin_stop(Pending.STOP, sig)
        elif not self.sm.state.terminal:
            self._finish(S.STOPPED, "stopped")

    # ------------------------------------------------------------------ teardown
    def _emergency_cleanup(self) -> None:
        """If we leave the loop with a child alive (a bug, an exception): no agent runs on unsupervised."""
        child = self.child
        if child is None:
            return
        child.signal_group(signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            child.proc.wait(timeout=5)
        kill_leftovers(child.pgid, 0.5)
        child.close()
        self.child = None
        if not self.sm.state.terminal:
            with contextlib.suppress(SupervisorError, OSError):
                rundir.update_run_json(self.run_dir, status="stopped", ended=rundir.utc_now())
        reap_orphans()

    def _close_files(self) -> None:
        self.persist.close()
        for e in self.persist.take_errors():
            self.say(f"could not write run state: {e}")
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.events is not None:
            self.events.close()
            self.events = None
        self.sel.close()
