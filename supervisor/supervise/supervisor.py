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

Progress is counted only from records the attempt's own process tree wrote: the
SDK's ``start`` record names its pid, and after a ``start`` of another process (an
agent run by hand that took the journal lock) nothing is credited until one of
ours comes. An attempt that failed on that lock made no progress.

Resources running out (disk full, no descriptors, no memory: ``is_resource_error``)
are not the user's error and do not end supervision: an event that cannot be
written waits in memory and is retried (the torn part is cut off the file), as is
``run.json``; a spawn that fails for want of resources is retried after a backoff
without counting as an attempt; the control socket pauses accepting. What
happened is said on stderr at once and recorded as a ``resource-error`` event
once ``supervisor.jsonl`` can be written again.

This module holds the loop and an attempt's life (spawn, exit, the decision carried
out). Its parts live beside it: ``policy`` (the decision, a pure function),
``journal_watch`` (what each attempt committed), ``tree`` (the agent's processes:
cgroup, guardian, figures, final sweep), ``takeover`` (what is checked and recorded
before the first attempt) and ``reporting`` (events, ``run.json`` and stderr, on a
full disk too).
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import pauses, rundir
from ..core.events import EventLog
from ..core.llm_calls import CallsReader
from ..core.records import Kind
from ..core.redact import Redactor, redact_argv
from ..errors import SupervisorError, WorkspaceError
from .agentlog import AgentLog
from .commands import ControlCommands
from .control import ControlServer, Reply
from .journal_watch import JOURNAL_POLL_S, JournalWatch
from .lock import SupervisorLock
from .otlp_live import OtlpLive
from .persister import cut_torn_tail, is_resource_error
from .policy import (
    Action,
    Attempt,
    Decision,
    Facts,
    Options,
    Pending,
    Rollback,
    decide,
)
from .process import (
    Child,
    ExitStatus,
    become_subreaper,
    kill_leftovers,
    reap_orphans,
    set_traceparent,
)
from .reporting import RETRY_WRITE_S, Reporter
from .rollback import live_rollback
from .secrets import SecretsPipe
from .signals import SignalInbox
from .standby import Spawned, Standby
from .states import ProcessState, StateChange, StateMachine, StopRequest
from .takeover import check_journal_free, record_start, stop_leftovers
from .tree import AgentTree, is_ours

if TYPE_CHECKING:
    from .llm_proxy import LlmProxy  # aiohttp: imported only with --llm-proxy
    from .workspace_hooks import WorkspaceHooks  # watchfiles: imported only with a workspace

__all__ = ["EXIT_GAVE_UP", "Options", "Supervisor"]

S = ProcessState
EXIT_GAVE_UP = 1
"""The supervisor's exit code when the run failed (gave up, or the agent exited 78)."""

METRICS_INTERVAL_S = 1.0
EXIT_RESOURCES = 75
"""The supervisor's exit code when it could not start or record its end for want of resources (EX_TEMPFAIL)."""


class Supervisor:
    """Supervises one run directory. ``prepare()`` then ``run()``; ``run`` returns the exit code."""

    def __init__(self, run_dir: Path, argv: list[str], opts: Options, *, cwd: str | None = None) -> None:
        self.run_dir = run_dir.resolve()
        self.display_dir = run_dir
        self.argv = argv  # the real command, in memory only: files get redact_argv(argv)
        self.redactor = Redactor()  # secret env values; the agent's add_secret values come through the pipe
        self.secrets: SecretsPipe | None = None  # the current attempt's secrets pipe
        self.standby: Standby | None = None
        """The spawner already in the cgroup that starts restarted attempts (``standby``)."""
        self._subreaper = False
        self.opts = opts
        self.cwd = cwd or os.getcwd()
        self.sm = StateMachine()
        self.sm.listeners.append(self._on_state)
        self.state_since = rundir.utc_now()
        self.sel = selectors.DefaultSelector()
        self.lock = SupervisorLock(self.run_dir)
        self.report = Reporter(self.run_dir, quiet=opts.quiet)
        """Stderr lines, events and ``run.json`` changes, kept going when resources run out."""
        self.log: AgentLog | None = None
        self.server: ControlServer | None = None
        self.journal = JournalWatch(self.run_dir, is_ours=self._is_ours, say=self.say)
        self.attempt_no = 0
        self.restarts = 0
        self.no_progress = 0
        self.crash_loop_rolled_back = False
        self.child: Child | None = None
        self.cur: Attempt | None = None
        self.attempts: list[Attempt] = []
        self.tree = AgentTree(self.say)
        self.started = time.monotonic()
        self.exit_code = 0
        self._stop_deadline: float | None = None
        self._backoff_reason = "crash"  # the restart event after a backoff names the exit that caused it
        self._next_poll = 0.0
        self._next_metrics = 0.0
        self.signals = SignalInbox(self.sel, self._on_stop_signal)
        self._stop_signal: int | None = None
        self._leftovers: list[int] = []
        self.run_id = run_dir.name
        self.run_env: dict[str, str] = {}
        """What ``run.json``'s ``env`` adds to the agent's environment (a fork made with ``fork --env``)."""
        self._high_water: int | None = None  # effective steps before a crash-loop rollback
        self._loop_pause_until = 0.0
        self._otlp: OtlpLive | None = None
        self.traceparent = "off"
        """``on``/``replace``: the agent gets its attempt's ``TRACEPARENT`` (``process.set_traceparent``)."""
        self.llm_proxy: LlmProxy | None = None
        self._calls: CallsReader | None = None  # the live exporter's reader of llm.jsonl
        """``supervise --llm-proxy``: the model-call proxy, started before the first attempt, closed after the last."""
        self.workspace: WorkspaceHooks | None = None
        """The run's workspace: its snapshots and restores before each spawn, its live watch (``files`` events)."""

    @property
    def otlp(self) -> OtlpLive | None:
        """``supervise --otlp-endpoint``: the live span exporter (fed what the journal watcher reads and the events)."""
        return self._otlp

    @otlp.setter
    def otlp(self, exporter: OtlpLive | None) -> None:
        self._otlp = exporter
        if exporter is not None and self.llm_proxy is not None:  # the calls recorded before count in the totals
            self._calls = CallsReader(self.run_dir)
            exporter.calls(self._calls.read_new(), preload=True)
        self.report.tap = exporter.event if exporter is not None else None

    # ------------------------------------------------------------------ output
    def say(self, text: str) -> None:
        """A progress line on stderr (silenced by ``-q``)."""
        self.report.say(text)

    def emit(self, event: str, **fields: Any) -> None:
        """Append an event (with its time); on a full disk it waits in memory and is retried."""
        self.report.emit(event, self.attempt_no, {"ts": rundir.utc_now(), **fields})

    def resource_error(self, what: str, e: OSError) -> None:
        """A resource ran out: said on stderr, recorded as a ``resource-error`` event once it can be."""
        self.report.resource_error(what, e)

    def _report_export(self) -> None:
        """The live exporter's failure, once, as an ``export-error`` event (never fatal)."""
        assert self.otlp is not None
        for fields in self.otlp.take_reports():
            self.say(f"could not export spans to {fields.get('endpoint')}: {fields.get('error')}; the run goes on")
            self.emit("export-error", **fields)

    def _drain_secrets(self) -> None:
        """Learn the secret values the agent registered so far (before its output is redacted)."""
        sp = self.secrets
        if sp is not None and sp.read_fd >= 0:
            sp.drain()
            if sp.eof:
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(sp.read_fd)

    def _end_secrets(self) -> None:
        """The attempt is over: close its pipe (the values stay in the redactor for later attempts)."""
        sp, self.secrets = self.secrets, None
        if sp is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(sp.read_fd)
            sp.close()

    def _feed(self, stream: str, data: bytes) -> None:
        """Output to ``agent.log`` (and the terminal); on a full disk the file loses it, the agent goes on."""
        assert self.log is not None
        self._drain_secrets()  # a value the agent registered before it printed it is in the pipe now
        self._to_log(self.log.feed, stream, data, lost=len(data))

    def _to_log(self, fn: Any, *args: Any, lost: int = 0) -> None:
        """Call an ``AgentLog`` method that writes the file; a full disk costs the file those lines, nothing else."""
        assert self.log is not None
        try:
            fn(*args)
        except OSError as e:
            if not is_resource_error(e):
                raise
            cut_torn_tail(self.log.path)
            self.report.log_lost += lost
            self.resource_error(f"writing {rundir.AGENT_LOG}", e)

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
            self._leftovers = stop_leftovers(self.run_dir, previous, self.opts.stop_grace, self.say)
            check_journal_free(self.run_dir, self.display_dir)
            self.attempt_no, self.run_id = record_start(self.run_dir, self.display_dir, self.argv, self.redactor,
                                                        self.cwd)
            self.run_env = dict(rundir.read_run_json(self.run_dir).get("env") or {})  # a fork's change (fork --env)
            self.report.events = EventLog(self.run_dir, max_bytes=self.opts.log_max_bytes, keep=self.opts.log_keep)
            self.log = AgentLog(
                self.run_dir, redact=self.redactor, max_bytes=self.opts.log_max_bytes, keep=self.opts.log_keep, tee=self.opts.tee
            )
            loaded = self.journal.load()
            # a run begun without a supervisor numbered its attempts in the journal's start records: go on from them
            started = [e.get("attempt") for e in loaded if isinstance(e, dict) and e.get("kind") == Kind.START]
            self.attempt_no = max([self.attempt_no] + [a for a in started if isinstance(a, int)])
            del loaded
            self.server = ControlServer(self.run_dir, self.sel, ControlCommands(self).handle,
                                        on_error=self.resource_error)
            self.tree.start(self.run_dir, self.lock)
            if self.llm_proxy is not None:
                self.llm_proxy.start()
        except BaseException:
            self._close_files()
            self.tree.release(self.child)
            self.lock.release()
            raise
        self._subreaper = become_subreaper()
        self.emit(
            "supervisor-start", pid=os.getpid(), argv=redact_argv(self.argv, self.redactor), run_dir=str(self.run_dir),
            resumed_run=self.attempt_no > 0, leftovers_stopped=self._leftovers,
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
                    self._guarded("the supervisor loop", key.data)
                    if self.sm.state.terminal:
                        break
                if self.server is not None:
                    self._guarded("the control socket", self.server.pump)
                self._guarded("the supervisor loop", self._timers)
        finally:
            self._drop_standby()
            self._emergency_cleanup()
            self.signals.restore()
            self._close_files()
            self.tree.release(self.child)
            self.lock.release()
        return self.exit_code

    def _guarded(self, what: str, fn: Any) -> None:
        """Run a handler of the loop; a resource running out there is reported, not fatal (the loop retries)."""
        try:
            fn()
        except OSError as e:
            if not is_resource_error(e):
                raise
            self.resource_error(what, e)
            self._loop_pause_until = time.monotonic() + 0.05  # no hot spin on a level-triggered fd that fails

    def _timeout(self) -> float:
        now = time.monotonic()
        deadlines = [self._next_poll, self._next_metrics] if self.child else []
        if self._stop_deadline is not None:
            deadlines.append(self._stop_deadline)
        if self.sm.backoff_until is not None:
            deadlines.append(self.sm.backoff_until)
        for at in (self.report.events_retry_at, self.report.rj_retry_at, self.server.wake_at if self.server else None):
            if at is not None:
                deadlines.append(at)
        if not deadlines:
            return 1.0
        return max(0.0, min(deadlines) - now, self._loop_pause_until - now)

    def _timers(self) -> None:
        now = time.monotonic()
        if self.log is not None:
            self.log.flush_tee()
        self.report.retry_due(now)
        self.report.report_resources(now, self.attempt_no)
        if self.otlp is not None:
            self._report_export()
        if self.sm.backoff_until is not None and now >= self.sm.backoff_until and self.sm.state is S.BACKOFF:
            self.spawn(reason=self._backoff_reason)
            return
        if self.child is not None:
            self._child_timers(now)

    def _child_timers(self, now: float) -> None:
        """While an agent runs: the stop grace, the journal poll (and the hang watchdog), the metrics."""
        assert self.child is not None
        if self._stop_deadline is not None and now >= self._stop_deadline:
            self._stop_deadline = None
            self.say(f"attempt {self.attempt_no} did not stop within {self.opts.stop_grace:g} s: SIGKILL to its process group")
            self.child.signal_group(signal.SIGKILL)
        if now >= self._next_poll:
            self._next_poll = now + JOURNAL_POLL_S
            self._guarded("reading the journal", self.poll_journal)
            self._check_hang(now)
        if now >= self._next_metrics and self.child is not None:
            self._next_metrics = now + METRICS_INTERVAL_S
            self._guarded("sampling the agent's processes", self._sample_metrics)
            # the next attempt's process, from the first sample on (0.2 s): not in the agent's start-up
            self._guarded("starting the standby", self._make_standby)

    # ------------------------------------------------------------------ spawning
    def _child_argv(self, resume: bool) -> list[str]:
        flag = self.opts.resume_flag
        if resume and flag and flag not in self.argv:
            return [*self.argv, flag]
        return list(self.argv)

    def spawn(self, *, reason: str) -> None:
        """Start the next attempt, with the resume flag once there is something to resume."""
        assert self.log is not None
        self.attempt_no += 1
        resume = self.attempt_no > 1 or self.journal.records > 0
        if reason != "start":
            self.restarts += 1
        if self.sm.state is not S.STARTING:
            self.sm.change(S.STARTING, reason=reason, resume=resume)
        if self.workspace is not None and not self._workspace_ready(reason):
            return
        argv = self._child_argv(resume)
        env = self._child_env(resume)
        self._end_secrets()
        try:
            self.secrets = SecretsPipe(self.redactor)
            env.update(self.secrets.env())
            proc = self._spawn_in_standby(argv, env, self.secrets)
            child = Child(argv, env, cwd=self.cwd, cgroup=self.tree.cgroup, pass_fds=self.secrets.pass_fds, proc=proc)
        except OSError as e:
            self._end_secrets()
            self._spawn_failed(e, reason)
            return
        self._started(child, argv, resume)

    def _spawn_in_standby(self, argv: list[str], env: dict[str, str], secrets: SecretsPipe) -> Spawned | None:
        """The attempt started by the standby, or ``None``: no standby, or it could not (spawn with ``Popen``).
        Raises ``OSError`` as ``Popen`` does when the command cannot be executed."""
        standby = self.standby
        if standby is None:
            return None
        proc = standby.spawn(argv, env, self.cwd, secrets)
        if proc is None:  # dropped: a new one is made at the next sample
            self.standby = None
            self.tree.helpers.discard(standby.pid)
        return proc

    def _make_standby(self) -> None:
        """Start the standby (again, if it died) off the restart path; none where it cannot run."""
        if self.standby is not None and not self.standby.alive():
            self._drop_standby()
        if self.standby is None and self._subreaper:  # its children reach us by adoption
            try:
                self.standby = Standby.make(self.cwd, self.tree.cgroup)
            except OSError:
                return  # out of descriptors: restarts spawn with Popen
            if self.standby is not None:
                self.tree.helpers.add(self.standby.pid)

    def _drop_standby(self) -> None:
        standby, self.standby = self.standby, None
        if standby is not None:
            self.tree.helpers.discard(standby.pid)
            standby.drop()

    def _workspace_ready(self, reason: str) -> bool:
        """Before a spawn, the workspace's part (``WorkspaceHooks.before_spawn``). An error there stops the run
        before the agent starts (resumable: nothing is lost); resources running out back off, as for a spawn."""
        assert self.workspace is not None
        try:
            self.workspace.before_spawn(self.journal.records)
            return True
        except (WorkspaceError, OSError) as e:
            if isinstance(e, OSError) and is_resource_error(e):
                self._spawn_failed(e, reason)  # a backoff, not an attempt
                return False
            self.attempt_no -= 1
            self.say(f"the agent was not started: {e}")
            self._finish(S.STOPPED, "stopped", reason=f"workspace: {e}")
            self.exit_code = self.exit_code or EXIT_GAVE_UP
        return False

    def _child_env(self, resume: bool) -> dict[str, str]:
        """The agent's environment: ours, plus the run directory, run id, attempt, resume and supervisor pid."""
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
        env.pop(rundir.ENV_WORKSPACE, None)  # an outer run's is not this one's
        env.update(self.run_env)
        env.update(self.workspace.env() if self.workspace is not None else {})
        # Python agents buffer a piped stdout: the terminal, agent.log and the hang watchdog would see nothing
        env.setdefault("PYTHONUNBUFFERED", "1")
        set_traceparent(env, self.run_dir, self.attempt_no, self.traceparent)
        if self.llm_proxy is not None:
            self.llm_proxy.new_attempt(self.attempt_no)  # served what the files hold now (a rollback's cut too)
            env.update(self.llm_proxy.env())
        return env

    def _spawn_failed(self, e: OSError, reason: str) -> None:
        """The agent could not be started: for want of resources a backoff (not an attempt), else a failed attempt."""
        if is_resource_error(e):
            # no descriptors, no memory, too many processes: not the agent's failure; try again later
            self.attempt_no -= 1
            self.resource_error("starting the agent", e)
            delay = max(RETRY_WRITE_S, self.opts.backoff_initial)
            self._backoff_reason = reason
            self.sm.change(S.BACKOFF, delay_s=delay, attempts_without_progress=self.no_progress,
                           reason=f"resources: {e.strerror or e}")
            return
        # the command vanished or lost its x bit since the check: a failed attempt, not a crash of ours
        self.say(f"attempt {self.attempt_no} could not start: {e.strerror or e}")
        self.emit("exit", pid=None, code=127, signal=None, uptime_s=0.0, step=None,
                  stderr_tail=[os.fsdecode(self.redactor(os.fsencode(str(e))))],
                  progress=0, reason="spawn-failed", leftovers_killed=[])
        self.cur = Attempt(self.attempt_no, 0)
        self.cur.status = ExitStatus(127, None)
        self.attempts.append(self.cur)
        self._after_exit(self.cur, None)

    def _started(self, child: Child, argv: list[str], resume: bool) -> None:
        """The attempt runs: its fds in the loop, the guardian and the lock told, the state and ``run.json`` changed."""
        assert self.log is not None and self.secrets is not None
        self.child = child
        self.tree.spawned(child)
        self.journal.new_attempt()
        self.cur = Attempt(self.attempt_no, child.pid, records_at_start=self.journal.records)
        self.attempts.append(self.cur)
        self.sel.register(child.pidfd, selectors.EVENT_READ, self._on_child_exit)
        self.sel.register(child.out_fd, selectors.EVENT_READ, lambda: self._on_output("stdout"))
        self.sel.register(child.err_fd, selectors.EVENT_READ, lambda: self._on_output("stderr"))
        self.secrets.spawned()
        self.sel.register(self.secrets.read_fd, selectors.EVENT_READ, self._drain_secrets)
        shown = redact_argv(argv, self.redactor)
        self._to_log(self.log.begin_attempt, self.attempt_no, child.pid, shown)
        via: dict[str, Any] = {"standby": True} if isinstance(child.proc, Spawned) else {}
        self.sm.change(S.RUNNING, pid=child.pid, argv=shown, resume=resume, **via)
        now = time.monotonic()
        self._next_poll = now + JOURNAL_POLL_S
        self._next_metrics = now + 0.2  # a first figure soon, for a status right after the start
        flag = self.opts.resume_flag
        self.say(f"attempt {self.attempt_no} started (pid {child.pid}){' with ' + flag if resume and flag else ''}")
        try:
            self.lock.record_child(child.pid, child.create_time)
        except OSError as e:
            self.resource_error(f"writing {rundir.SUPERVISOR_LOCK}", e)
        # durability off the restart path (the spawn event above is already written, not yet fsynced)
        events = self.report.events
        assert events is not None
        self.report.run_json(attempts=self.attempt_no, status="running")
        self.report.persist.submit(events.flush)
        if self.attempt_no > 1:  # restarts happen: the standby now, not only after 0.2 s (a crash loop's are shorter)
            self._guarded("starting the standby", self._make_standby)

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
            self._feed(stream, data)
            if self.cur is not None:
                self.cur.last_activity = time.monotonic()

    def poll_journal(self) -> None:
        """Read the journal records committed since the last poll (only if the file changed)."""
        ws = self.workspace
        if ws is not None:
            ws.drain()  # the workspace's changes seen so far: the records read next place them
        # the records themselves only when someone reads them (the workspace's step clock, the live exporter)
        new = self.journal.poll(self.cur, self.attempt_no, records=ws is not None or self.otlp is not None)
        if self.journal.paused_new or (self.llm_proxy is not None and self.llm_proxy.paused_new):
            self._paused()
        if ws is not None:
            ws.journal(new, running=self.cur is not None and self.cur.status is None)
        if self.otlp is None:
            return
        if new:
            self.otlp.journal(new)
        if self._calls is not None:  # the proxied calls, after the journal's records of the same poll
            self.otlp.calls(self._calls.read_new())

    def _is_ours(self, pid: Any, supervisor: Any = None, attempt: Any = None) -> bool:
        """Whether a ``start`` record was written by the current attempt (``tree.is_ours``)."""
        return is_ours(self.child, self.attempt_no, pid, supervisor, attempt)

    def _paused(self) -> None:
        """Pauses just read: said, and an event each (``paused``, or ``asked`` for ``run.ask``) for notifications."""
        held = self.llm_proxy.paused_new if self.llm_proxy is not None else []
        while held:  # model calls the proxy holds (appended from its thread: taken one by one)
            self.journal.paused_new.append(held.pop(0))
        for p in self.journal.paused_new:
            self.say(f"{pauses.pause_text(p)}: answer with 'agent-supervisor "
                     f"{'answer ' + str(self.run_dir) + ' VALUE' if p.get('reason') == 'ask' else 'continue ' + str(self.run_dir)}'")
            fields = {k: p.get(k) for k in ("step", "pos", "reason", "pattern", "inputs", "prompt", "choices") if k in p}
            self.emit("asked" if p.get("reason") == "ask" else "paused", pause_seq=p.get("seq"), **fields)
        self.journal.paused_new.clear()

    def _check_hang(self, now: float) -> None:
        limit = self.opts.hang_timeout
        cur = self.cur
        if not limit or cur is None or self.sm.state is not S.RUNNING:
            return
        if self.journal.pauses or (self.llm_proxy is not None and self.llm_proxy.pauses):
            # a step (or a model call the proxy holds) waits for a person: no hang; idle time counts from the answer
            cur.last_activity = now
            return
        idle = now - cur.last_activity
        if idle >= limit:
            self.say(f"attempt {cur.number} hung: no journal record and no output for {idle:.1f} s"
                     f"{' in step ' + cur.in_flight if cur.in_flight else ''}; stopping it")
            self.begin_stop(Pending.HANG, event="hang", pid=cur.pid, idle_s=round(idle, 3), step=cur.in_flight,
                            hang_timeout_s=limit)

    def _sample_metrics(self) -> None:
        """The tree's figures for the status, and the memory watchdog."""
        if self.child is None:
            return
        sample = self.tree.measure(self.child)
        if sample is None:
            return
        limit = self.opts.max_rss
        if limit and sample.rss_bytes > limit and self.sm.state is S.RUNNING:
            self.say(f"attempt {self.attempt_no} uses {sample.rss_bytes} bytes of memory, over --max-rss {limit}; stopping it")
            self.begin_stop(Pending.MEMORY_LIMIT, event="memory-limit", pid=self.child.pid,
                            rss_bytes=sample.rss_bytes, max_rss=limit,
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
                self._feed(stream, data)
        self.journal.forget_stat()
        self._guarded("reading the journal", self.poll_journal)
        grace = min(self.opts.stop_grace, 3.0)
        exclude = self.tree.not_orphans(None)  # the guardian
        try:
            killed = kill_leftovers(child.pgid, grace, exclude=exclude, log=self.say, cgroup=child.cgroup)
        except OSError as e:
            if not is_resource_error(e):
                raise
            # no descriptors to look through /proc: the blunt way, the next sweeps look again
            self.resource_error("stopping the agent's leftovers", e)
            child.signal_group(signal.SIGKILL)
            if child.cgroup is not None:
                with contextlib.suppress(OSError):
                    child.cgroup.kill()
            killed = []  # the next sweeps (the next exit, the end) look again
        for fd, stream in ((child.out_fd, "stdout"), (child.err_fd, "stderr")):
            data = child.read_available(fd)
            if data:
                self._feed(stream, data)
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(fd)
        self._drain_secrets()
        self._to_log(self.log.end_attempt)
        self._end_secrets()
        child.close()
        self.child = None
        self.tree.sampler = None
        self._stop_deadline = None
        pending = self.sm.take_pending()
        cur.reason = pending.action if pending else None
        step = cur.ended_in
        cur.stderr_tail = self.log.stderr_tail()
        self.emit(
            "exit", pid=cur.pid, code=status.code, signal=status.signal, uptime_s=cur.uptime_s, step=step,
            stderr_tail=cur.stderr_tail, progress=cur.progress, reason=cur.reason,
            leftovers_killed=killed,
        )
        self._say_exit(cur, killed, unfinished=status.code == 0 and bool(cur.flying) and pending is None)
        with contextlib.suppress(OSError):
            self.lock.clear_child()
        self._after_exit(cur, pending)

    def _say_exit(self, cur: Attempt, killed: list[int], *, unfinished: bool) -> None:
        """The one line that says how an attempt ended (``unfinished``: exit 0 with a step in flight, a crash)."""
        assert cur.status is not None
        step = cur.ended_in
        where = f" in step {step}" if step else ""
        self.say(f"attempt {cur.number} exited with {cur.status.describe()}{where} after {cur.uptime_s:.1f} s"
                 + (f" ({cur.reason})" if cur.reason else "")
                 + (f"; stopped {len(killed)} leftover process(es)" if killed else "")
                 + ("; the step never finished, so this is a crash, not a success: it runs again" if unfinished else ""))

    def _after_exit(self, cur: Attempt, pending: StopRequest | None) -> None:
        """Carry out what ``policy.decide`` says from the facts of the attempt that ended."""
        status = cur.status
        assert status is not None
        action = Pending(pending.action) if pending else None
        d = decide(Facts(
            code=status.code, signal=status.signal, progress=cur.progress, no_progress=self.no_progress,
            crash_loop_rolled_back=self.crash_loop_rolled_back, paused=self.sm.paused, pending=action,
            high_water=self._high_water, effective_steps=self.journal.fold.step_count, rolled_back=cur.rollbacks > 0,
            in_flight=bool(cur.flying),
        ), self.opts)
        self.no_progress = d.no_progress
        self.crash_loop_rolled_back = d.crash_loop_rolled_back
        self._high_water = d.high_water
        if d.action in (Action.STOP, Action.SUCCEED, Action.FAIL, Action.GIVE_UP):
            self._end_run(d, cur)
            return
        if self._same_startup_failure(cur, pending):
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
            assert self.report.events is not None
            self.report.persist.submit(self.report.events.flush)

    def _end_run(self, d: Decision, cur: Attempt) -> None:
        """The decision ends the run: stopped, succeeded, failed (the agent's exit 78) or given up."""
        if d.action is Action.STOP:
            self._finish(S.STOPPED, "stopped")
        elif d.action is Action.SUCCEED:
            self._finish(S.SUCCEEDED, "succeeded")
        elif d.action is Action.FAIL:
            # the agent's own last word (the SDK prints why on one line: a damaged line, a divergence)
            tail = self.log.stderr_tail(5) if self.log is not None else []
            last = next((ln.strip() for ln in reversed(tail) if ln.strip()), "")
            reason = f"{d.reason}: {last}" if last else (d.reason or "")
            self.say(f"attempt {cur.number} reported a permanent failure (exit {rundir.EXIT_FAILED}): not restarting"
                     + (f"; it said: {last}" if last else ""))
            self._finish(S.FAILED, "failed", reason=reason)
        else:
            self._give_up()

    def _crash_loop_rollback(self) -> None:
        """Roll back once to the latest checkpoint; later attempts count as progress only past the old high-water mark.

        Without the mark, re-running the abandoned steps would look like progress
        and a deterministic crash would loop forever between rollback and crash.
        """
        fold = self.journal.fold
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
        except OSError as e:
            if not is_resource_error(e):
                raise
            self.resource_error("appending the crash-loop rollback", e)
            return
        self._high_water = high_water

    def do_rollback(self, checkpoint: str, reason: str, by: str, reply: Reply | None = None) -> None:
        """Roll back now (the agent is gone): ``rollback.live_rollback``; the restore comes before the next spawn."""
        live_rollback(self, checkpoint, reason, by, reply)

    def _same_startup_failure(self, cur: Attempt, pending: StopRequest | None) -> bool:
        """Two attempts in a row that failed alike before their first journal record (the same exit and the same
        last stderr lines: an import error, a missing file) fail at start-up for good: given up now, with the
        error, rather than retried to the give-up limit. ``True``: the run ended."""
        prev = self.attempts[-2] if len(self.attempts) >= 2 else None
        if prev is None or pending is not None or not _startup_failure(cur, self.journal.records) or \
                not _startup_failure(prev, cur.records_at_start) or _fingerprint(prev) != _fingerprint(cur) or \
                not _DETERMINISTIC.search(cur.last_error):
            return False
        why = cur.last_error or f"exit {cur.status.describe() if cur.status else '?'}"
        self.say(f"attempts {prev.number} and {cur.number} failed the same way before their first step: {why}; "
                 f"a start-up failure is not retried further (fix it, then supervise --run-dir {self.display_dir} again)")
        self._finish(S.FAILED, "failed", reason=f"the agent fails at start-up: {why}", attempts=[
            {"attempt": a.number, "code": a.status.code if a.status else None,
             "signal": a.status.signal if a.status else None, "uptime_s": a.uptime_s, "error": a.last_error}
            for a in (prev, cur)])
        return True

    def _give_up(self) -> None:
        recent = self.attempts[-self.opts.give_up_after :]
        summary = [
            {"attempt": a.number, "code": a.status.code if a.status else None,
             "signal": a.status.signal if a.status else None, "step": a.ended_in,
             "uptime_s": a.uptime_s, "reason": a.reason, "error": a.last_error}
            for a in recent
        ]
        self.say(f"gave up after {self.no_progress} attempts in a row without progress; the run directory keeps everything:")
        for s in summary:
            how = f"signal {s['signal']}" if s["signal"] else f"code {s['code']}"
            self.say(f"  attempt {s['attempt']}: {how} after {s['uptime_s']:.1f} s"
                     + (f" in step {s['step']}" if s["step"] else "") + (f" ({s['reason']})" if s["reason"] else "")
                     + (f": {s['error']}" if s["error"] else ""))
        last = recent[-1].last_error if recent else ""
        self._finish(S.FAILED, "failed", reason=f"{self.no_progress} attempts without progress"
                     + (f"; the last said: {last}" if last else ""), attempts=summary)

    def _finish(self, state: ProcessState, status: str, **fields: Any) -> None:
        """Enter a terminal state (it records its event), then ``run.json`` and the exit code."""
        if state is S.STOPPED and self._stop_signal:
            fields["signal"] = signal.Signals(self._stop_signal).name
        self.sm.change(state, status=status, restarts=self.restarts, **fields)
        # why a run failed stays in run.json for 'status' and the runs list (None clears an older one)
        why = fields.get("reason") if state is S.FAILED else None
        if state is S.SUCCEEDED:
            self.exit_code = 0
        elif state is S.FAILED:
            self.exit_code = EXIT_GAVE_UP
        else:
            self.exit_code = 128 + self._stop_signal if self._stop_signal else 0
        # after the code it would end with: an end that cannot be recorded makes it EXIT_RESOURCES, as documented
        if not self._write_final(status=status, ended=rundir.utc_now(), attempts=self.attempt_no, reason=why):
            return
        if state is S.SUCCEEDED:
            self.say(f"run succeeded after {self.attempt_no} attempt(s)")
        elif state is not S.FAILED:
            self.say(f"stopped; resume with 'agent-supervisor supervise --run-dir {self.display_dir}'")

    def _write_final(self, **changes: Any) -> bool:
        """The final status, written last; retried for ``FINAL_WRITE_S`` on a full disk, then said on stderr
        and the exit code is ``EXIT_RESOURCES``. ``False`` if it could not be written."""
        if self.report.write_final(self.attempt_no, **changes):
            return True
        status = changes.get("status")
        self.say(f"could not record the end of the run ({status}) for want of resources; "
                 f"{rundir.RUN_JSON} or {rundir.SUPERVISOR_EVENTS} may not say it: free space, then "
                 f"'agent-supervisor supervise --run-dir {self.display_dir}' sets it right")
        self.exit_code = EXIT_RESOURCES
        return False

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
        if child.cgroup is not None:
            child.cgroup.kill()
        with contextlib.suppress(ChildProcessError, subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            kill_leftovers(child.pgid, 0.5, exclude=self.tree.not_orphans(child) - {child.pid}, cgroup=child.cgroup)
        child.close()
        self.child = None
        if not self.sm.state.terminal:
            with contextlib.suppress(SupervisorError, OSError):
                rundir.update_run_json(self.run_dir, status="stopped", ended=rundir.utc_now())
        reap_orphans(self.tree.not_orphans(self.child))

    def _close_files(self) -> None:
        if self.workspace is not None:  # its last changes recorded while the event file is open
            self.workspace.close()  # idempotent
        if self.llm_proxy is not None:  # after the last attempt: its calls in flight recorded (then exported)
            self.llm_proxy.close()
            self.llm_proxy = None
        if self.otlp is not None:  # the last spans (the root among them), before the event file closes
            if self._calls is not None:
                with contextlib.suppress(OSError):
                    self.otlp.calls(self._calls.read_new())
            self.otlp.close()
            self._report_export()
            self.otlp = None
        self._end_secrets()
        self.report.finish_writes()
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.log is not None:
            try:
                self.log.close()
            except OSError as e:
                self.say(f"could not finish {rundir.AGENT_LOG}: {e.strerror or e}")
            self.log = None
        self.report.close_events()
        self.sel.close()


_DETERMINISTIC = re.compile(
    r"^(?:\w+\.)*(?:ModuleNotFoundError|ImportError|SyntaxError|IndentationError|NameError|FileNotFoundError|"
    r"IsADirectoryError|NotADirectoryError|PermissionError)\b|No such file or directory|command not found|"
    r"can't open file|cannot open|is not recognized"
)
"""An error that fails the same way every time it starts (a missing module or file, a syntax error): seen twice
alike before the first step, the run is not retried further. Other errors (a network refused, a 503) are retried
as the policy says."""


def _startup_failure(a: Attempt, records_at_exit: int) -> bool:
    """An attempt that failed (not by a stop of ours) before it wrote a record but its ``start`` (the SDK's, at
    ``Run.open``): no step began."""
    st = a.status
    return (st is not None and (st.code not in (0, None) or st.signal is not None) and a.reason is None
            and a.progress == 0 and a.records_at_start >= 0 and records_at_exit <= a.records_at_start + 1)


def _fingerprint(a: Attempt) -> tuple[Any, ...]:
    """How an attempt failed: its exit and its last stderr lines."""
    st = a.status
    return (st.code if st else None, st.signal if st else None, tuple(ln.strip() for ln in a.stderr_tail[-3:]))
