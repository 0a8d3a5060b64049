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

import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import orjson

from .core import checkpoints, rundir
from .core import state as state_mod
from .core.cursor import StateCursor
from .core.history import Fold, History, rollback_record
from .core.journal import JournalReader, JournalWriter, open_journal
from .core.records import Kind, LazyRecord, Record, step_name
from .core.redact import Redactor
from .errors import DivergenceError, JournalError, ReplayError
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
        meta = rundir.read_run_json(self.run_dir)
        if not self.replay_mode and not (self.run_dir / rundir.RUN_JSON).exists():
            meta = rundir.update_run_json(
                self.run_dir,
                id=self.run_dir.name,
                command=[sys.executable, *sys.argv],
                cwd=os.getcwd(),
                created=rundir.utc_now(),
                status="running",
            )
        self.run_id: str = str(meta.get("id") or self.run_dir.name)
        self.redactor = Redactor(secrets)
        kw: dict[str, Any] = {} if rotate_bytes is None else {"rotate_bytes": rotate_bytes}
        # lazy: finished steps stay unparsed until replayed, and begin records (which say only
        # that a step started) are not kept: resuming 1,000,000 steps builds no million dicts
        self._writer: JournalWriter | None = None
        if self.replay_mode:
            entries = JournalReader(self.run_dir).load(lazy=True)
        else:
            self._writer, entries = open_journal(self.run_dir, redact=self.redactor, **kw)
        self._fold = Fold()
        self._fold.extend(entries)
        self.history: History = self._fold.history
        self._steps = self.history.steps
        self._pending_checkpoints = [c for c in self.history.checkpoints]
        self._pos = 0
        # the state as the journal has it (the shadow), replayed along the effective history
        self._cursor = StateCursor(self.run_dir, records=self.history.effective)
        self._state: dict[str, Any] = {}
        self.replayed: list[str] = []
        """Names of the steps served from the journal in this process."""
        self.executed: list[str] = []
        """Names of the steps that ran live in this process."""
        self._current_key: str | None = None
        self._closed = False
        self._live = False
        starts = sum(1 for r in self.history.entries if isinstance(r, dict) and r.get("kind") == Kind.START)
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
                "argv": sys.argv,
            }
        )

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, run_dir: str | os.PathLike[str] | None = None, **options: Any) -> Run:
        """Open the run directory from the argument, else the supervisor's environment, else ``./runs/<script>``.

        The environment wins over the default but not over an explicit argument.
        Options: ``max_failures``, ``max_rollbacks``, ``retries``, ``transient``,
        ``backoff``, ``backoff_max``, ``secrets``, ``rotate_bytes``.
        """
        if run_dir is None:
            env = os.environ.get(rundir.ENV_RUN_DIR)
            path = Path(env) if env else default_run_dir()
        else:
            path = Path(run_dir)
        return cls(path, **options)

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
            print(f"agent-supervisor: {exc}", file=sys.stderr)
            raise SystemExit(rundir.EXIT_FAILED) from None
        if exc is None:
            self.close(status="succeeded")
        else:
            self.close()

    def close(self, status: str | None = None) -> None:
        """Close the journal; outside a supervisor, record ``status`` in ``run.json``."""
        if self._closed:
            return
        self._closed = True
        if not self._live and self._pos >= len(self._steps) and self.history.effective:
            self._replay_state(self.history.effective[-1]["seq"])
            self._live = True
        if self._live and not self.replay_mode and self._state != self._shadow:
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
            for r in self.history.rollbacks
        ]

    def idempotency_key(self, pos: int | None = None) -> str:
        """A stable key for the step at ``pos`` (default: the step in flight): run id + position."""
        return f"{self.run_id}:{self._pos if pos is None else pos}"

    @property
    def key(self) -> str | None:
        """The idempotency key of the step being executed, for external APIs; ``None`` outside a step."""
        return self._current_key

    def add_secret(self, value: str) -> None:
        """Register a value that must never reach disk."""
        self.redactor.add(value)

    # ------------------------------------------------------------------ steps
    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` as the step ``name`` or, on resume, return its recorded output."""
        pos = self._pos
        if self._session is not None:
            return self._replay_step(self._session, pos, name, fn, args, kwargs)  # type: ignore[no-any-return]
        if pos < len(self._steps):
            return self._replay(pos, name)  # type: ignore[no-any-return]
        eff = self.history.effective
        if eff and not self._live and self._cursor.seq < eff[-1]["seq"]:
            # the replay->live boundary: state saved after the last replayed step counts too
            self._replay_state(self.history.effective[-1]["seq"])
        self._live = True
        if self.replay_mode == "strict":
            raise ReplayError(
                f"strict replay: the agent asked for step {name!r} at position {pos}, "
                f"but the journal has only {len(self._steps)} finished steps"
            )
        return self._execute(pos, name, fn, args, kwargs)  # type: ignore[no-any-return]

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
        rec = self._step_record(pos)
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
        rec = self._step_record(pos) if pos < len(self._steps) else None
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
        """
        changed = self._cursor.advance(upto_seq, current)
        if changed and self._state != self._shadow:
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
        self._pos = pos + 1
        self.executed.append(name)
        return out

    def _took(self, rec: Record) -> None:
        """Fold a record this process just wrote; its state patch is already in the shadow."""
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

    def _fail(self, pos: int, name: str, inputs: dict[str, Any], e: BaseException, t0: float) -> None:
        """Record a failed step; past ``max_failures`` in a row, roll back (or give up) and exit."""
        self._record_error(pos, name, inputs, e, t0)
        failures = self.history.consecutive_failures(pos)
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
        cps = [c for c in self.history.checkpoints if c.get("pos", 0) <= self._pos]
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
            self._replay_state(done["seq"])
            return str(done.get("file", ""))
        if self.replay_mode or self._writer is None:
            return ""
        rec: Record = {"kind": Kind.CHECKPOINT, "name": name, "pos": self._pos}
        self._with_state_patch(rec)
        ts = rundir.utc_now()
        snapshot = orjson.loads(self.redactor(orjson.dumps(self._shadow, option=_DUMPS_OPTS)))
        rec["file"] = checkpoints.write_checkpoint(
            self.run_dir, name, seq=self._writer.next_seq, pos=self._pos, ts=ts, state=snapshot
        )
        rec["ts"] = ts
        self._append(rec)
        self._took(rec)
        return str(rec["file"])

    def note(self, message: str, **fields: Any) -> None:
        """Append a free-form ``note`` record (shown in the log and the TUI)."""
        self._append({"kind": Kind.NOTE, "message": message, **fields})
