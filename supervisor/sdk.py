"""The agent SDK: ``from supervisor import Run``.

    with Run.open() as run:
        plan = run.step("plan", make_plan, task)
        run.checkpoint("plan-done")
        for q in plan["queries"]:
            hits = run.step(f"search:{q}", search, q)

On resume (the run directory already has a journal) every finished step returns
its recorded output without calling its function; the first step the journal
does not have runs live. See README.md for the failure policy and exit codes.
"""

from __future__ import annotations

import errno
import functools
import inspect
import mmap
import operator
import os
import random
import sys
import threading
import time
import traceback
from _thread import get_ident
from time import perf_counter
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar, copy_context
from itertools import compress, repeat
from pathlib import Path
from types import CoroutineType, GeneratorType, TracebackType
from typing import Any, NoReturn, ParamSpec, TypeVar, cast

import orjson

from .core import checkpoints, rundir
from .core import state as state_mod
from .core.cursor import Shape, StateCursor
from .core.history import Fold, History, damaged_message, rollback_record
from .core.journal_reader import JournalReader
from .core.journal_writer import JournalWriter, open_journal
from .core.records import Kind, LazyRecord, Record, normalize, step_name
from .core.redact import Redactor, redact_argv, send_secrets
from .errors import (
    DivergenceError,
    JournalError,
    JournalLockedError,
    ReplayError,
    RunDirError,
    SupervisorError,
)
from .replay.session import (
    ReplaySession,
    canonical_inputs,
    inputs_hash,
    open_replay_dir,
)

P = ParamSpec("P")
T = TypeVar("T")

_DUMPS_OPTS = orjson.OPT_NON_STR_KEYS
# The kinds of the two records every live step writes, as plain strings: orjson encodes an enum
# member at half the speed of a str, and looking one up costs ~100 ns in Python 3.11.
_BEGIN: str = Kind.BEGIN.value
_STEP: str = Kind.STEP.value
# An output orjson writes as it is is plain JSON; dataclasses and datetimes are left to the codec (typed outputs).
_OUT_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
# Tried first (the same bytes when every key is a str, at about half the cost: orjson's non-str-keys path is
# slower even on str keys); on a TypeError the full options, then the codec.
_OUT_OPTS_STR = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_ON_CHANGED = ("warn", "error", "rerun")
_EMPTY_HASH = inputs_hash({})
_MISS: Any = object()  # _serve_next: not served on the fast path
_loads = orjson.loads
_dumps = orjson.dumps
_Fragment = orjson.Fragment


class _Opts:
    """Per-call options (``None``: the run's default)."""

    __slots__ = ("backoff", "call", "retries", "retry_on", "returns", "timeout")

    def __init__(
        self,
        timeout: float | None = None,
        retries: int | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        backoff: float | None = None,
        returns: Any = None,
        call: dict[str, Any] | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout={timeout!r}: give a number of seconds above 0")
        if retries is not None and retries < 0:
            raise ValueError(f"retries={retries!r}: give 0 or more")
        self.timeout = timeout
        self.retries = retries
        self.retry_on = tuple(retry_on) if retry_on is not None else None
        self.backoff = backoff
        self.returns = returns
        if call is not None:
            if not isinstance(call, dict) or call.get("kind") not in ("model", "tool"):
                raise ValueError(f'call={call!r}: give a dict with "kind": "model" or "tool" (see the README)')
            try:
                orjson.dumps(call)
            except TypeError as e:
                raise ValueError(f"call={call!r}: not JSON ({e})") from None
        self.call = call

    def merged(self, **more: Any) -> _Opts:
        kw = {k: getattr(self, k) for k in self.__slots__}
        kw.update({k: v for k, v in more.items() if v is not None})
        return _Opts(**kw)


_NO_OPTS = _Opts()


class _Call:
    """A step call that runs live: its position, name, inputs and key (``replay``: the recorded step, ``{}`` if none).

    While it runs it is the current step of its thread or task (:data:`_CURRENT`): ``run.key`` and ``run.usage`` find it.
    """

    __slots__ = ("call", "inputs", "k", "key", "name", "pos", "replay", "usage")

    def __init__(
        self, pos: int, name: str, inputs: dict[str, Any], key: str, replay: Record | None = None, k: int = 0,
        call: dict[str, Any] | None = None,
    ) -> None:
        self.pos = pos
        self.k = k
        self.name = name
        self.inputs = inputs
        self.key = key
        self.replay = replay
        self.usage: list[dict[str, Any]] | None = None
        self.call = call


_CURRENT: ContextVar[_Call | None] = ContextVar("agent_supervisor_step", default=None)


class StepOptions:
    """``run.with_options(...)``: the run's ``step``, ``astep`` and ``task`` with per-call options."""

    def __init__(self, run: Run, opts: _Opts) -> None:
        self._run = run
        self._opts = opts

    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run._step(name, fn, args, kwargs, self._opts)  # type: ignore[no-any-return]

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return await self._run._astep(name, fn, args, kwargs, self._opts)

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
    ) -> Callable[[Callable[P, T]], Callable[P, T]]:
        opts = self._opts.merged(
            timeout=timeout, retries=retries, retry_on=retry_on, backoff=backoff, returns=returns, call=call
        )
        return self._run._task(name, opts)


_aio: Any = None


def _asyncio() -> Any:
    """:mod:`asyncio`, imported on first use: an agent that never awaits a step does not import it (with the ssl,
    subprocess and concurrent.futures modules it brings, it is a third of what ``from supervisor import Run``
    would import: ~20-40 ms of every start, a resume's included)."""
    global _aio
    if _aio is None:
        import asyncio

        _aio = asyncio
    return _aio


# Every type asyncio.iscoroutine accepts is one of these (on 3.11 it also takes generators): a value of none of
# them is not a coroutine, told without importing asyncio.
_MAYBE_COROUTINE = (CoroutineType, GeneratorType, Coroutine)


def _codec() -> Any:
    from .core import codec  # typed outputs only: plain JSON never imports it

    return codec


def _encode(out: Any, name: str) -> tuple[Any, str | None]:
    if isinstance(out, _MAYBE_COROUTINE) and _asyncio().iscoroutine(out):
        out.close()
        raise TypeError(f"step {name!r} returned a coroutine: call an async function with 'await run.astep(...)'")
    return _codec().encode(out, step=name)  # type: ignore[no-any-return]


def _is_async_fn(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    aio = sys.modules.get("asyncio")  # its marker of old-style coroutine functions exists only once it is imported
    return bool(aio.iscoroutinefunction(fn)) if aio is not None else inspect.iscoroutinefunction(fn)


def _call_in_thread(name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float) -> Any:
    """A plain step function with a timeout: run in a daemon thread, waited for ``timeout`` seconds.

    Python cannot stop a thread: past the timeout the step fails with ``TimeoutError`` and the
    thread is left to finish on its own (its result is dropped).
    """
    box: dict[str, Any] = {}
    ctx = copy_context()  # run.usage and run.key inside it see this step

    def target() -> None:
        try:
            box["out"] = ctx.run(fn, *args, **kwargs)
        except BaseException as e:  # noqa: BLE001  # handed to the caller's thread, raised there
            box["err"] = e

    t = threading.Thread(target=target, name=f"step {name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"step {name!r} did not finish in {timeout} s (its thread runs on: Python cannot stop a thread)")
    if "err" in box:
        raise box["err"]
    return box["out"]


async def _acall(name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None) -> Any:
    """Call a step function for ``astep``: await a coroutine function (cancelled at ``timeout``); a plain one runs
    in the loop's thread, or with a timeout in the loop's default executor (the thread cannot be stopped)."""
    asyncio = _asyncio()
    if timeout is None:
        out = fn(*args, **kwargs)
        if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future):
            out = await out
        return out
    if _is_async_fn(fn):
        return await asyncio.wait_for(fn(*args, **kwargs), timeout)
    loop = asyncio.get_running_loop()
    ctx = copy_context()
    fut = loop.run_in_executor(None, functools.partial(ctx.run, fn, *args, **kwargs))
    try:
        return await asyncio.wait_for(fut, timeout)
    except TimeoutError:
        raise TimeoutError(f"step {name!r} did not finish in {timeout} s (its thread runs on: Python cannot stop a thread)") from None


class StepNames(Sequence[str]):
    """Names of steps in the order they came: ``len`` counts every one, the last :attr:`KEEP` are kept.

    ``run.replayed`` and ``run.executed`` are these, so a run of millions of steps
    keeps flat memory. An index older than the kept names raises ``IndexError``.
    """

    KEEP = 10_000

    def __init__(self) -> None:
        self._count = 0
        self._last: deque[str] = deque(maxlen=self.KEEP)

    def append(self, name: str) -> None:
        self._count += 1
        self._last.append(name)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._count))]
        k = i + self._count if i < 0 else i
        if not 0 <= k < self._count:
            raise IndexError(f"step name index {i} out of range ({self._count} names)")
        first = self._count - len(self._last)
        if k < first:
            raise IndexError(f"step name {i} is not kept: only the last {self.KEEP} of {self._count} names are")
        return self._last[k - first]

    def __iter__(self) -> Iterator[str]:
        """The kept names (all of them while there are at most :attr:`KEEP`)."""
        return iter(self._last)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same names, while all of them are kept."""
        if isinstance(other, StepNames):
            return self._count == other._count and self._last == other._last
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._count == len(self._last) and list(self._last) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """As a list (agents print it), with a mark for the names no longer kept."""
        dropped = self._count - len(self._last)
        kept = repr(list(self._last))
        return f"[<{dropped} older names not kept>, {kept[1:]}" if dropped else kept


class _JournalCursor(StateCursor):
    """The SDK's state cursor once the run is live: it holds no records (the state moves by the live
    patches the SDK applies itself). A move it is asked for (after a record that was not written)
    reads the patches back from the journal's files along the run's rollbacks, without snapshots:
    the shadow is exactly the patches."""

    def __init__(self, run_dir: Path, fold: Fold, seq: int, doc: Any) -> None:
        super().__init__(run_dir)
        self._fold = fold
        self.seq = seq
        self.doc = doc

    def advance(self, seq: int, current: Record | None = None) -> bool:
        before = self.patches
        self._move(seq, Shape((), tuple(self._fold.cuts)), current)
        return self.patches != before


EXIT_ERROR = 2
"""Exit code of an agent whose run directory could not be opened or written: the error is one line on
stderr, as for the command line's user errors. For the supervisor it is a crash like any other."""


def _exiting(e: SupervisorError, code: int) -> SupervisorError:
    """Print ``e`` on one line and return it as an exception that is both its own type and ``SystemExit(code)``.

    An agent can still catch it as the error it is (``except JournalLockedError``);
    if nothing does, the interpreter ends with ``code`` and prints no traceback.
    """
    print(f"agent-supervisor: {e}", file=sys.stderr)
    cls = _exiting_type(type(e))
    x: Any = cls.__new__(cls, *e.args)
    x.__dict__.update(e.__dict__)
    x.args = e.args
    x.code = code
    return x  # type: ignore[no-any-return]


_EXITING: dict[type[SupervisorError], type[SupervisorError]] = {}


def _exiting_type(cls: type[SupervisorError]) -> type[SupervisorError]:
    """``cls`` and ``SystemExit`` in one class, under the name of ``cls`` (one per error class)."""
    t = _EXITING.get(cls)
    if t is None:
        ns = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        t = _EXITING[cls] = type(cls.__name__, (cls, SystemExit), ns)
    return t


def _check_run_files(path: Path) -> None:
    """Refuse a directory where a run file belongs, naming it (the OS error would not say which)."""
    for name in (rundir.RUN_JSON, rundir.JOURNAL, rundir.JOURNAL_LOCK):
        p = path / name
        if p.is_dir() and not p.is_symlink():
            raise RunDirError(f"{p} is a directory, where the run keeps a file: move it aside (mv {p} {p}.bak) and run again")


def _check_writable(path: Path) -> None:
    """Refuse an existing run directory the agent cannot write (it would fail later, at a checkpoint or at exit)."""
    try:
        st = os.statvfs(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # created (or refused) by Run
    if st.f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def _lock_holder(lock: Path) -> int | None:
    """The pid of the process holding the ``flock`` on ``lock``, from ``/proc/locks`` (Linux); ``None`` if unknown."""
    try:
        st = os.stat(lock)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == dev and parts[4].isdigit():
            return int(parts[4])
    return None


def _locked_message(path: Path) -> str:
    """Which run is locked and by whom (the pid; not its command line, which may hold a secret)."""
    pid = _lock_holder(path / rundir.JOURNAL_LOCK)
    who = "another process" if pid is None else f"another process (pid {pid}, see 'ps -p {pid}')"
    return (
        f"{who} is writing the journal of {path}; stop it first, or give this agent another run directory "
        "(two agents on one run would interleave their steps)"
    )


_OS_HINTS = {
    errno.EROFS: "the file system is read-only; give the agent a run directory on a writable file system",
    errno.EACCES: "permission denied; run the agent as the user who owns the run directory, or give it one it can write",
    errno.EPERM: "operation not permitted (an immutable file or directory?); give the agent a run directory it can write",
    errno.ENOSPC: "no space left on the device; free some space and run the agent again (it resumes)",
    errno.EDQUOT: "disk quota exceeded; free some space and run the agent again (it resumes)",
    errno.EISDIR: "a directory where the run keeps a file; move it aside and run again",
    errno.ENOTDIR: "a file where the run keeps a directory; move it aside and run again",
}


def _os_error(run_dir: Path, e: OSError) -> RunDirError:
    """An OS error on a run directory as a one-line error that says which file, what went wrong and what to do."""
    hint = _OS_HINTS.get(e.errno or 0) or f"{e.strerror or e}; check the path and its permissions"
    where = f" {e.filename}:" if e.filename and str(e.filename) != str(run_dir) else ""
    return RunDirError(f"cannot use the run directory {run_dir}:{where} {hint}")


_RELEASE_EVERY = 4095
"""Replay gives the journal pages it has served back every 4,096 steps (a mask on the position)."""


def _dontneed(m: mmap.mmap, length: int) -> None:
    """Drop the first ``length`` bytes (-1: all) of a read-only file map from this process's memory (not from the file)."""
    try:
        m.madvise(mmap.MADV_DONTNEED, 0, len(m) if length < 0 else length)
    except (OSError, ValueError):
        pass  # closed, or not supported here: the pages stay mapped, nothing else changes


def default_run_dir() -> Path:
    """``./runs/<script name>``: the same directory each time, so ``python agent.py`` twice resumes."""
    main = sys.modules.get("__main__")
    stem = Path(getattr(main, "__file__", None) or "agent").stem
    return Path("runs") / stem


class Run:
    """A run of an agent: its journal, its state and its checkpoints.

    Create it with :meth:`Run.open`. ``step`` may be called from several threads at once and
    ``astep`` from concurrent tasks; see README.md for how overlapping steps are matched on resume.
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
    ) -> None:
        if on_changed_inputs not in _ON_CHANGED:
            raise ValueError(f"on_changed_inputs={on_changed_inputs!r}: use 'warn', 'error' or 'rerun'")
        self.replay_mode = os.environ.get(rundir.ENV_REPLAY, "")
        # replay modes open the run directory read-only: no dir, run.json, lock, journal line or checkpoint is created
        self.run_dir = open_replay_dir(run_dir) if self.replay_mode else rundir.ensure_dir(run_dir)
        self.max_failures = max_failures
        self.max_rollbacks = max_rollbacks
        self.retries = retries
        self.transient = transient
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.supervised = bool(os.environ.get(rundir.ENV_SUPERVISED))
        self.redactor = Redactor(secrets)
        send_secrets(self.redactor.values)  # the supervisor redacts agent.log and its events with them too
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
        self.run_id: str = str(meta.get("id") or self.run_dir.name)
        kw: dict[str, Any] = {} if rotate_bytes is None else {"rotate_bytes": rotate_bytes}
        # lazy: finished steps stay unparsed until replayed, and begin records (which say only
        # that a step started) are not kept: resuming 1,000,000 steps builds no million dicts
        self._writer: JournalWriter | None = None
        if self.replay_mode:
            view = JournalReader(self.run_dir).resume_view()
        else:
            self._writer, view = open_journal(self.run_dir, redact=self.redactor, **kw)
            checkpoints.clean_stale_tmp(self.run_dir)  # a killed checkpoint write's temporary file (we hold the lock)
        # The resume view (every recorded step, the effective records) serves positions not yet
        # reached; the first live step lets go of it (_go_live), and live records are only counted:
        # memory stays flat however long the run.
        self._fold = Fold()
        self._fold.extend(view.entries, view.overlaps)
        resumed = self._fold.history
        self._steps = resumed.steps
        self._pending_checkpoints = [c for c in resumed.checkpoints]
        self._pos = 0
        # the state as the journal has it (the shadow), replayed along the effective history
        self._cursor: StateCursor = StateCursor(self.run_dir, records=resumed.effective)
        self._failures = resumed.consecutive_failures()  # failed tries in a row of the step at the next position
        self._state: dict[str, Any] = {}
        self.replayed = StepNames()
        """Names of the steps served from the journal in this process (``len``: all; the last names kept)."""
        self.executed = StepNames()
        """Names of the steps that ran live in this process (``len``: all; the last names kept)."""
        self.on_changed_inputs = on_changed_inputs
        self._lock = threading.Lock()
        self._owner = get_ident()  # calls from another thread are concurrent (see _lookup)
        self._fast = False  # live with nothing left to serve: a call only numbers and begins (see _enter)
        self._shadow_json: tuple[Any, bytes] | None = None  # the shadow and its JSON (see _with_state_patch)
        self._key_prefix = f"{self.run_id}:"
        self._counts: dict[str, int] = {}  # calls so far per step name: the k of the (name, k) identity
        self._inflight = 0
        self._overlap = False  # two steps of this process have overlapped (or a thread called one)
        self._next = 0  # the next recorded step to serve while resume goes position by position
        self._table: dict[tuple[str, int], tuple[int, Record]] | None = None
        self._table_at: dict[int, Record] = {}
        self._table_calls: set[tuple[str, int]] = set()
        self._recorded = len(self._steps)
        self._hints: dict[Any, Any] = {}
        self._closed = False
        self._live = False
        self._released: tuple[mmap.mmap | None, int] = (None, 0)  # the map and bytes of it given back
        # the parsed records among the entries (the lazy steps are most of them) picked at C speed, then counted
        entries = resumed.entries
        parsed: Iterator[Record] = compress(entries, map(operator.is_, map(type, entries), repeat(dict)))  # type: ignore[arg-type]
        starts = sum(r.get("kind") == Kind.START for r in parsed)
        self.attempt = int(os.environ.get(rundir.ENV_ATTEMPT) or starts + 1)
        self.resuming = bool(self._steps) or os.environ.get(rundir.ENV_RESUME) == "1"
        self._session: ReplaySession | None = None
        if self.replay_mode:
            self._session = ReplaySession.from_env(self.replay_mode, self.run_dir, self.run_id, self._steps, self.redactor)
        elif self._steps and type(self).step is Run.step:  # a subclass's own step is left as it is
            self.__dict__["step"] = self._resume_step  # see _resume_step
        self._append(
            {
                "kind": Kind.START,
                "attempt": self.attempt,
                "pid": os.getpid(),
                "resume": self.resuming,
                "replayable_steps": len(self._steps),
                # this attempt's begin/step records carry k (absent: 0), the (step, k) identity of their call
                "numbering": "name-k",
                "argv": redact_argv(sys.argv, self.redactor),
                # the supervisor's pid: it tells this attempt's records from another writer's, even behind sh -c
                **({"supervisor": int(sup)} if (sup := os.environ.get(rundir.ENV_SUPERVISED, "")).isdigit() else {}),
            }
        )

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, run_dir: str | os.PathLike[str] | None = None, **options: Any) -> Run:
        """Open the run directory from the argument, else the supervisor's environment, else ``./runs/<script>``.

        The environment wins over the default but not over an explicit argument.
        Options: ``max_failures``, ``max_rollbacks``, ``retries``, ``transient``,
        ``backoff``, ``backoff_max``, ``secrets``, ``rotate_bytes``, ``on_changed_inputs``
        (``"warn"``, ``"error"`` or ``"rerun"``: what a served step whose inputs changed does).

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
            _check_run_files(path)
            if not os.environ.get(rundir.ENV_REPLAY):  # a replay only reads
                _check_writable(path)
            return cls(path, **options)
        except JournalLockedError as e:
            raise _exiting(JournalLockedError(_locked_message(path)), EXIT_ERROR) from e
        except SupervisorError as e:
            raise _exiting(e, EXIT_ERROR) from None
        except OSError as e:
            raise _exiting(_os_error(path, e), EXIT_ERROR) from e

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            self._session.finish(self._pos, exc, self._unserved())
        if isinstance(exc, (DivergenceError, ReplayError)):
            self.note("divergence", error=str(exc))
            self.close(status="failed")
            raise _exiting(exc, rundir.EXIT_FAILED) from None
        # The journal or the run directory failing under the agent (a SupervisorError: disk full, the
        # file system gone read-only) ends it with one line and exit 2, as at open; closing may fail
        # the same way. The agent's own exceptions (an OSError of its own included) pass through.
        err = exc if isinstance(exc, SupervisorError) else None
        try:
            self.close(status="succeeded" if exc is None else None)
        except (SupervisorError, OSError) as e:
            if self._writer is not None:
                self._writer.close()  # the lock goes with it
            if exc is not None and err is None:
                raise  # shown with the agent's own exception, its context
            err = err or (e if isinstance(e, SupervisorError) else _os_error(self.run_dir, e))
        if err is not None:
            raise _exiting(err, EXIT_ERROR) from None

    def close(self, status: str | None = None) -> None:
        """Close the journal; outside a supervisor, record ``status`` in ``run.json``."""
        if self._closed:
            return
        self._closed = True
        self.__dict__.pop("step", None)  # _resume_step: the bound method would hold the run in a cycle
        if not self._live and not self._left and self._fold.history.effective:
            self._replay_state(self._fold.history.effective[-1]["seq"])
            self._live = True
        if self._live and not self.replay_mode and not state_mod.same(self._state, self._shadow):
            # changes made after the last step would be lost on resume: record them
            rec: Record = {"kind": Kind.NOTE, "message": "state at exit"}
            self._with_state_patch(rec)
            self._append(rec)
        if status and not self.supervised and not self.replay_mode:
            rundir.update_run_json(self.run_dir, status=status, ended=rundir.utc_now())
        if self._session is not None:
            self._session.finish(self._pos, None, self._unserved())
        if self._writer is not None:
            self._writer.close()

    # ------------------------------------------------------------------ state
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
    def _shadow(self) -> Any:
        """The state as the journal records it (the patches so far): the next patch is made against it."""
        return self._cursor.doc

    @_shadow.setter
    def _shadow(self, doc: Any) -> None:
        self._cursor.doc = doc
        self._shadow_json = None

    @property
    def state(self) -> dict[str, Any]:
        """The agent's state: a JSON-compatible dict saved with every step (as a patch)."""
        return self._state

    @property
    def position(self) -> int:
        """The position of the next step."""
        return self._pos

    @property
    def rollbacks(self) -> list[dict[str, Any]]:
        """The rollbacks so far: how many (``len``), why (``reason``) and to which ``checkpoint``."""
        return [
            {k: r.get(k) for k in ("seq", "ts", "checkpoint", "reason", "failed_step", "by")}
            for r in self._fold.rollbacks
        ]

    def idempotency_key(self, pos: int | None = None) -> str:
        """A stable key for the step at ``pos`` (default: the step in flight, else the next position): run id + position."""
        if pos is None:
            ctx = _CURRENT.get()
            if ctx is not None:
                return ctx.key
            pos = self._pos
        return f"{self.run_id}:{pos}"

    @property
    def key(self) -> str | None:
        """The idempotency key of the step being executed (in this thread or task), for external APIs; ``None`` outside a step."""
        ctx = _CURRENT.get()
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
        ctx = _CURRENT.get()
        if ctx is None:
            raise SupervisorError(
                "run.usage(...) was called outside a step; call it inside the step function "
                "(run.step, run.astep or a @run.task function), where the model call is made"
            )
        u = {
            k: v
            for k, v in (
                ("model", model),
                ("provider", provider),
                ("input_tokens", input_tokens),
                ("output_tokens", output_tokens),
                ("cached_tokens", cached_tokens),
            )
            if v is not None
        }
        if ctx.usage is None:
            ctx.usage = []
        ctx.usage.append(u)

    def match_by_name(self) -> None:
        """Match this run's calls to the journal by ``(name, k)`` from now on, as overlapping steps are, never by
        position: for an agent whose resumed calls are not the journal's sequence (a graph that does not call the
        nodes that finished again). A call the journal has no step for then runs; a name at another position is not
        a divergence. The framework adapters that need it call it."""
        with self._lock:
            self._overlap = True

    @property
    def lock(self) -> threading.Lock:
        """The lock the SDK takes to number steps and record ``run.state``: hold it (briefly, never around a
        step call) while a thread changes ``run.state``, so a step committing in another thread sees no half-made change."""
        return self._lock

    # ------------------------------------------------------------------ steps
    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` as the step ``name`` or, on resume, return its recorded output.

        Safe from several threads at once; the step's position is taken when it is called.
        """
        return self._step(name, fn, args, kwargs, _NO_OPTS)  # type: ignore[no-any-return]

    def _resume_step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`step` while a sequential resume serves the recorded steps in order: put on the instance in
        place of ``step`` by ``__init__`` (so a live step pays nothing for it), taken off once resume is over.

        A served step in one call and one frame: :meth:`_enter`'s numbering and its :meth:`_serve_next`, without
        :meth:`_step`'s and :meth:`_enter`'s frames (a million served steps go through here). Anything else
        (another thread, a step in flight, a miss) takes the general path, which decides as always.
        """
        with self._lock:
            if self._live or self._table is not None or self._overlap:
                self.__dict__.pop("step", None)  # resume is over, or no longer sequential: the plain method again
            elif not self._inflight and get_ident() == self._owner:
                pos = self._pos
                out = self._serve_next(pos, name, fn, args, kwargs, _NO_OPTS)
                if out is not _MISS:
                    self._pos = pos + 1
                    counts = self._counts
                    counts[name] = counts.get(name, 0) + 1
                    return out
        return self._step(name, fn, args, kwargs, _NO_OPTS)

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``await run.astep(name, fn, *args)``: :meth:`step` for asyncio. ``fn`` is a coroutine function or a
        plain one (a plain one runs in the event loop's thread, or in a worker thread when it has a timeout)."""
        return await self._astep(name, fn, args, kwargs, _NO_OPTS)

    def with_options(
        self,
        *,
        timeout: float | None = None,
        retries: int | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        backoff: float | None = None,
        returns: Any = None,
        call: dict[str, Any] | None = None,
    ) -> StepOptions:
        """Per-call options: ``run.with_options(timeout=30, retries=3).step("search", search, q)``.

        Returns a view with the same ``step``, ``astep`` and ``task``; the step function's own
        keyword arguments never mix with these. Unset options take the run's defaults. ``call`` marks a
        model or tool call for the dashboard and the exporters (the step records' ``call`` field):
        ``{"kind": "model", "model": ..., "provider": ...}`` or ``{"kind": "tool", "tool": ..., "call_id": ...}``.
        """
        return StepOptions(self, _Opts(timeout, retries, retry_on, backoff, returns, call))

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
    ) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """Decorator form of :meth:`step` (of :meth:`astep` on an ``async def``: the wrapper is then a coroutine
        function). ``name`` is a string, or a function of the call's arguments; the options are :meth:`with_options`'."""
        return self._task(name, _Opts(timeout, retries, retry_on, backoff, returns, call))

    def _task(self, name: str | Callable[..., str] | None, opts: _Opts) -> Callable[[Callable[P, T]], Callable[P, T]]:
        def deco(fn: Callable[P, T]) -> Callable[P, T]:
            def step_name_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
                return name(*args, **kwargs) if callable(name) else (name or fn.__name__)

            if _is_async_fn(fn):

                async def awrapper(*args: Any, **kwargs: Any) -> Any:
                    return await self._astep(step_name_of(args, kwargs), fn, args, kwargs, opts)

                functools.update_wrapper(awrapper, fn)
                return awrapper  # type: ignore[return-value]

            def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
                return self._step(step_name_of(args, kwargs), fn, args, kwargs, opts)  # type: ignore[no-any-return]

            functools.update_wrapper(wrapper, fn)
            return wrapper

        return deco

    # -- the two paths share everything but how the function is called and how the record is awaited
    def _step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts) -> Any:
        with self._lock:
            c = self._enter(name, fn, args, kwargs, opts)
        if type(c) is not _Call:
            return c  # served from the journal
        token = _CURRENT.set(c)
        try:
            t0 = perf_counter()
            try:
                out = fn(*args, **kwargs) if opts.timeout is None else _call_in_thread(name, fn, args, kwargs, opts.timeout)
            except BaseException as e:
                out, t0 = self._retry(c, e, t0, fn, args, kwargs, opts)
        finally:
            _CURRENT.reset(token)
        if c.replay is not None:
            return self._replayed_live(c, out, t0)
        rec = self._finished(c, out, t0, c)
        with self._lock:
            self._with_state_patch(rec)
            if self._inflight == 1 and not self._overlap:
                # alone in flight in a single-threaded agent: no one to share the fdatasync with; synced holding
                # the writer's lock (an agent with threads syncs outside the lock even then: see below)
                try:
                    self._append(rec, alone=True)
                except BaseException:
                    self._leave(c)
                    raise
                fold = self._fold
                if fold.keep:
                    self._took(rec)
                else:  # _took and _done for a live step, inlined: this is the sequential agent's path
                    fold.step_count += 1
                    cur = self._cursor
                    if rec["seq"] > cur.seq:
                        cur.applied(rec["seq"])
                self._failures = 0
                self._inflight = 0
                ex = self.executed
                ex._count += 1
                ex._last.append(c.name)
                return out
            # The line is written under the lock (a patch is made against the records before it: the file keeps
            # their order); its sync is waited for outside it, so the threads that finish meanwhile (and the ones
            # that begin a step) share it.
            end = self._write_or_leave(c, rec)
        if end >= 0:
            self._wait_synced_or_leave(c, rec, end)
        with self._lock:
            self._done(c, rec)
        return out

    def _retry(
        self, c: _Call, e: BaseException, t0: float, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], opts: _Opts,
    ) -> tuple[Any, float]:
        """A try of ``run.step`` raised ``e``: record it, and try again while the policy says so.

        Returns the output of a try that succeeded and when it started; raises what the last try raised.
        """
        tries = 1
        while True:
            if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit: not a failure of the step
                with self._lock:
                    self._leave(c, give_back=False)
                raise e
            delay = self._on_error(c, e, t0, c, opts, tries)
            if delay is None:
                raise e
            time.sleep(delay)
            tries += 1
            t0 = perf_counter()
            try:
                if opts.timeout is None:
                    return fn(*args, **kwargs), t0
                return _call_in_thread(c.name, fn, args, kwargs, opts.timeout), t0
            except BaseException as again:
                e = again

    async def _astep(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts) -> Any:
        with self._lock:
            c = self._enter(name, fn, args, kwargs, opts)
        if type(c) is not _Call:
            return c  # served from the journal
        token = _CURRENT.set(c)
        try:
            t0 = perf_counter()
            try:
                if opts.timeout is None:  # _acall inlined: no coroutine frame of its own
                    out = fn(*args, **kwargs)
                    aio = _aio or _asyncio()
                    if aio.iscoroutine(out) or isinstance(out, aio.Future):
                        out = await out
                else:
                    out = await _acall(name, fn, args, kwargs, opts.timeout)
            except BaseException as e:
                out, t0 = await self._aretry(c, e, t0, fn, args, kwargs, opts)
        finally:
            _CURRENT.reset(token)
        if c.replay is not None:
            return self._replayed_live(c, out, t0)
        rec = self._finished(c, out, t0, c)
        with self._lock:
            self._with_state_patch(rec)
            # written under the lock, in the order of the patches (threads may commit steps too); the sync is
            # awaited outside it, shared with the steps that finish in the same turn of the loop
            end = self._write_or_leave(c, rec)
        w = self._writer
        if end >= 0 and w is not None:
            try:
                fut = w.synced_future(end)
                if fut is not None:
                    await fut
            except JournalError:  # the sync failed: not committed
                with self._lock:
                    if "state_patch" in rec:
                        self._shadow = None  # see _append
                    self._leave(c)
                raise
            except BaseException:  # cancelled while its sync was awaited: the line is written and will be synced
                with self._lock:
                    self._done(c, rec)
                raise
        with self._lock:
            self._done(c, rec)
        return out

    async def _aretry(
        self, c: _Call, e: BaseException, t0: float, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], opts: _Opts,
    ) -> tuple[Any, float]:
        """:meth:`_retry` for ``astep``: a cancellation is not a failure of the step."""
        tries = 1
        while True:
            if not isinstance(e, Exception):  # cancelled (an outer timeout, the task group failing)
                with self._lock:
                    self._leave(c, give_back=False)
                raise e
            delay = self._on_error(c, e, t0, c, opts, tries)
            if delay is None:
                raise e
            await _asyncio().sleep(delay)
            tries += 1
            t0 = perf_counter()
            try:
                return await _acall(c.name, fn, args, kwargs, opts.timeout), t0
            except BaseException as again:
                e = again

    def _on_error(self, c: _Call, e: Exception, t0: float, ctx: _Call, opts: _Opts, tries: int) -> float | None:
        """Record a failed try: the delay before the next try, or ``None`` (recorded as failed: re-raise).

        Retried: an exception of ``retry_on`` (default: the run's ``transient``) while tries are left
        (``retries``, default: the run's); with a ``timeout``, a try that timed out is retried too.
        """
        retries = self.retries if opts.retries is None else opts.retries
        retry_on = self.transient if opts.retry_on is None else opts.retry_on
        if opts.timeout is not None:
            retry_on = (*retry_on, TimeoutError)
        if tries <= retries and isinstance(e, retry_on):
            self._failed(c, e, t0, ctx, transient=True)
            backoff = self.backoff if opts.backoff is None else opts.backoff
            return float(min(self.backoff_max, backoff * 2 ** (tries - 1)) * random.uniform(0.5, 1.0))
        self._failed(c, e, t0, ctx)
        return None

    # -- under the lock: numbering, serving, beginning
    def _enter(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts) -> Any:
        """Number the call (position and per-name count, in call order), then serve it or begin it live.

        Returns the served output, or a :class:`_Call` for a step to run. Called with the lock held.
        """
        pos = self._pos
        self._pos = pos + 1
        counts = self._counts
        k = counts.get(name, 0)
        counts[name] = k + 1
        if not self._overlap and (self._inflight or get_ident() != self._owner):
            self._overlap = True
        try:
            if not self._fast:
                s = self._session
                t = self._table
                if s is None and t is None and not self._overlap:
                    out = self._serve_next(pos, name, fn, args, kwargs, opts)
                    if out is not _MISS:
                        return out
                left = bool(t) if t is not None else self._next < len(self._steps)
                rec = self._lookup(pos, k, name, s) if left else None
                if s is not None:
                    return self._enter_replay(s, pos, name, rec, fn, args, kwargs, opts)
                if rec is not None and self._same_inputs(pos, rec, name, args, kwargs):
                    return self._served(rec, name, fn, opts)
                if not self._live:
                    self._go_live()
                if self.replay_mode == "strict":
                    raise ReplayError(
                        f"strict replay: the agent asked for step {name!r} at position {pos}, "
                        f"but the journal has only {self._recorded} finished steps"
                    )
                # live, nothing left to serve: the next calls skip the lookups
                self._fast = not self.replay_mode and self._writer is not None and not self._left
            inputs: dict[str, Any] = {}
            if args:
                inputs["args"] = list(args)
            if kwargs:
                inputs["kwargs"] = kwargs
            base: Record = {"kind": _BEGIN, "step": name, "pos": pos, "attempt": self.attempt}
            if k:
                base["k"] = k  # the call's number among this name's calls: its identity is (step, k)
            if inputs:
                base["inputs"] = inputs
            if opts.call is not None:
                base["call"] = opts.call
            w = self._writer
            if self._fast and w is not None:  # _append, inlined (live: a writer, no replay)
                try:
                    w.append(base, sync=False)
                except TypeError:
                    self._unencodable(base)
                    w.append(base, sync=False)
            else:
                self._append(base, sync=False)
        except BaseException:
            self._give_back(pos, name)
            raise
        self._inflight += 1
        return _Call(pos, name, inputs, f"{self._key_prefix}{pos}", None, k, opts.call)

    def _serve_next(
        self, pos: int, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts
    ) -> Any:
        """A sequential resume's served step, in one pass: the recorded step at ``pos`` if it is this call's, with
        the same inputs as JSON, as :meth:`_lookup`, :meth:`_same_inputs` and :meth:`_served` would serve it.

        Anything else (another name, changed inputs, a parsed or damaged line) is :data:`_MISS`, with nothing
        changed: the general path then decides. A million served steps go through here.
        """
        i = self._next
        steps = self._steps
        if i >= len(steps):
            return _MISS
        e: Any = steps[i]
        if type(e) is not LazyRecord or self._fold.damaged:
            return _MISS
        try:
            rec: Record = _loads(e.src[e.start : e.end])
        except orjson.JSONDecodeError:
            return _MISS
        rpos = rec.get("pos")
        if (rpos != pos or type(rpos) is not int) and (rpos if type(rpos) is int else e.pos) != pos:
            return _MISS
        if rec.get("step") != name:
            return _MISS
        recorded = rec.get("inputs")
        if args and not kwargs:  # the common call: its inputs as recorded are {"args": [...]}
            if recorded != {"args": [*args]}:
                return _MISS
        elif recorded != canonical_inputs(args, kwargs) and not (recorded is None and not args and not kwargs):
            return _MISS
        seq = e.seq
        if rec.get("seq") != seq or "ts" not in rec:
            normalize(rec, seq)  # (a minimal journal's output may be under another name)
        # (rec is read below for its output and its patch only: its pos, the fold's, is not set)
        self._next = i + 1
        if not i & _RELEASE_EVERY:
            self._release_served(i)
        names = self.replayed
        names._count += 1
        names._last.append(name)
        cursor = self._cursor
        if not self._live and seq > cursor.seq:  # _replay_state, inlined (no damaged line: checked above)
            self._shadow_json = None
            if "state_patch" in rec or not cursor.step_over(e, seq):
                if cursor.advance(seq, rec) and not state_mod.same(self._state, cursor.doc):
                    self._state.clear()
                    self._state.update(state_mod.json_copy(cursor.doc))
        out = rec.get("output")
        otype = rec.get("output_type")
        hint = opts.returns
        if hint is None:
            ann = getattr(fn, "__annotations__", None)
            if (ann and "return" in ann) or isinstance(fn, functools.partial):
                hint = self._hint(fn)
        if otype is not None or hint is not None:
            out = _codec().decode(out, otype, hint)
        return out

    def _give_back(self, pos: int, name: str) -> None:
        """A call that failed and is the latest gives its position and its count back: a sequential agent's
        failed step takes no position (as before steps could overlap), and the next call is numbered as it."""
        if self._pos == pos + 1:
            self._pos = pos
            self._counts[name] -= 1

    def _enter_replay(
        self, s: ReplaySession, pos: int, name: str, rec: Record | None, fn: Callable[..., Any],
        args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts,
    ) -> Any:
        """``replay --verify`` / ``--live``: serve the step (checking its inputs) or run it live and compare.

        Nothing is written. A live step's new output goes back to the agent; the
        state keeps following the recorded patches, as for served steps.
        """
        live = s.mode.is_live(name)
        if rec is None and not live:
            raise s.missing(pos, name)
        if not live:
            assert rec is not None
            s.check_inputs(pos, rec, canonical_inputs(args, kwargs))
            s.replayed += 1
            return self._served(rec, name, fn, opts)
        self._inflight += 1
        return _Call(pos, name, {}, f"{self.run_id}:{pos}", rec if rec is not None else {})

    def _replayed_live(self, c: _Call, out: Any, t0: float) -> Any:
        s = self._session
        assert s is not None and c.replay is not None
        rec = c.replay or None
        with self._lock:
            s.live_step(c.pos, rec, c.name, out, round((time.perf_counter() - t0) * 1000, 3))
            self._inflight -= 1
            self.executed.append(c.name)
            if rec is not None:
                self._follow(rec)
        return out

    def _unserved(self) -> tuple[int, str]:
        """How many recorded steps are not served (nor run) yet, and the name of the first in call order."""
        t = self._table
        if t is not None:
            first = min(t.values(), key=lambda v: v[0], default=None)
            return len(t), step_name(first[1]) if first else ""
        n = len(self._steps) - self._next
        if n <= 0:
            return 0, ""
        e = self._steps[self._next]
        try:
            return n, step_name(e.record() if isinstance(e, LazyRecord) else e)
        except JournalError:  # a damaged line: its name is not known
            return n, ""

    @property
    def _left(self) -> bool:
        """Whether recorded steps remain to be served."""
        t = self._table
        return bool(t) if t is not None else self._next < len(self._steps)

    def _lookup(self, pos: int, k: int, name: str, s: ReplaySession | None) -> Record | None:
        """The committed step that answers the call ``(name, k)`` at ``pos``, or ``None``: it runs.

        While the journal and the calls agree position by position (a sequential agent) this is the
        recorded step at ``pos``, as before steps could overlap: another name there is a divergence, unless
        steps overlap in this process (a live step in flight, or a call from another thread than the one
        that opened the run). Otherwise it builds the table of every committed step by ``(name, k)``
        (:meth:`_build_table`) and answers from it.
        """
        if self._table is None:
            i = self._next
            rec, rpos = self._parse_step(i)
            if rpos == pos:
                if step_name(rec) == name:
                    self._next = i + 1
                    if not i & _RELEASE_EVERY:
                        self._release_served(i)
                    return rec
                if not self._overlap:  # the sequential rule: another name at a recorded position
                    if s is not None:
                        raise s.step_mismatch(pos, rec, name)
                    raise DivergenceError(pos, step_name(rec), name)
            self._build_table()
        assert self._table is not None
        hit = self._table.pop((name, k), None)
        if hit is not None:
            self._table_at.pop(hit[0], None)
            return hit[1]
        # Not committed. A divergence when the sequential rule applies: one thread, nothing in flight, the
        # journal has another step committed at this position and never saw this call at all.
        other = self._table_at.get(pos)
        if other is not None and not self._overlap and (name, k) not in self._table_calls:
            if s is not None:
                raise s.step_mismatch(pos, other, name)
            raise DivergenceError(pos, step_name(other), name)
        return None

    def _parse_step(self, i: int) -> tuple[Record, int]:
        """The recorded step ``i`` (in commit order) and the position it was called at."""
        e: Record | LazyRecord = self._steps[i]
        if type(e) is not LazyRecord:
            d = cast(Record, e)
            damaged = self._fold.damaged
            if damaged and d["seq"] >= damaged[0]["seq"]:
                self._replay_state(d["seq"])  # stops at a damaged line, before any step after it is served
            return d, int(d.get("pos", i))  # a parsed line: the fold's position
        try:
            rec: Record = orjson.loads(e.src[e.start : e.end])
        except orjson.JSONDecodeError:  # a step line loaded unparsed (lazily) that does not parse: a damaged line
            bad = e.damaged().record()
            bad["pos"] = e.pos
            self._fold.damaged.insert(0, bad)  # the first: the lines before it were served
            self._replay_state(bad["seq"])  # stops there, before any step after it is served
            raise AssertionError("unreachable") from None
        rpos = rec.get("pos")
        if rec.get("seq") != e.seq or "ts" not in rec:
            normalize(rec, e.seq)
        rec["pos"] = e.pos
        return rec, rpos if type(rpos) is int else e.pos

    def _build_table(self) -> None:
        """Index every committed, not yet served step of the effective history by ``(name, k)``.

        ``k`` counts the earlier calls of that name in position order; a position's call is the last
        ``begin`` or ``step`` recorded at it (a failed call that gave its position back is not one).
        Read from the files: the resume view keeps neither ``begin`` lines nor the recorded positions.
        """
        served = {int(self._steps[j].get("seq", -1)) for j in range(self._next)}
        entries = JournalReader(self.run_dir).load()
        rpos: dict[int, Any] = {}
        numbered: set[Any] = set()  # attempts whose records carry their k (the start record says so)
        for e in entries:
            if type(e) is dict:
                kind = e.get("kind", _STEP)
                if kind in (_BEGIN, _STEP):
                    rpos[e["seq"]] = e.get("pos")
                elif kind == Kind.START and e.get("numbering") == "name-k":
                    numbered.add(e.get("attempt"))
        f = Fold()
        f.extend(entries)
        final: dict[int, str] = {}
        committed: dict[int, Record] = {}
        by_id: dict[tuple[str, int], tuple[int, Record | None]] = {}  # numbered attempts: (step, k) -> its step
        for r in f.history.effective:
            kind = r.get("kind", _STEP)
            if kind != _BEGIN and kind != _STEP or r.get("was"):
                continue
            p = rpos.get(r["seq"])
            p = p if type(p) is int else r["pos"]
            if r.get("attempt") in numbered:
                # the call's identity is in the record: positions of another attempt (threads number their
                # calls in another order each time) never shadow it
                ident = (step_name(r), int(r.get("k") or 0))
                old = by_id.get(ident)
                ok = kind == _STEP and r.get("error") is None
                by_id[ident] = (p, r if ok else (old[1] if old and kind == _BEGIN else None))
                continue
            final[p] = step_name(r)
            if kind == _STEP:
                if r.get("error") is None:
                    committed[p] = r
                else:
                    committed.pop(p, None)
        counts: dict[str, int] = {}
        table: dict[tuple[str, int], tuple[int, Record]] = {}
        at: dict[int, Record] = {}
        calls: set[tuple[str, int]] = set()
        for p in sorted(final):  # journals of older SDKs: k from the positions
            n = final[p]
            k = counts.get(n, 0)
            counts[n] = k + 1
            calls.add((n, k))
            c = committed.get(p)
            if c is not None and step_name(c) == n and c["seq"] not in served:
                table[(n, k)] = (p, c)
                at[p] = c
        for ident, (p, c) in by_id.items():
            calls.add(ident)
            if c is not None and c["seq"] not in served:
                table[ident] = (p, c)
                at[p] = c
        self._table, self._table_at, self._table_calls = table, at, calls
        self._recorded = max(self._recorded, len(f.history.steps))

    def _same_inputs(self, pos: int, rec: Record, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether to serve ``rec``: its inputs are the call's, or they changed and ``on_changed_inputs`` says serve."""
        cur = canonical_inputs(args, kwargs)
        recorded = rec.get("inputs")
        if recorded == cur:  # the common case, without hashing
            return True
        expected = rec.get("inputs_hash")
        if not isinstance(expected, str):
            if recorded is None:
                return True  # a minimal journal: nothing to compare with
            expected = inputs_hash(recorded)
        actual = inputs_hash(cur)
        if actual == expected:
            return True  # equal as JSON (a tuple and a list, a redacted secret)
        mode = self.on_changed_inputs
        detail = f"the inputs of step {name!r} at position {pos} changed since it was recorded (inputs hash {expected} -> {actual})"
        if mode == "error":
            raise DivergenceError(pos, name, name, detail)
        self.note("changed inputs", step=name, pos=pos, served_seq=rec.get("seq"), recorded_hash=expected, inputs_hash=actual,
                  action="served" if mode == "warn" else "rerun")
        what = "served its recorded output" if mode == "warn" else "running it again"
        print(f"agent-supervisor: {detail}: {what} (Run.open(on_changed_inputs=...): warn, error, rerun)", file=sys.stderr)
        return mode == "warn"

    def _served(self, rec: Record, name: str, fn: Callable[..., Any], opts: _Opts) -> Any:
        self.replayed.append(name)
        self._follow(rec)
        out = rec.get("output")
        otype = rec.get("output_type")
        hint = opts.returns if opts.returns is not None else self._hint(fn)
        if otype is not None or hint is not None:
            out = _codec().decode(out, otype, hint)
        return out

    def _follow(self, rec: Record) -> None:
        """The state after a served step: forward to its record (a step served out of commit order does not go back)."""
        damaged = self._fold.damaged
        if damaged and rec["seq"] >= damaged[0]["seq"]:
            self._replay_state(rec["seq"])  # raises: a damaged line is never served nor passed
        if not self._live and rec["seq"] > self._cursor.seq:
            self._replay_state(rec["seq"], rec)

    def _hint(self, fn: Callable[..., Any]) -> Any:
        """``fn``'s return annotation (through the codec), cached; ``None`` without one, cheaply."""
        ann = getattr(fn, "__annotations__", None)
        if (not ann or "return" not in ann) and not isinstance(fn, functools.partial):
            return None
        hints = self._hints
        try:
            return hints[fn]
        except (KeyError, TypeError):
            pass
        h = _codec().output_hint(fn)
        try:
            if len(hints) < 1024:
                hints[fn] = h
        except TypeError:
            pass  # not hashable
        return h

    # -- after the call
    def _finished(self, c: _Call, out: Any, t0: float, ctx: _Call) -> Record:
        rec: Record = {"kind": _STEP, "step": c.name, "pos": c.pos, "attempt": self.attempt}
        if c.k:
            rec["k"] = c.k
        inputs = c.inputs
        if inputs:
            rec["inputs"] = inputs
            rec["inputs_hash"] = inputs_hash(inputs)  # compared by 'replay --verify' and on resume
        else:
            rec["inputs_hash"] = _EMPTY_HASH
        try:
            try:  # plain JSON: serialised once
                rec["output"] = _Fragment(_dumps(out, option=_OUT_OPTS_STR))
            except TypeError:
                rec["output"] = _Fragment(_dumps(out, option=_OUT_OPTS))
        except TypeError:
            try:
                value, otype = _encode(out, c.name)
            except BaseException:
                with self._lock:
                    self._leave(c)
                raise
            rec["output"] = value
            if otype is not None:
                rec["output_type"] = otype
        rec["dur_ms"] = int((perf_counter() - t0) * 1e6 + 0.5) / 1000  # round(x, 3) at a third of its cost
        rec["key"] = c.key
        if c.call is not None:
            rec["call"] = c.call
        if ctx.usage:
            rec["usage"] = ctx.usage
        return rec

    def _write_or_leave(self, c: _Call, rec: Record) -> int:
        """Write ``rec`` without its sync (under the lock): its end in the stream, for :meth:`_wait_synced_or_leave`
        (``-1``: nothing to wait for, in a replay)."""
        w = self._writer
        if self.replay_mode or w is None:
            return -1
        try:
            try:
                return w.write(rec)
            except TypeError:
                self._unencodable(rec)
                return w.write(rec)
        except BaseException:
            if "state_patch" in rec:
                self._shadow = None  # not written: see _append
            self._leave(c)
            raise

    def _wait_synced_or_leave(self, c: _Call, rec: Record, end: int) -> None:
        """Wait (outside the lock) for a sync that covers a line :meth:`_write_or_leave` wrote."""
        assert self._writer is not None
        try:
            self._writer.wait_synced(end)
        except BaseException:
            with self._lock:
                if "state_patch" in rec:
                    self._shadow = None  # not committed: the next record carries the whole state (see _append)
                self._leave(c)
            raise

    def _leave(self, c: _Call, *, give_back: bool = True) -> None:
        """A call that ends without a record (its record not written, or cancelled). Under the lock.

        A cancelled call keeps its position: on resume it is called again, and finds its
        position free (a call that gave it back would find the next step's record there).
        """
        self._inflight -= 1
        if give_back:
            self._give_back(c.pos, c.name)

    def _done(self, c: _Call, rec: Record) -> None:
        """A step's record is committed. Under the lock."""
        self._took(rec)
        self._failures = 0
        self._inflight -= 1
        self.executed.append(c.name)

    def _failed(self, c: _Call, e: BaseException, t0: float, ctx: _Call, *, transient: bool = False) -> None:
        """Record a failed try; past ``max_failures`` in a row, roll back (or give up) and exit."""
        if c.replay is not None:
            if not transient:
                assert self._session is not None
                self._session.live_error(c.pos, c.name, e)
                with self._lock:
                    self._inflight -= 1
            return
        with self._lock:
            rec: Record = {"kind": _STEP, "step": c.name, "pos": c.pos, "attempt": self.attempt}
            if c.k:
                rec["k"] = c.k
            if c.inputs:
                rec["inputs"] = c.inputs
            rec["error"] = {
                "type": type(e).__name__,
                "message": str(e),
                "traceback": "".join(traceback.format_exception(e)[-6:]),
            }
            rec["dur_ms"] = round((time.perf_counter() - t0) * 1000, 3)
            if transient:
                rec["transient"] = True
            if c.call is not None:
                rec["call"] = c.call
            if ctx.usage:
                rec["usage"] = ctx.usage
                ctx.usage = None  # the next try records its own
            try:
                self._append(rec)
            except BaseException:
                if not transient:
                    self._leave(c)
                raise
            self._took(rec)
            if transient:
                return
            self._failures += 1
            self._leave(c)
            failures = self._failures
            if failures >= self.max_failures:
                self._rollback_or_give_up(c.name, failures, e)

    def _go_live(self) -> None:
        """The replay->live boundary: bring the state to the journal's end, then let go of the resume view.

        State saved after the last replayed step counts too. From here on the fold only
        counts (checkpoints and rollbacks stay, for the failure policy) and the cursor
        keeps no records. Recorded steps not served yet (steps that overlapped) stay
        served by ``(name, k)`` from the table.
        """
        eff = self._fold.history.effective
        if eff and self._cursor.seq < eff[-1]["seq"]:
            self._replay_state(eff[-1]["seq"])
        self._live = True
        if self.replay_mode:
            return  # a replay's session reads the recorded steps to its end
        if self._table is None and self._next < len(self._steps):
            self._build_table()
        self._cursor = _JournalCursor(self.run_dir, self._fold, self._cursor.seq, self._cursor.doc)
        self._shadow_json = None
        self._fold.stop_keeping()
        self._steps = []
        self.__dict__.pop("step", None)  # the resume's run.step (_resume_step) has nothing left to serve
        self._next = 0

    def _release_served(self, pos: int) -> None:
        """Give the pages of the journal map served so far back to the kernel.

        Resume reads step lines through a read-only map of the journal; each page a
        replayed step touched would stay in the process's RSS to the end of the
        replay (a 3 GB journal: 3 GB, enough to trip ``--max-rss``). The pages are
        the file's, so dropping them loses nothing: a later read faults them in again.
        """
        rec: object = self._steps[pos]  # a LazyRecord in place of a dict (see JournalReader.iter_entries)
        if type(rec) is not LazyRecord or not isinstance(rec.src, mmap.mmap):
            return
        old, upto = self._released
        if old is not None and old is not rec.src:
            _dontneed(old, -1)  # the replay has moved on to the next segment: all of it
            upto = 0
        end = rec.start - rec.start % mmap.PAGESIZE
        if end > upto:
            _dontneed(rec.src, end)
        self._released = (rec.src, max(end, upto))

    def _replay_state(self, upto_seq: int, current: Record | None = None) -> None:
        """Bring the state to what it was right after the recorded record ``upto_seq``.

        The recorded patches are the truth: what the step function did to the
        state, and what the agent did between steps, are both in them.
        ``current`` is the already parsed record at ``upto_seq``, if the caller has it.

        It never goes past a damaged line (other than a damaged ``begin`` or ``start``,
        which held nothing a resume needs): the agent stops there with a message that
        names the line and how to repair it (exit 78, the run directory unchanged but
        for a note), as it would never serve a step the journal cannot show.
        """
        damaged = self._fold.damaged
        if damaged and upto_seq >= damaged[0]["seq"]:
            msg = damaged_message(damaged[0], self.run_dir, self._fold.checkpoints)
            if self.replay_mode:
                raise ReplayError(msg)
            self.note("cannot resume past a damaged line", error=msg, damaged={
                k: damaged[0].get(k) for k in ("file", "line", "seq", "offset", "reason", "pos")})
            print(f"agent-supervisor: {msg}", file=sys.stderr)
            self._closed = True  # nothing more to write: close() must not try to pass the line again
            if self._writer is not None:
                self._writer.close()
            raise SystemExit(rundir.EXIT_FAILED)
        self._shadow_json = None  # the cursor may change the shadow in place
        changed = self._cursor.advance(upto_seq, current)
        if changed and not state_mod.same(self._state, self._shadow):  # as JSON: 1 -> True is a change
            self._state.clear()
            self._state.update(state_mod.json_copy(self._shadow))


    def _took(self, rec: Record) -> None:
        """Fold a record this process just wrote; its state patch is already in the shadow."""
        fold = self._fold
        if fold.keep:
            fold.add(rec)
        elif rec["kind"] is _STEP and "error" not in rec:
            fold.step_count += 1  # all a counting fold does with a live step (Fold._record)
        else:
            if "state_patch" in rec:
                rec = {k: v for k, v in rec.items() if k != "state_patch"}  # a kept checkpoint needs no patch
            fold.add(rec)
        seq = rec["seq"]
        if seq > self._cursor.seq:  # records without a patch may commit out of order (threads)
            self._cursor.applied(seq)

    def _with_state_patch(self, rec: Record) -> None:
        # fix_keys: the state's non-string keys become JSON's strings in place, so the state
        # in memory after a step is the state a resume gives (README, "State")
        #
        # Most steps leave the state as it was. One dump of the state, compared with the shadow's bytes
        # (kept from the step before, while the shadow is the same object), tells so: one pass at C speed
        # instead of state.same's == and two dumps. Only string keys are dumped so (a state with other
        # keys goes to make_patch, which converts them).
        st = self._state
        shadow = self._cursor.doc
        if not st and type(shadow) is dict and not shadow:
            return  # both empty (an agent that keeps no state): nothing to compare
        try:
            now: bytes | None = orjson.dumps(st)
        except TypeError:
            now = None
        changed = False  # known to differ as JSON: make_patch need not compare them again
        if now is not None:
            known = self._shadow_json
            if known is None or known[0] is not shadow:
                try:
                    known = (shadow, orjson.dumps(shadow))
                except TypeError:
                    known = (shadow, b"")
            if known[1] == now:
                self._shadow_json = known
                return
            changed = known[1] != b""  # both dumped, the bytes differ
        patch = state_mod.make_patch(shadow, st, fix_keys=True, changed=changed)
        if patch:
            rec["state_patch"] = patch
            shadow = self._cursor.doc = state_mod.apply_patch(shadow, patch)
        # the shadow is now the state as JSON: its bytes are the state's
        self._shadow_json = (shadow, now) if now is not None else None

    def _append(self, rec: Record, *, sync: bool = True, alone: bool = False) -> Record:
        if self.replay_mode or self._writer is None:
            return rec  # replay never writes to the journal it replays (and has no writer)
        try:
            try:
                return self._writer.append(rec, sync=sync, alone=alone)
            except TypeError:
                self._unencodable(rec)
                return self._writer.append(rec, sync=sync, alone=alone)
        except (JournalError, TypeError):
            if "state_patch" in rec:
                # not written (a failed write is cut back by the writer), but its patch is in the shadow: the
                # next patch must not be made against a state the journal never had. An unknown shadow makes
                # the next record carry the whole state (one root ``replace``), once.
                self._shadow = None
            raise

    def _unencodable(self, rec: Record) -> None:
        """A record with a value JSON cannot hold: inputs are shown as repr (an output was encoded before)."""
        if "inputs" in rec:
            rec["inputs"] = orjson.Fragment(orjson.dumps(rec["inputs"], default=repr, option=_DUMPS_OPTS))

    def _rollback_or_give_up(self, name: str, failures: int, e: BaseException) -> NoReturn:
        """Past ``max_failures``: record a rollback to the last checkpoint (exit 75) or, past ``max_rollbacks``,
        give up (exit 78). Under the lock, so no other thread's step begins meanwhile.

        From the main thread it raises ``SystemExit``; from any other thread (a thread's own ``SystemExit`` would
        end only that thread) it ends the process with the same code once the journal is synced and closed.
        """
        reason = f"{failures} consecutive failures of step {name!r}: {type(e).__name__}: {e}"
        done = self._fold.rollback_total  # every rollback of the run, not only those on the effective path
        if done >= self.max_rollbacks:
            self.note("gave up", status="failed", reason=f"{reason}; {done} rollbacks already")
            self.close(status="failed")
            self._exit(f"agent-supervisor: gave up after {done} rollbacks: {reason}", rundir.EXIT_FAILED)
        cps = [c for c in self._fold.checkpoints if c.get("pos", 0) <= self._pos]
        target = cps[-1] if cps else None
        rec = rollback_record(target, reason, by="sdk", failed_step=name)
        # The last record: a step another thread commits after it would count on the rolled-back branch,
        # and so would the state at exit (made against the state before the rollback): neither is written.
        self._closed = True
        if self._writer is not None and not self.replay_mode:
            try:
                self._writer.append_last(rec)
            finally:
                self._writer.close()
        where = f"checkpoint {target.get('name')!r}" if target else "the start of the run"
        self._exit(f"agent-supervisor: rolled back to {where}: {reason}", rundir.EXIT_ROLLBACK)

    @staticmethod
    def _exit(message: str, code: int) -> NoReturn:
        """Print ``message`` and end the agent with ``code``: ``SystemExit`` in the main thread; from another
        thread the whole process, at once (the journal is closed: what follows could not be recorded)."""
        print(message, file=sys.stderr)
        if threading.current_thread() is threading.main_thread():
            raise SystemExit(code)
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):
                pass  # closed or broken: nothing more can be said there
        os._exit(code)

    # ------------------------------------------------------------------ checkpoints and notes
    def checkpoint(self, name: str) -> str:
        """Save the full state as a named checkpoint; on resume, an already recorded one is not written again."""
        with self._lock:  # its patch and its line, in order with the steps' (threads)
            return self._checkpoint(name)

    def _checkpoint(self, name: str) -> str:
        pending = self._pending_checkpoints
        while pending and pending[0].get("pos", 0) < self._pos:
            pending.pop(0)
        if pending and pending[0].get("pos") == self._pos and pending[0].get("name") == name:
            done = pending.pop(0)
            if not self._live:  # live, the state is already past it
                self._replay_state(done["seq"])
            return str(done.get("file", ""))
        if self.replay_mode or self._writer is None:
            return ""
        rec: Record = {"kind": Kind.CHECKPOINT, "name": name, "pos": self._pos}
        self._with_state_patch(rec)
        ts = rundir.utc_now()
        snapshot = orjson.loads(self.redactor(orjson.dumps(self._shadow, option=_DUMPS_OPTS)))
        try:
            rec["file"] = checkpoints.write_checkpoint(
                self.run_dir, name, seq=self._writer.next_seq, pos=self._pos, ts=ts, state=snapshot
            )
        except (OSError, SupervisorError) as e:
            # no record: the shadow must not keep the patch (the next one is made against it)
            self._reload_shadow()
            if isinstance(e, SupervisorError):
                raise
            raise _os_error(self.run_dir, e) from e
        rec["ts"] = ts
        self._append(rec)
        self._took(rec)
        return str(rec["file"])

    def _reload_shadow(self) -> None:
        """Bring the shadow back to the last record this process folded, after one that was not written.

        Before the first live step the cursor replays its records in memory; after it,
        it reads the patches back from the files (a live run keeps no records).
        """
        seq = self._cursor.seq
        self._shadow_json = None
        self._cursor.reset()
        if seq >= 0:
            self._cursor.advance(seq)

    def note(self, message: str, **fields: Any) -> None:
        """Append a free-form ``note`` record (shown in the log and the TUI)."""
        self._append({"kind": Kind.NOTE, "message": message, **fields})
