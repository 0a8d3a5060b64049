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
import mmap
import os
import random
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, cast

import orjson

from .core import checkpoints, rundir
from .core import state as state_mod
from .core.cursor import Shape, StateCursor
from .core.history import Fold, History, damaged_message, rollback_record
from .core.journal import JournalReader, JournalWriter, open_journal
from .core.records import Kind, LazyRecord, Record, step_name
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

    Create it with :meth:`Run.open`. Not thread-safe: call ``step`` from one thread.
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
    ) -> None:
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
            entries = JournalReader(self.run_dir).load(lazy=True)
        else:
            self._writer, entries = open_journal(self.run_dir, redact=self.redactor, **kw)
            checkpoints.clean_stale_tmp(self.run_dir)  # a killed checkpoint write's temporary file (we hold the lock)
        # The resume view (every recorded step, the effective records) serves positions not yet
        # reached; the first live step lets go of it (_go_live), and live records are only counted:
        # memory stays flat however long the run.
        self._fold = Fold()
        self._fold.extend(entries)
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
        self._current_key: str | None = None
        self._closed = False
        self._live = False
        self._released: tuple[mmap.mmap | None, int] = (None, 0)  # the map and bytes of it given back
        starts = sum(1 for r in resumed.entries if isinstance(r, dict) and r.get("kind") == Kind.START)
        self.attempt = int(os.environ.get(rundir.ENV_ATTEMPT) or starts + 1)
        self.resuming = bool(self._steps) or os.environ.get(rundir.ENV_RESUME) == "1"
        self._session: ReplaySession | None = None
        if self.replay_mode:
            self._session = ReplaySession.from_env(self.replay_mode, self.run_dir, self.run_id, self._steps, self.redactor)
        self._append(
            {
                "kind": Kind.START,
                "attempt": self.attempt,
                "pid": os.getpid(),
                "resume": self.resuming,
                "replayable_steps": len(self._steps),
                "argv": redact_argv(sys.argv, self.redactor),
            }
        )

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, run_dir: str | os.PathLike[str] | None = None, **options: Any) -> Run:
        """Open the run directory from the argument, else the supervisor's environment, else ``./runs/<script>``.

        The environment wins over the default but not over an explicit argument.
        Options: ``max_failures``, ``max_rollbacks``, ``retries``, ``transient``,
        ``backoff``, ``backoff_max``, ``secrets``, ``rotate_bytes``.

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
            self._session.finish(self._pos, exc)
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
        if not self._live and self._pos >= len(self._steps) and self._fold.history.effective:
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
            self._session.finish(self._pos, None)
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
        f.extend(JournalReader(self.run_dir).load(lazy=True))
        return f.history

    @property
    def _shadow(self) -> Any:
        """The state as the journal records it (the patches so far): the next patch is made against it."""
        return self._cursor.doc

    @_shadow.setter
    def _shadow(self, doc: Any) -> None:
        self._cursor.doc = doc

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
        """A stable key for the step at ``pos`` (default: the step in flight): run id + position."""
        return f"{self.run_id}:{self._pos if pos is None else pos}"

    @property
    def key(self) -> str | None:
        """The idempotency key of the step being executed, for external APIs; ``None`` outside a step."""
        return self._current_key

    def add_secret(self, value: str) -> None:
        """Register a value that must never reach disk (the supervisor, if any, learns it before this returns)."""
        if self.redactor.add(value):
            send_secrets((value,))

    # ------------------------------------------------------------------ steps
    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` as the step ``name`` or, on resume, return its recorded output."""
        pos = self._pos
        if self._session is not None:
            out = self._replay_step(self._session, pos, name, fn, args, kwargs)
            if not pos & _RELEASE_EVERY and pos < len(self._steps):
                self._release_served(pos)
            return out  # type: ignore[no-any-return]
        if pos < len(self._steps):
            out = self._replay(pos, name)
            if not pos & _RELEASE_EVERY:
                self._release_served(pos)
            return out  # type: ignore[no-any-return]
        if not self._live:
            self._go_live()
        if self.replay_mode == "strict":
            raise ReplayError(
                f"strict replay: the agent asked for step {name!r} at position {pos}, "
                f"but the journal has only {len(self._steps)} finished steps"
            )
        return self._execute(pos, name, fn, args, kwargs)  # type: ignore[no-any-return]

    def _go_live(self) -> None:
        """The replay->live boundary: bring the state to the journal's end, then let go of the resume view.

        State saved after the last replayed step counts too. From here on the fold only
        counts (checkpoints and rollbacks stay, for the failure policy) and the cursor
        keeps no records: positions already served are never asked for again.
        """
        eff = self._fold.history.effective
        if eff and self._cursor.seq < eff[-1]["seq"]:
            self._replay_state(eff[-1]["seq"])
        self._live = True
        if self.replay_mode:
            return  # a replay's session reads the recorded steps to its end
        self._cursor = _JournalCursor(self.run_dir, self._fold, self._cursor.seq, self._cursor.doc)
        self._fold.stop_keeping()
        self._steps = []

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

    def task(self, name: str | Callable[..., str] | None = None) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """Decorator form of :meth:`step`. ``name`` is a string, or a function of the call's arguments."""

        def deco(fn: Callable[P, T]) -> Callable[P, T]:
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
                n = name(*args, **kwargs) if callable(name) else (name or fn.__name__)
                return self.step(n, fn, *args, **kwargs)

            wrapper.__name__ = fn.__name__
            wrapper.__doc__ = fn.__doc__
            return wrapper

        return deco

    def _step_record(self, pos: int) -> Record:
        """The recorded step at ``pos`` as a dict (parsed now if it was loaded lazily)."""
        rec: Record | LazyRecord = self._steps[pos]
        return rec.record() if isinstance(rec, LazyRecord) else rec

    def _replay(self, pos: int, name: str) -> Any:
        try:
            rec = self._step_record(pos)
        except JournalError:  # a step line loaded unparsed (lazily) that does not parse: a damaged line
            rec = cast(LazyRecord, self._steps[pos]).damaged().record()
            rec["pos"] = pos
            self._fold.damaged.insert(0, rec)  # the first: the lines before it were served
        damaged = self._fold.damaged
        if damaged and rec["seq"] >= damaged[0]["seq"]:
            self._replay_state(rec["seq"])  # stops at the damaged line, before any step after it is served
        recorded = step_name(rec)
        if recorded != name:
            raise DivergenceError(pos, recorded, name)
        self._pos = pos + 1
        self.replayed.append(name)
        self._replay_state(rec["seq"], rec)
        return rec.get("output")

    def _replay_step(
        self, s: ReplaySession, pos: int, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``replay --verify`` / ``--live``: serve the step (checking its inputs) or run it live and compare.

        Nothing is written. A live step's new output goes back to the agent; the
        state keeps following the recorded patches, as for served steps.
        """
        try:
            rec = self._step_record(pos) if pos < len(self._steps) else None
        except JournalError:  # a damaged step line loaded unparsed: as in _replay
            rec = cast(LazyRecord, self._steps[pos]).damaged().record()
            rec["pos"] = pos
            self._fold.damaged.insert(0, rec)
        damaged = self._fold.damaged
        if rec is not None and damaged and rec["seq"] >= damaged[0]["seq"]:
            self._replay_state(rec["seq"])  # raises: a damaged line is never served nor passed
        live = s.mode.is_live(name)
        if rec is None and not live:
            raise s.missing(pos, name)
        if rec is not None and step_name(rec) != name:
            raise s.step_mismatch(pos, rec, name)
        if not live:
            s.check_inputs(pos, rec, canonical_inputs(args, kwargs))  # type: ignore[arg-type]
            s.replayed += 1
            # as _replay, without parsing the record a second time
            self._pos = pos + 1
            self.replayed.append(name)
            self._replay_state(rec["seq"], rec)  # type: ignore[index]
            return rec.get("output")  # type: ignore[union-attr]
        self._current_key = self.idempotency_key(pos)
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        except BaseException as e:
            s.live_error(pos, name, e)
            raise
        finally:
            self._current_key = None
        s.live_step(pos, rec, name, out, round((time.perf_counter() - t0) * 1000, 3))
        self._pos = pos + 1
        self.executed.append(name)
        if rec is not None:
            self._replay_state(rec["seq"], rec)
        return out

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
        changed = self._cursor.advance(upto_seq, current)
        if changed and not state_mod.same(self._state, self._shadow):  # as JSON: 1 -> True is a change
            self._state.clear()
            self._state.update(state_mod.json_copy(self._shadow))

    def _execute(self, pos: int, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        inputs: dict[str, Any] = {}
        if args:
            inputs["args"] = list(args)
        if kwargs:
            inputs["kwargs"] = kwargs
        base: Record = {"kind": _BEGIN, "step": name, "pos": pos, "attempt": self.attempt}
        if inputs:
            base["inputs"] = inputs
        self._append(base, sync=False)
        key = self.idempotency_key(pos)
        tries = 0
        while True:
            tries += 1
            t0 = time.perf_counter()
            self._current_key = key
            try:
                out = fn(*args, **kwargs)
            except self.transient as e:
                if tries <= self.retries:
                    self._record_error(pos, name, inputs, e, t0, transient=True)
                    delay = min(self.backoff_max, self.backoff * 2 ** (tries - 1)) * random.uniform(0.5, 1.0)
                    time.sleep(delay)
                    continue
                self._fail(pos, name, inputs, e, t0)
                raise
            except Exception as e:
                self._fail(pos, name, inputs, e, t0)
                raise
            finally:
                self._current_key = None
            break
        rec: Record = {"kind": _STEP, "step": name, "pos": pos, "attempt": self.attempt}
        if inputs:
            rec["inputs"] = inputs
        rec["inputs_hash"] = inputs_hash(inputs)  # compared by 'replay --verify'
        rec["output"] = out
        rec["dur_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        rec["key"] = key
        self._with_state_patch(rec)
        self._append(rec)
        self._took(rec)
        self._failures = 0
        self._pos = pos + 1
        self.executed.append(name)
        return out

    def _took(self, rec: Record) -> None:
        """Fold a record this process just wrote; its state patch is already in the shadow."""
        if not self._fold.keep and "state_patch" in rec:
            rec = {k: v for k, v in rec.items() if k != "state_patch"}  # a kept checkpoint needs no patch
        self._fold.add(rec)
        self._cursor.applied(rec["seq"])

    def _with_state_patch(self, rec: Record) -> None:
        # fix_keys: the state's non-string keys become JSON's strings in place, so the state
        # in memory after a step is the state a resume gives (README, "State")
        patch = state_mod.make_patch(self._shadow, self._state, fix_keys=True)
        if patch:
            rec["state_patch"] = patch
            self._shadow = state_mod.apply_patch(self._shadow, patch)

    def _append(self, rec: Record, *, sync: bool = True) -> Record:
        if self.replay_mode or self._writer is None:
            return rec  # replay never writes to the journal it replays (and has no writer)
        try:
            try:
                return self._writer.append(rec, sync=sync)
            except TypeError:
                # the record has a value JSON cannot hold: inputs are shown as repr, an output must be JSON
                if "inputs" in rec:
                    rec["inputs"] = orjson.Fragment(orjson.dumps(rec["inputs"], default=repr, option=_DUMPS_OPTS))
                if rec.get("kind") == Kind.STEP and "output" in rec:
                    try:
                        orjson.dumps(rec["output"], option=_DUMPS_OPTS)
                    except TypeError as e:
                        raise TypeError(
                            f"step {rec.get('step')!r} returned a value that is not JSON ({e}); "
                            "return dicts, lists, strings, numbers, booleans or None"
                        ) from None
                return self._writer.append(rec, sync=sync)
        except (JournalError, TypeError):
            if "state_patch" in rec:
                # not written (a failed write is cut back by the writer), but its patch is in the shadow: the
                # next patch must not be made against a state the journal never had. An unknown shadow makes
                # the next record carry the whole state (one root ``replace``), once.
                self._shadow = None
            raise

    def _record_error(
        self, pos: int, name: str, inputs: dict[str, Any], e: BaseException, t0: float, *, transient: bool = False
    ) -> None:
        rec: Record = {"kind": _STEP, "step": name, "pos": pos, "attempt": self.attempt}
        if inputs:
            rec["inputs"] = inputs
        rec["error"] = {
            "type": type(e).__name__,
            "message": str(e),
            "traceback": "".join(traceback.format_exception(e)[-6:]),
        }
        rec["dur_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        if transient:
            rec["transient"] = True
        self._append(rec)
        self._took(rec)
        if not transient:
            self._failures += 1

    def _fail(self, pos: int, name: str, inputs: dict[str, Any], e: BaseException, t0: float) -> None:
        """Record a failed step; past ``max_failures`` in a row, roll back (or give up) and exit."""
        self._record_error(pos, name, inputs, e, t0)
        failures = self._failures  # as History.consecutive_failures counts them, without keeping the records
        if failures >= self.max_failures:
            self._rollback_or_give_up(name, failures, e)

    def _rollback_or_give_up(self, name: str, failures: int, e: BaseException) -> None:
        reason = f"{failures} consecutive failures of step {name!r}: {type(e).__name__}: {e}"
        done = self._fold.rollback_total  # every rollback of the run, not only those on the effective path
        if done >= self.max_rollbacks:
            self.note("gave up", status="failed", reason=f"{reason}; {done} rollbacks already")
            self.close(status="failed")
            print(f"agent-supervisor: gave up after {done} rollbacks: {reason}", file=sys.stderr)
            raise SystemExit(rundir.EXIT_FAILED)
        cps = [c for c in self._fold.checkpoints if c.get("pos", 0) <= self._pos]
        target = cps[-1] if cps else None
        rec = rollback_record(target, reason, by="sdk", failed_step=name)
        self._append(rec)
        self.close()
        where = f"checkpoint {target.get('name')!r}" if target else "the start of the run"
        print(f"agent-supervisor: rolled back to {where}: {reason}", file=sys.stderr)
        raise SystemExit(rundir.EXIT_ROLLBACK)

    # ------------------------------------------------------------------ checkpoints and notes
    def checkpoint(self, name: str) -> str:
        """Save the full state as a named checkpoint; on resume, an already recorded one is not written again."""
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
        self._cursor.reset()
        if seq >= 0:
            self._cursor.advance(seq)

    def note(self, message: str, **fields: Any) -> None:
        """Append a free-form ``note`` record (shown in the log and the TUI)."""
        self._append({"kind": Kind.NOTE, "message": message, **fields})
