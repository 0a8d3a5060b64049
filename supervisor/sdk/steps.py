"""One path for every step call, sync and async: number the call, serve it or run it, retry it by the one policy,
record it. The flow (:meth:`Steps._flow`) is written once; the two drivers only call, sleep and wait for the sync
as their kind of caller can (a thread blocks, a task awaits)."""

from __future__ import annotations

import functools
import threading
import time
from _thread import get_ident
from collections.abc import Callable, Generator
from time import perf_counter
from typing import Any, NoReturn, ParamSpec, TypeVar

from ..core import rundir
from ..core.history import Fold, rollback_record
from ..core.records import Record
from ..errors import JournalError, SupervisorError
from .breaks import Gate
from .exits import exit_agent
from .names import NameCounts, StepNames
from .options import CURRENT, Call, RetryPolicy, _is_async_fn, _Opts, asyncio_mod, call_async, call_sync, timed_out_of
from .recorder import Recorder
from .serve import AGAIN, LIVE, ReplayLive, Server
from .shadow import Shadow

P = ParamSpec("P")
T = TypeVar("T")

# What the flow asks of its driver: call the step function, sleep before a retry, wait for a line's sync, wait
# (at most so long) for a timed-out call that runs on to end (the answer: whether it ended).
_CALL = 0
_SLEEP = 1
_SYNC = 2
_WAIT = 3
_Op = tuple[int, Any]
_CALL_OP: _Op = (_CALL, None)


class Steps:
    """Numbers calls (position and per-name count, in call order), runs the live ones and keeps the failure policy.

    ``close(status)`` closes the run (giving up ends it); the run holds this object, so it is held weakly there.
    """

    def __init__(
        self, lock: threading.Lock, server: Server, recorder: Recorder, shadow: Shadow, policy: RetryPolicy,
        max_failures: int, max_rollbacks: int, failures: int, key_prefix: str, close: Callable[[str], None],
    ) -> None:
        self.lock = lock
        self.server = server
        self.recorder = recorder
        self.shadow = shadow
        self.fold: Fold = recorder.fold
        self.policy = policy
        self.max_failures = max_failures
        self.max_rollbacks = max_rollbacks
        self.failures = failures  # failed tries in a row of the step at the next position
        self.key_prefix = key_prefix
        self.close = close
        self.pos = 0
        self.counts = NameCounts()  # calls so far per step name: the k of the (name, k) identity
        self.inflight = 0
        self.owner = get_ident()  # calls from another thread are concurrent (see Server.serve)
        self.executed = StepNames()
        self.gate: Gate | None = None
        """Breakpoints and pauses (``None`` in a replay: nothing pauses)."""
        self.before_rollback: Callable[[int], Callable[[Record], None]] | None = None
        """With a workspace: saves what the rollback record about to get the seq given abandons (before the
        record: a killed process leaves a snapshot whose record never came, never used); returns what to call
        with the record once written."""

    # ------------------------------------------------------------------ the drivers
    def call(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts) -> Any:
        """``run.step``: served, or run in this thread (blocking on a retry's delay and on its line's sync)."""
        with self.lock:
            c = self._enter(name, fn, args, kwargs, opts)
        if type(c) is not Call:
            return c  # served from the journal
        gate = self.gate
        if gate is not None and c.replay is None:
            pause = gate.pause_of(c)
            if pause is not None:  # a breakpoint: wait for a person's answer, outside the lock
                try:
                    answer = gate.wait(pause)
                    assert answer is not None  # no timeout: it waits for one
                    fn, args, kwargs = gate.take(c, pause, answer, fn, args, kwargs)
                except BaseException:
                    with self.lock:
                        self._leave(c, give_back=False)
                    raise
        flow = self._flow(c, opts, threads=True)
        op = next(flow)
        while True:
            try:
                if op is _CALL_OP:
                    got = call_sync(name, fn, args, kwargs, opts.timeout)
                else:
                    got = None
                    if op[0] == _SYNC:  # first: the one of every step of a threaded agent
                        self.recorder.wait_synced(op[1])
                    elif op[0] == _SLEEP:
                        time.sleep(op[1])
                    else:
                        got = op[1][0].done.wait(op[1][1])
            except BaseException as e:
                try:
                    op = flow.throw(e)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                op = flow.send(got)
            except StopIteration as stop:
                return stop.value

    async def acall(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts) -> Any:
        """``run.astep``: served, or run in this task (awaiting the function, a retry's delay and its line's sync)."""
        with self.lock:
            c = self._enter(name, fn, args, kwargs, opts)
        if type(c) is not Call:
            return c  # served from the journal
        gate = self.gate
        if gate is not None and c.replay is None:
            pause = gate.pause_of(c)
            if pause is not None:  # a breakpoint: the task waits for a person's answer, the others go on
                try:
                    answer = await gate.await_(pause)
                    assert answer is not None
                    fn, args, kwargs = gate.take(c, pause, answer, fn, args, kwargs)
                except BaseException:
                    with self.lock:
                        self._leave(c, give_back=False)
                    raise
        flow = self._flow(c, opts, threads=False)
        op = next(flow)
        while True:
            try:
                got = None
                if op is _CALL_OP:
                    got = await call_async(name, fn, args, kwargs, opts.timeout)
                elif op[0] == _SYNC:  # first: the one of every step
                    fut = self.recorder.synced_future(op[1])
                    if fut is not None:
                        await fut
                elif op[0] == _SLEEP:
                    await asyncio_mod().sleep(op[1])
                else:
                    got = await op[1][0].ended(op[1][1])
            except BaseException as e:
                try:
                    op = flow.throw(e)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                op = flow.send(got)
            except StopIteration as stop:
                return stop.value

    def task(self, name: str | Callable[..., str] | None, opts: _Opts) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """``@run.task``: the function as a step (an ``async def`` as an awaited step)."""

        def deco(fn: Callable[P, T]) -> Callable[P, T]:
            def step_name_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
                return name(*args, **kwargs) if callable(name) else (name or fn.__name__)

            if _is_async_fn(fn):

                async def awrapper(*args: Any, **kwargs: Any) -> Any:
                    return await self.acall(step_name_of(args, kwargs), fn, args, kwargs, opts)

                functools.update_wrapper(awrapper, fn)
                return awrapper  # type: ignore[return-value]

            def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
                out: T = self.call(step_name_of(args, kwargs), fn, args, kwargs, opts)
                return out

            functools.update_wrapper(wrapper, fn)
            return wrapper

        return deco

    # ------------------------------------------------------------------ the one flow
    def _enter(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts) -> Any:
        """Number the call, then serve it or begin it live: the served output, or the :class:`Call` to run.
        Called with the lock held."""
        server = self.server
        pos = self.pos
        if pos < server.skip_to:  # a served parent: its children's positions are not visited
            pos = server.skip_to
        self.pos = pos + 1
        parent = CURRENT.get()  # the step whose function calls this one: a nested step is its child
        if parent is None:
            counts, depth = self.counts, 0
        else:
            if parent.kids is None:
                parent.kids = NameCounts()
            counts, depth = parent.kids, parent.depth + 1
        k = counts.get(name)
        if k is None:
            k = counts.new(name)
        counts[name] = k + 1
        if not server.overlap and (self.inflight > depth or get_ident() != self.owner):  # its ancestors are no overlap
            server.overlap = True
        try:
            pid = None if parent is None else parent.ident
            out = server.serve(pos, k, name, fn, args, kwargs, opts, pid)
            if out is AGAIN:  # the parent served before had children: this call comes after them
                pos = server.skip_to
                self.pos = pos + 1
                out = server.serve(pos, k, name, fn, args, kwargs, opts, pid)
            if out is not LIVE:
                if type(out) is not ReplayLive:
                    return out
                c = Call(pos, name, {}, f"{self.key_prefix}{pos}", out.rec, k, None, parent)
            else:
                inputs: dict[str, Any] = {}
                if args:
                    inputs["args"] = list(args)
                if kwargs:
                    inputs["kwargs"] = kwargs
                c = Call(pos, name, inputs, f"{self.key_prefix}{pos}", None, k, opts.call, parent)
                self.recorder.begin(c, inputs)
        except BaseException:
            self._give_back(pos, name, counts)
            raise
        self.inflight += 1
        return c

    def _flow(self, c: Call, opts: _Opts, threads: bool) -> Generator[_Op, Any, Any]:
        """A live call from its first try to its committed record, asking its driver for each call, sleep and
        sync (the results are sent in, the exceptions thrown in). ``threads``: the driver blocks its thread."""
        token = CURRENT.set(c)
        try:
            tries = 1
            while True:
                t0 = perf_counter()
                c.kids = None  # each try numbers its children anew: a resume serves the last try's
                try:
                    out = yield _CALL_OP
                    break
                except BaseException as e:
                    delay = yield from self._tried(c, e, t0, opts, tries)
                    yield (_SLEEP, delay)
                    tries += 1
        finally:
            CURRENT.reset(token)
        if c.replay is not None:
            return self._replayed_live(c, out, t0)
        try:
            rec = self.recorder.finished(c, out, t0)
        except BaseException:
            with self.lock:
                self._leave(c)
            raise
        with self.lock:
            self.shadow.with_patch(rec)
            if threads and self.inflight == 1 and not self.server.overlap:
                # alone in flight in a single-threaded agent: no one to share the fdatasync with, synced holding
                # the writer's lock (an agent with threads syncs outside the lock even then: see below)
                self._commit(c, rec, alone=True)
                return out
            # The line is written under the lock (a patch is made against the records before it: the file keeps
            # their order) and folded there too; its sync is waited for outside it, so the steps that finish
            # meanwhile share it, and the result is returned only then.
            end = self._commit(c, rec, alone=False)
        if end >= 0:
            try:
                yield (_SYNC, end)
            except JournalError:
                # the sync failed: the writer refuses every later write, and the state on disk is unknown
                if "state_patch" in rec:
                    with self.lock:
                        self.shadow.forget()
                raise
            # interrupted or cancelled while waiting (raised on): the line is written, the next sync covers it
        return out

    def _commit(self, c: Call, rec: Record, alone: bool) -> int:
        """Write a finished step's record and fold it (under the lock): ``alone``, synced too; else its end in
        the stream for the sync to wait for (``-1``: nothing to wait for, in a replay).

        Folded before its sync, not after it: the threads one sync wakes would each take the lock again at
        once, and queue on it (a thread handed a contended lock holds it while it waits for the GIL): about
        a tenth of a step's time from 16 threads. The fold follows the file, as the shadow does."""
        try:
            if alone:
                self.recorder.append(rec, alone=True)
                end = -1
            else:
                end = self.recorder.write(rec)
        except BaseException:
            self._leave(c)
            raise
        self._done(c, rec)
        return end

    def _replayed_live(self, c: Call, out: Any, t0: float) -> Any:
        """A replay's live step returned: compared with the recorded one, the state following the recorded patches."""
        s = self.server.session
        assert s is not None and c.replay is not None
        rec = c.replay or None
        with self.lock:
            s.live_step(c.pos, rec, c.name, out, round((perf_counter() - t0) * 1000, 3))
            self.inflight -= 1
            self.executed.append(c.name)
            if rec is not None:
                self.shadow.follow(rec)
        return out

    # ------------------------------------------------------------------ failures
    def _tried(self, c: Call, e: BaseException, t0: float, opts: _Opts, tries: int) -> Generator[_Op, Any, float]:
        """Try ``tries`` raised ``e``: record it; the delay before the next try, or raise ``e`` (the last try).

        A plain function past its timeout runs on: Python cannot stop a thread. Unless the step says
        ``overlap_retry=True``, its retry waits for the call to end, at most one more ``timeout``; a call still
        running then is not retried in this process: the step fails (not transient), counted once toward
        ``max_failures`` like any failed step, and the call ends with the process. So a step that hangs in every
        attempt costs one call an attempt, and the run gives up after ``max_failures`` x (``max_rollbacks`` + 1)
        attempts (12 with the defaults), not after every retry of every attempt.
        """
        if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit, cancelled: not a failure of the step
            with self.lock:
                self._leave(c, give_back=False)
            raise e
        delay = self.policy.delay(e, tries, opts)
        t = timed_out_of(e)
        if t is not None:
            more = ""
            if delay is not None and not opts.overlap_retry and t.running is not None and not t.running.done.is_set():
                waited = perf_counter()
                if not (yield (_WAIT, (t.running, t.timeout))):
                    delay = None
                    more = (f"; still running {t.timeout} s later, so not retried while it runs (it ends with the "
                            "process, and the step runs again on resume; overlap_retry=True retries beside it)")
                t0 += perf_counter() - waited  # the try's record keeps its own time, not the wait
            t.say(e, tries, self.policy.tries(opts), more)
        self._failed(c, e, t0, transient=delay is not None)
        if delay is None:
            raise e
        return delay

    def _failed(self, c: Call, e: BaseException, t0: float, *, transient: bool) -> None:
        """Record a failed try; past ``max_failures`` in a row, roll back (or give up) and exit."""
        if c.replay is not None:
            if not transient:
                assert self.server.session is not None
                self.server.session.live_error(c.pos, c.name, e)
                with self.lock:
                    self.inflight -= 1
            return
        with self.lock:
            rec = self.recorder.failed(c, e, t0, transient)
            try:
                self.recorder.append(rec)
            except BaseException:
                if not transient:
                    self._leave(c)
                raise
            self.recorder.took(rec)
            if transient:
                return
            self.failures += 1
            self._leave(c)
            if self.failures >= self.max_failures:
                self._rollback_or_give_up(c.name, self.failures, e)

    def _rollback_or_give_up(self, name: str, failures: int, e: BaseException) -> NoReturn:
        """Past ``max_failures``: record a rollback to the last checkpoint (exit 75) or, past ``max_rollbacks``,
        give up (exit 78). Under the lock, so no other thread's step begins meanwhile.

        From the main thread it raises ``SystemExit``; from any other thread (a thread's own ``SystemExit`` would
        end only that thread) it ends the process with the same code once the journal is synced and closed.
        """
        reason = f"{failures} consecutive failures of step {name!r}: {type(e).__name__}: {e}"
        done = self.fold.rollback_total  # every rollback of the run, not only those on the effective path
        if done >= self.max_rollbacks:
            self.recorder.note("gave up", status="failed", reason=f"{reason}; {done} rollbacks already")
            self.close("failed")
            exit_agent(f"agent-supervisor: gave up after {done} rollbacks: {reason}", rundir.EXIT_FAILED)
        cps = [c for c in self.fold.checkpoints if c.get("pos", 0) <= self.pos]
        target = cps[-1] if cps else None
        rec = rollback_record(target, reason, by="sdk", failed_step=name)
        where = f"checkpoint {target.get('name')!r}" if target else "the start of the run"
        written = self._save_abandoned(where)
        # The last record: a step another thread commits after it would count on the rolled-back branch,
        # and so would the state at exit (made against the state before the rollback): neither is written.
        self.server.to_closed()
        w = self.recorder.writer
        if w is not None:
            try:
                w.append_last(rec)
                written(rec)
            finally:
                w.close()
        exit_agent(f"agent-supervisor: rolled back to {where}: {reason}", rundir.EXIT_ROLLBACK)

    def _save_abandoned(self, where: str) -> Callable[[Record], None]:
        """Save the workspace the rollback abandons; if it cannot be saved, stop (exit 78) rather than roll back:
        the restore at the next start would overwrite files nothing kept. Returns what to call with the record."""
        w = self.recorder.writer
        if self.before_rollback is None or w is None:
            return _nothing
        try:
            return self.before_rollback(w.next_seq)
        except (SupervisorError, OSError) as e:
            why = f"cannot roll back to {where}: the workspace could not be saved first ({e})"
            self.recorder.note("gave up", status="failed", reason=why)
            self.close("failed")
            exit_agent(
                f"agent-supervisor: {why}; nothing was restored or lost. Fix that and run the agent again",
                rundir.EXIT_FAILED,
            )

    # ------------------------------------------------------------------ bookkeeping (under the lock)
    def _give_back(self, pos: int, name: str, counts: NameCounts | None) -> None:
        """A call that failed and is the latest gives its position and its count (in ``counts``, its parent's
        or the run's) back: a sequential agent's failed step takes no position (as before steps could overlap),
        and the next call is numbered as it."""
        if self.pos == pos + 1:
            self.pos = pos
            if counts is not None:
                counts.give_back(name)

    def _leave(self, c: Call, *, give_back: bool = True) -> None:
        """A call that ends without a record (its record not written, or cancelled).

        A cancelled call keeps its position: on resume it is called again, and finds its
        position free (a call that gave it back would find the next step's record there).
        """
        self.inflight -= 1
        if give_back:
            self._give_back(c.pos, c.name, self.counts if c.parent is None else c.parent.kids)

    def _done(self, c: Call, rec: Record) -> None:
        """A step's record is committed."""
        self.recorder.took(rec)
        self.failures = 0
        self.inflight -= 1
        self.executed.append(c.name)


def _nothing(rec: Record) -> None:
    """No workspace: nothing to do once the rollback record is written."""
