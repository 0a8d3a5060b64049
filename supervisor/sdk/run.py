"""The agent's entry point: :class:`Run`, a facade over the parts of a run (see the package's docstring).

    with Run.open() as run:
        plan = run.step("plan", make_plan, task)
        run.checkpoint("plan-done")
        for q in plan["queries"]:
            hits = run.step(f"search:{q}", search, q)

On resume (the run directory already has a journal) every finished step returns
its recorded output without calling its function; the first step the journal
does not have runs live. See docs/sdk.md for the failure policy and exit codes.
"""

from __future__ import annotations

import functools
import operator
import os
import sys
import threading
import weakref
from collections.abc import Callable
from itertools import compress, repeat
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import orjson

from ..core import checkpoints, rundir, wire
from ..core.history import Fold, History
from ..core.journal_reader import JournalReader, ResumeView
from ..core.journal_writer import JournalWriter, open_journal
from ..core.records import Kind, Record
from ..core.redact import Redactor, redact_argv, send_secrets
from ..errors import DivergenceError, JournalLockedError, ReplayError, SupervisorError
from ..replay.session import ReplaySession, open_replay_dir
from .breaks import Gate, ask_pause, ask_result
from .exits import EXIT_ERROR, check_run_files, check_writable, default_run_dir, exiting, locked_message, os_error
from .names import StepNames
from .options import CURRENT, NO_OPTS, RetryPolicy, StepOptions, _Opts
from .recorder import Recorder
from .serve import Phase, Server
from .shadow import Shadow
from .steps import Steps

if TYPE_CHECKING:
    from ..core.workspace import Settings

P = ParamSpec("P")
T = TypeVar("T")

_ON_CHANGED = ("warn", "error", "rerun")
_DUMPS_OPTS = orjson.OPT_NON_STR_KEYS


class Run:
    """A run of an agent: its journal, its state and its checkpoints.

    Create it with :meth:`Run.open`. ``step`` may be called from several threads at once and
    ``astep`` from concurrent tasks; see docs/sdk.md for how overlapping steps are matched on resume.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        max_failures: int = 3,
        max_rollbacks: int = 3,
        retries: int = 2,
        transient: tuple[type[BaseException], ...] = (),
        backoff: float = 0.5,
        backoff_max: float = 30.0,
        secrets: tuple[str, ...] | list[str] = (),
        rotate_bytes: int | None = None,
        on_changed_inputs: str = "warn",
        workspace: str | os.PathLike[str] | None = None,
    ) -> None:
        if on_changed_inputs not in _ON_CHANGED:
            raise ValueError(f"on_changed_inputs={on_changed_inputs!r}: use 'warn', 'error' or 'rerun'")
        self.replay_mode = os.environ.get(rundir.ENV_REPLAY, "")
        # replay modes open the run directory read-only: no dir, run.json, lock, journal line or checkpoint is created
        self.run_dir = open_replay_dir(run_dir) if self.replay_mode else rundir.ensure_dir(run_dir)
        self.supervised = bool(os.environ.get(rundir.ENV_SUPERVISED))
        self.redactor = Redactor(secrets)
        send_secrets(self.redactor.values)  # the supervisor redacts agent.log and its events with them too
        meta = self._run_json()
        self.run_id: str = str(meta.get("id") or self.run_dir.name)
        self.on_changed_inputs = on_changed_inputs
        writer, view = self._open_journal(rotate_bytes)
        self._workspace = self._open_workspace(meta, workspace, writer, new_run=not view.entries)
        # The resume view (every recorded step, the effective records) serves positions not yet reached; the
        # first live step lets go of it, and live records are only counted: memory stays flat however long the run.
        fold = self._fold = Fold()
        fold.extend(view.entries, view.overlaps)
        resumed = fold.history
        self._pending_checkpoints = list(resumed.checkpoints)
        self.attempt = int(os.environ.get(rundir.ENV_ATTEMPT) or _starts(resumed.entries) + 1)
        self.resuming = bool(resumed.steps) or os.environ.get(rundir.ENV_RESUME) == "1"
        session = None
        if self.replay_mode:
            session = ReplaySession.from_env(self.replay_mode, self.run_dir, self.run_id, resumed.steps, self.redactor)
        self._lock = threading.Lock()
        self._shadow = Shadow(self.run_dir, fold, bool(self.replay_mode), _stop_unset)
        self._recorder = Recorder(writer, fold, self._shadow, self.attempt)
        self._server = Server(self.run_dir, fold, self._shadow, session, on_changed_inputs, self._recorder.note)
        self._server.rerun = meta.get("rerun") or None  # a fork made to run some recorded steps again
        self._shadow.stop = functools.partial(_stop_at_damaged, self._recorder, self._server)
        self._steps = Steps(
            self._lock, self._server, self._recorder, self._shadow, RetryPolicy(retries, transient, backoff, backoff_max),
            max_failures, max_rollbacks, resumed.consecutive_failures(), f"{self.run_id}:", _weak_close(self),
        )
        if self._workspace is not None and writer is not None:
            self._steps.before_rollback = functools.partial(_abandoned, self.run_dir)
        if writer is not None:  # a replay pauses nowhere
            self._steps.gate = Gate(self.run_dir, self._recorder, self._lock, resumed.pauses)
        self._call = self._steps.call  # run.step's one frame less (a million served steps go through it)
        self._recorder.append(self._start_record(len(resumed.steps)))
        if os.environ.get("TRACEPARENT") and not self.replay_mode:  # the agent's own spans under the attempt's
            from .trace_context import join_env_trace  # only then: `from supervisor import Run` stays as fast

            join_env_trace()

    def _run_json(self) -> dict[str, Any]:
        """``run.json``, written first for a new run (not in a replay: it only reads)."""
        meta = rundir.read_run_json(self.run_dir)
        if not self.replay_mode and not (self.run_dir / rundir.RUN_JSON).exists():
            meta = rundir.update_run_json(
                self.run_dir,
                id=self.run_dir.name,
                command=redact_argv([sys.executable, *sys.argv], self.redactor),
                cwd=os.getcwd(),
                created=rundir.utc_now(),
                status="running",
            )
        return meta

    def _open_journal(self, rotate_bytes: int | None) -> tuple[JournalWriter | None, ResumeView]:
        """The writer (``None`` in a replay) and the journal's entries, lazy: finished steps stay unparsed until
        served, and begin records are not kept (resuming 1,000,000 steps builds no million dicts)."""
        if self.replay_mode:
            return None, JournalReader(self.run_dir).resume_view()
        kw: dict[str, Any] = {} if rotate_bytes is None else {"rotate_bytes": rotate_bytes}
        writer, view = open_journal(self.run_dir, redact=self.redactor, **kw)
        checkpoints.clean_stale_tmp(self.run_dir)  # a killed checkpoint write's temporary file (we hold the lock)
        return writer, view

    def _open_workspace(
        self, meta: dict[str, Any], argument: str | os.PathLike[str] | None, writer: JournalWriter | None,
        *, new_run: bool,
    ) -> Settings | None:
        """The run's workspace (:mod:`.workspace`); with the journal locked and before any agent code, a killed
        rollback's restore finished and a new run's ``start`` snapshot taken. A failure lets go of the lock."""
        from . import workspace as ws

        try:
            settings = ws.resolve(self.run_dir, meta, argument, write=writer is not None)
            if settings is not None and writer is not None:
                ws.at_start(self.run_dir, settings, new_run=new_run)
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        return settings

    def _start_record(self, replayable: int) -> Record:
        sup = os.environ.get(rundir.ENV_SUPERVISED, "")
        return {
            "kind": Kind.START,
            "attempt": self.attempt,
            "pid": os.getpid(),
            "resume": self.resuming,
            "replayable_steps": replayable,
            # this attempt's begin/step records carry k (absent: 0), the (step, k) identity of their call
            "numbering": "name-k",
            "argv": redact_argv(sys.argv, self.redactor),
            # the supervisor's pid: it tells this attempt's records from another writer's, even behind sh -c
            **({"supervisor": int(sup)} if sup.isdigit() else {}),
        }

    # ------------------------------------------------------------------ opening and closing
    @classmethod
    def open(cls, run_dir: str | os.PathLike[str] | None = None, **options: Any) -> Run:
        """Open the run directory from the argument, else the supervisor's environment, else ``./runs/<script>``.

        The environment wins over the default but not over an explicit argument.
        Options: ``max_failures``, ``max_rollbacks``, ``retries``, ``transient``,
        ``backoff``, ``backoff_max``, ``secrets``, ``rotate_bytes``, ``on_changed_inputs``
        (``"warn"``, ``"error"`` or ``"rerun"``: what a served step whose inputs changed does),
        ``workspace`` (the directory the agent works in, kept with the run: see docs/workspace.md;
        the supervisor's ``AGENT_SUPERVISOR_WORKSPACE`` and the one ``run.json`` declares win over it).

        A run directory that cannot be opened (another agent writes it, a bad
        ``run.json``, a read-only file system, a directory where a run file belongs)
        is an error of :mod:`supervisor.errors`, printed on one line to stderr: if
        nothing catches it, the agent ends with exit 2 and no traceback (it is also
        a ``SystemExit``). ``Run(...)`` raises the same errors without printing.
        """
        if run_dir is None:
            env = os.environ.get(rundir.ENV_RUN_DIR)
            path = Path(env) if env else default_run_dir()
        else:
            path = Path(run_dir)
        try:
            check_run_files(path)
            if not os.environ.get(rundir.ENV_REPLAY):  # a replay only reads
                check_writable(path)
            return cls(path, **options)
        except JournalLockedError as e:
            raise exiting(JournalLockedError(locked_message(path)), EXIT_ERROR) from e
        except SupervisorError as e:
            raise exiting(e, EXIT_ERROR) from None
        except OSError as e:
            raise exiting(os_error(path, e), EXIT_ERROR) from e

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        s = self._server.session
        if s is not None:
            s.finish(self._steps.pos, exc, self._server.unserved())
        if isinstance(exc, (DivergenceError, ReplayError)):
            self.note("divergence", error=str(exc))
            self.close(status="failed")
            raise exiting(exc, rundir.EXIT_FAILED) from None
        # The journal or the run directory failing under the agent (a SupervisorError: disk full, the
        # file system gone read-only) ends it with one line and exit 2, as at open; closing may fail
        # the same way. The agent's own exceptions (an OSError of its own included) pass through.
        err = exc if isinstance(exc, SupervisorError) else None
        try:
            self.close(status="succeeded" if exc is None else None)
        except (SupervisorError, OSError) as e:
            if self._recorder.writer is not None:
                self._recorder.writer.close()  # the lock goes with it
            if exc is not None and err is None:
                raise  # shown with the agent's own exception, its context
            err = err or (e if isinstance(e, SupervisorError) else os_error(self.run_dir, e))
        if err is not None:
            raise exiting(err, EXIT_ERROR) from None

    def close(self, status: str | None = None) -> None:
        """Close the journal; outside a supervisor, record ``status`` in ``run.json``."""
        server, shadow = self._server, self._shadow
        if not server.to_closed():
            return
        if not shadow.live and not server.left and self._fold.history.effective:
            shadow.replay_to(self._fold.history.effective[-1]["seq"])
            shadow.live = True
        if shadow.live and not self.replay_mode and shadow.changed():
            # changes made after the last step would be lost on resume: record them
            rec: Record = {"kind": Kind.NOTE, "message": "state at exit"}
            shadow.with_patch(rec)
            self._recorder.append(rec)
        if status and not self.supervised and not self.replay_mode:
            rundir.update_run_json(self.run_dir, status=status, ended=rundir.utc_now())
        if server.session is not None:
            server.session.finish(self._steps.pos, None, server.unserved())
        if self._steps.gate is not None:
            self._steps.gate.close()
        if self._recorder.writer is not None:
            self._recorder.writer.close()

    # ------------------------------------------------------------------ steps
    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` as the step ``name`` or, on resume, return its recorded output.

        Safe from several threads at once; the step's position is taken when it is called.
        """
        out: T = self._call(name, fn, args, kwargs, NO_OPTS)
        return out

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``await run.astep(name, fn, *args)``: :meth:`step` for asyncio. ``fn`` is a coroutine function or a
        plain one (a plain one runs in the event loop's thread, or in a worker thread when it has a timeout)."""
        return await self._steps.acall(name, fn, args, kwargs, NO_OPTS)

    def ask(self, prompt: str, *, choices: list[Any] | None = None, default: Any = None,
            timeout: float | None = None) -> Any:
        """A durable step whose output a person gives: the run pauses on the question until
        ``agent-supervisor answer RUN VALUE`` (or the dashboard) answers it; on resume the answer is served.

        ``choices``: the answers allowed. ``timeout`` seconds without an answer: ``default``, or
        :class:`AskTimeout` without one. Its step is named ``ask``.
        """
        kw = _ask_kwargs(choices, default, timeout)
        return self._call("ask", self._ask, (prompt,), kw, _ASK_OPTS)

    async def aask(self, prompt: str, *, choices: list[Any] | None = None, default: Any = None,
                   timeout: float | None = None) -> Any:
        """:meth:`ask` for asyncio: the task waits for the answer, the others go on."""
        kw = _ask_kwargs(choices, default, timeout)
        return await self._steps.acall("ask", self._aask, (prompt,), kw, _ASK_OPTS)

    def _ask(self, prompt: str, choices: list[Any] | None = None, default: Any = None,
             timeout: float | None = None) -> Any:
        gate = self._asking()
        pause = ask_pause(gate, prompt, choices, default)
        return ask_result(gate, pause, gate.wait(pause, timeout), choices, default, timeout)

    async def _aask(self, prompt: str, choices: list[Any] | None = None, default: Any = None,
                    timeout: float | None = None) -> Any:
        gate = self._asking()
        pause = ask_pause(gate, prompt, choices, default)
        return ask_result(gate, pause, await gate.await_(pause, timeout), choices, default, timeout)

    def _asking(self) -> Gate:
        gate = self._steps.gate
        if gate is None:
            raise SupervisorError("run.ask: a replay has no person to ask, and this question was not answered in "
                                  "the recorded run")
        return gate

    def with_options(
        self,
        *,
        timeout: float | None = None,
        retries: int | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        backoff: float | None = None,
        returns: Any = None,
        call: dict[str, Any] | None = None,
        overlap_retry: bool | None = None,
    ) -> StepOptions:
        """Per-call options: ``run.with_options(timeout=30, retries=3).step("search", search, q)``.

        Returns a view with the same ``step``, ``astep`` and ``task``; the step function's own
        keyword arguments never mix with these. Unset options take the run's defaults. ``call`` marks a
        model or tool call for the dashboard and the exporters (the step records' ``call`` field):
        ``{"kind": "model", "model": ..., "provider": ...}`` or ``{"kind": "tool", "tool": ..., "call_id": ...}``.
        ``overlap_retry=True``: a plain function's retry may start while its timed-out call still runs (Python
        cannot stop it); by default the retry waits for it to end (see docs/sdk.md, per-call options).
        """
        return StepOptions(self._steps, _Opts(timeout, retries, retry_on, backoff, returns, call, overlap_retry))

    def task(
        self,
        name: str | Callable[..., str] | None = None,
        *,
        timeout: float | None = None,
        retries: int | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        backoff: float | None = None,
        returns: Any = None,
        call: dict[str, Any] | None = None,
        overlap_retry: bool | None = None,
    ) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """Decorator form of :meth:`step` (of :meth:`astep` on an ``async def``: the wrapper is then a coroutine
        function). ``name`` is a string, or a function of the call's arguments; the options are :meth:`with_options`'."""
        return self._steps.task(name, _Opts(timeout, retries, retry_on, backoff, returns, call, overlap_retry))

    def match_by_name(self) -> None:
        """Match this run's calls to the journal by ``(name, k)`` from now on, as overlapping steps are, never by
        position: for an agent whose resumed calls are not the journal's sequence (a graph that does not call the
        nodes that finished again). A call the journal has no step for then runs; a name at another position is not
        a divergence. The framework adapters that need it call it."""
        with self._lock:
            self._server.overlap = True

    # ------------------------------------------------------------------ checkpoints and notes
    def checkpoint(self, name: str) -> str:
        """Save the full state as a named checkpoint; on resume, an already recorded one is not written again."""
        with self._lock:  # its patch and its line, in order with the steps' (threads)
            return self._checkpoint(name)

    def _checkpoint(self, name: str) -> str:
        pos = self._steps.pos
        pending = self._pending_checkpoints
        while pending and pending[0].get("pos", 0) < pos:
            pending.pop(0)
        if pending and pending[0].get("pos") == pos and pending[0].get("name") == name:
            done = pending.pop(0)
            if not self._shadow.live:  # live, the state is already past it
                self._shadow.replay_to(done["seq"])
            return str(done.get("file", ""))
        w = self._recorder.writer
        if w is None:
            return ""  # a replay writes nothing
        rec: Record = {"kind": Kind.CHECKPOINT, "name": name, "pos": pos}
        self._shadow.with_patch(rec)
        ts = rundir.utc_now()
        snapshot = orjson.loads(self.redactor(orjson.dumps(self._shadow.doc, option=_DUMPS_OPTS)))
        files = None
        try:
            seq = w.next_seq
            if self._workspace is not None:  # the files first: their index line is committed by the record below
                from . import workspace as ws

                files = ws.checkpoint(self.run_dir, self._workspace, seq, name)
            rec["file"] = checkpoints.write_checkpoint(self.run_dir, name, seq=seq, pos=pos, ts=ts, state=snapshot)
        except (OSError, SupervisorError) as e:
            self._shadow.reload()  # no record: the shadow must not keep the patch (the next one is made against it)
            if isinstance(e, SupervisorError):
                raise
            raise os_error(self.run_dir, e) from e
        rec["ts"] = ts
        self._recorder.append(rec)
        self._recorder.took(rec)
        if files is not None:
            from . import workspace as ws

            ws.recommit(self.run_dir, files, rec.get("seq"))
        return str(rec["file"])

    def note(self, message: str, **fields: Any) -> None:
        """Append a free-form ``note`` record (shown in the log and the TUI)."""
        self._recorder.note(message, **fields)

    # ------------------------------------------------------------------ what the run knows
    @property
    def state(self) -> dict[str, Any]:
        """The agent's state: a JSON-compatible dict saved with every step (as a patch)."""
        return self._shadow.state

    @property
    def workspace(self) -> Path | None:
        """The directory the agent works in, kept with the run (resolved); ``None``: the run has none.

        A fork's run gets its own: write the agent's files here, not to a path of your own.
        """
        return None if self._workspace is None else self._workspace.root

    @property
    def position(self) -> int:
        """The position of the next step."""
        return self._steps.pos

    @property
    def phase(self) -> Phase:
        """What the next call does: served in order or by identity, live, replayed, or the run is closed."""
        return self._server.phase

    @property
    def replayed(self) -> StepNames:
        """Names of the steps served from the journal in this process (``len``: all; the last names kept)."""
        return self._server.replayed

    @property
    def executed(self) -> StepNames:
        """Names of the steps that ran live in this process (``len``: all; the last names kept)."""
        return self._steps.executed

    @property
    def history(self) -> History:
        """The journal folded into its effective history (for inspection, not for a loop).

        Until the first live step, the view resume built; after it, the journal is read
        and folded anew on each access: a live run keeps no record of its steps in memory.
        """
        if self._fold.keep:
            return self._fold.history
        f = Fold()
        f.extend(*JournalReader(self.run_dir).resume_view())
        return f.history

    @property
    def rollbacks(self) -> list[dict[str, Any]]:
        """The rollbacks so far: how many (``len``), why (``reason``) and to which ``checkpoint``."""
        return [
            {k: r.get(k) for k in ("seq", "ts", "checkpoint", "reason", "failed_step", "by")}
            for r in self._fold.rollbacks
        ]

    @property
    def max_failures(self) -> int:
        """Failed tries in a row of one step before the run rolls back."""
        return self._steps.max_failures

    @property
    def max_rollbacks(self) -> int:
        """Rollbacks of the run before it gives up."""
        return self._steps.max_rollbacks

    @property
    def retries(self) -> int:
        """Default retries of a step that raised a ``transient`` exception."""
        return self._steps.policy.retries

    @property
    def transient(self) -> tuple[type[BaseException], ...]:
        """Default exceptions a step is retried on."""
        return self._steps.policy.transient

    @property
    def backoff(self) -> float:
        """Default first delay between tries, in seconds (doubled each try, with jitter)."""
        return self._steps.policy.backoff

    @property
    def backoff_max(self) -> float:
        """The longest delay between tries, in seconds."""
        return self._steps.policy.backoff_max

    def idempotency_key(self, pos: int | None = None) -> str:
        """A stable key for the step at ``pos`` (default: the step in flight, else the next position): run id + position."""
        if pos is None:
            ctx = CURRENT.get()
            if ctx is not None:
                return ctx.key
            pos = self._steps.pos
        return f"{self.run_id}:{pos}"

    @property
    def key(self) -> str | None:
        """The idempotency key of the step being executed (in this thread or task), for external APIs; ``None`` outside a step."""
        ctx = CURRENT.get()
        return None if ctx is None else ctx.key

    def add_secret(self, value: str) -> None:
        """Register a value that must never reach disk (the supervisor, if any, learns it before this returns)."""
        if self.redactor.add(value):
            send_secrets((value,))

    def usage(
        self,
        *,
        model: str | None = None,
        provider: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cached_tokens: int | None = None,
    ) -> None:
        """Record what a model call consumed in the step running in this thread or task (its ``usage`` list).

        A step may record several; the keys given are the keys written. Outside a step it is an error.
        """
        ctx = CURRENT.get()
        if ctx is None:
            raise SupervisorError(
                "run.usage(...) was called outside a step; call it inside the step function "
                "(run.step, run.astep or a @run.task function), where the model call is made"
            )
        given = (("model", model), ("provider", provider), ("input_tokens", input_tokens),
                 ("output_tokens", output_tokens), ("cached_tokens", cached_tokens))
        if ctx.usage is None:
            ctx.usage = []
        ctx.usage.append({k: v for k, v in given if v is not None})

    @property
    def lock(self) -> threading.Lock:
        """The lock the SDK takes to number steps and record ``run.state``: hold it (briefly, never around a
        step call) while a thread changes ``run.state``, so a step committing in another thread sees no half-made change."""
        return self._lock


def _starts(entries: list[Any]) -> int:
    """How many attempts the journal has started: its ``start`` records (the parsed entries: lazy ones are steps)."""
    parsed = compress(entries, map(operator.is_, map(type, entries), repeat(dict)))  # picked at C speed
    return sum(r.get("kind") == wire.START for r in parsed)


def _stop_unset(msg: str, damaged: Record) -> None:
    """The shadow's ``stop`` until ``__init__`` sets :func:`_stop_at_damaged` (it needs the recorder and the server,
    which need the shadow): nothing is served meanwhile."""
    raise AssertionError("the shadow's stop is set before any record is served")


def _stop_at_damaged(recorder: Recorder, server: Server, msg: str, damaged: Record) -> NoReturn:
    """A resume reached a damaged line it cannot pass: a note that names the line and how to repair it, then
    exit 78 with the run directory unchanged but for the note (a step the journal cannot show is never served)."""
    fields = ("file", "line", "seq", "offset", "reason", "pos")
    recorder.note("cannot resume past a damaged line", error=msg, damaged={k: damaged.get(k) for k in fields})
    print(f"agent-supervisor: {msg}", file=sys.stderr)
    server.to_closed()  # nothing more to write: close() must not try to pass the line again
    if recorder.writer is not None:
        recorder.writer.close()
    raise SystemExit(rundir.EXIT_FAILED)


def _abandoned(run_dir: Path, seq: int) -> Callable[[Record], None]:
    """The SDK's rollback about to be written at ``seq``: the workspace it abandons, saved first (:mod:`.workspace`)."""
    from . import workspace as ws

    return ws.abandoned(run_dir, seq)


def _weak_close(run: Run) -> Callable[[str], None]:
    """``run.close`` for the run's own parts, without a reference cycle through the run."""
    ref = weakref.ref(run)

    def close(status: str) -> None:
        r = ref()
        if r is not None:
            r.close(status=status)

    return close


_ASK_OPTS = NO_OPTS.merged(retries=0)
"""A question is asked once: no answer in time is its answer (the default, or the error)."""


def _ask_kwargs(choices: list[Any] | None, default: Any, timeout: float | None) -> dict[str, Any]:
    """The question's options as its step's inputs (the ones given)."""
    kw: dict[str, Any] = {}
    if choices is not None:
        kw["choices"] = list(choices)
    if default is not None:
        kw["default"] = default
    if timeout is not None:
        kw["timeout"] = timeout
    return kw
