"""Call options of a step (``run.with_options(...)``, ``@run.task(...)``), the one retry policy, and how a
step function is called (sync, in a thread with a timeout, awaited): what a step call is, apart from the journal."""

from __future__ import annotations

import functools
import inspect
import random
import sys
import threading
from collections.abc import Callable, Coroutine
from contextvars import ContextVar, copy_context
from types import CoroutineType, GeneratorType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import orjson

if TYPE_CHECKING:
    from .names import NameCounts
    from .steps import Steps

P = ParamSpec("P")
T = TypeVar("T")


class _Opts:
    """Per-call options (``None``: the run's default)."""

    __slots__ = ("backoff", "call", "overlap_retry", "retries", "retry_on", "returns", "timeout")

    def __init__(
        self,
        timeout: float | None = None,
        retries: int | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        backoff: float | None = None,
        returns: Any = None,
        call: dict[str, Any] | None = None,
        overlap_retry: bool | None = None,
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
                raise ValueError(f'call={call!r}: give a dict with "kind": "model" or "tool" (see docs/sdk.md)')
            try:
                orjson.dumps(call)
            except TypeError as e:
                raise ValueError(f"call={call!r}: not JSON ({e})") from None
        self.call = call
        self.overlap_retry = overlap_retry
        """A plain function's retry may start while its timed-out call still runs (:func:`call_sync`)."""

    def merged(self, **more: Any) -> _Opts:
        """These options with the ones given (not ``None``) in their place."""
        kw = {k: getattr(self, k) for k in self.__slots__}
        kw.update({k: v for k, v in more.items() if v is not None})
        return _Opts(**kw)


NO_OPTS = _Opts()


class RetryPolicy:
    """The run's failure policy for one step's tries, the same for ``step`` and ``astep``.

    Retried: an exception of ``retry_on`` (default: the run's ``transient``) while tries are left
    (``retries``, default: the run's); with a ``timeout``, a try that timed out is retried too.
    """

    __slots__ = ("backoff", "backoff_max", "retries", "transient")

    def __init__(self, retries: int, transient: tuple[type[BaseException], ...], backoff: float, backoff_max: float) -> None:
        self.retries = retries
        self.transient = transient
        self.backoff = backoff
        self.backoff_max = backoff_max

    def tries(self, opts: _Opts) -> int:
        """The most tries a step has: its first and its retries."""
        return (self.retries if opts.retries is None else opts.retries) + 1

    def delay(self, e: Exception, tries: int, opts: _Opts) -> float | None:
        """The seconds to wait before try ``tries + 1`` after try ``tries`` raised ``e``; ``None``: no more tries."""
        retries = self.retries if opts.retries is None else opts.retries
        retry_on = self.transient if opts.retry_on is None else opts.retry_on
        if opts.timeout is not None:
            retry_on = (*retry_on, TimeoutError)
        if tries > retries or not isinstance(e, retry_on):
            return None
        backoff = self.backoff if opts.backoff is None else opts.backoff
        return float(min(self.backoff_max, backoff * 2 ** (tries - 1)) * random.uniform(0.5, 1.0))


class Call:
    """A step call that runs live: its position, name, inputs and key (``replay``: the recorded step, ``{}`` if none).

    While it runs it is the current step of its thread or task (:data:`CURRENT`): ``run.key`` and ``run.usage`` find it.
    """

    __slots__ = (
        "bid", "call", "depth", "extra", "ident", "inputs", "k", "key", "kids", "name", "parent", "pos", "replay", "usage",
    )

    def __init__(
        self, pos: int, name: str, inputs: dict[str, Any], key: str, replay: dict[str, Any] | None = None, k: int = 0,
        call: dict[str, Any] | None = None, parent: Call | None = None,
    ) -> None:
        self.pos = pos
        self.k = k
        self.name = name
        self.inputs = inputs
        self.key = key
        self.replay = replay
        self.usage: list[dict[str, Any]] | None = None
        self.call = call
        self.parent = parent
        """The enclosing step (its function called this one in the same thread or task), or ``None``."""
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.ident: tuple[Any, ...] = (name, k) if parent is None else (name, k, parent.ident)
        """The step's identity: its name and occurrence, then its parent's identity (nested steps)."""
        self.bid: str | None = None
        """The ``id`` of its ``begin`` record (its children's records name it as their ``parent``)."""
        self.kids: NameCounts | None = None
        """Calls so far per name of its children, in the current try: their occurrence ``k``."""
        self.extra: dict[str, Any] | None = None
        """Fields its step record gets from a person's answer at a pause (``given``, ``given_inputs``)."""


CURRENT: ContextVar[Call | None] = ContextVar("agent_supervisor_step", default=None)


class StepOptions:
    """``run.with_options(...)``: the run's ``step``, ``astep`` and ``task`` with per-call options."""

    def __init__(self, steps: Steps, opts: _Opts) -> None:
        self._steps = steps
        self._opts = opts

    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``run.step`` with these options."""
        out: T = self._steps.call(name, fn, args, kwargs, self._opts)
        return out

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``run.astep`` with these options."""
        return await self._steps.acall(name, fn, args, kwargs, self._opts)

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
        """``run.task`` with these options (the ones given here win)."""
        opts = self._opts.merged(
            timeout=timeout, retries=retries, retry_on=retry_on, backoff=backoff, returns=returns, call=call,
            overlap_retry=overlap_retry,
        )
        return self._steps.task(name, opts)


# ---------------------------------------------------------------------------------- calling a step function
_aio: Any = None


def asyncio_mod() -> Any:
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


def codec() -> Any:
    """:mod:`supervisor.core.codec`, imported for typed outputs only: plain JSON never imports it."""
    from ..core import codec as c

    return c


def _encode(out: Any, name: str) -> tuple[bytes, str | None]:
    """A step's output that is not plain JSON, through the codec: the bytes of its ``output`` and its
    ``output_type`` (a coroutine is refused: ``astep`` awaits it)."""
    if isinstance(out, _MAYBE_COROUTINE) and asyncio_mod().iscoroutine(out):
        out.close()
        raise TypeError(f"step {name!r} returned a coroutine: call an async function with 'await run.astep(...)'")
    encoded: tuple[bytes, str | None] = codec().encode_bytes(out, step=name)
    return encoded


def _is_async_fn(fn: Any) -> bool:
    """Whether ``fn`` (behind any partials) is a coroutine function, told without importing asyncio."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    aio = sys.modules.get("asyncio")  # its marker of old-style coroutine functions exists only once it is imported
    return bool(aio.iscoroutinefunction(fn)) if aio is not None else inspect.iscoroutinefunction(fn)


class Running:
    """A plain step function called in a daemon thread of its own (a step with a timeout). Python cannot stop a
    thread: past the timeout the call runs on, and the step's retry waits on :attr:`done` (see :class:`TimedOut`)."""

    __slots__ = ("done", "err", "fut", "loop", "out")

    def __init__(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 loop: Any = None) -> None:
        self.done = threading.Event()
        self.out: Any = None
        self.err: BaseException | None = None
        self.loop = loop
        self.fut = None if loop is None else loop.create_future()  # ``astep``'s to await, settled from the thread
        ctx = copy_context()  # run.usage and run.key inside it see this step
        t = threading.Thread(target=self._run, args=(ctx, fn, args, kwargs), name=f"step {name}", daemon=True)
        t.start()

    def _run(self, ctx: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self.out = ctx.run(fn, *args, **kwargs)
        except BaseException as e:  # handed to the caller's thread, raised there
            self.err = e
        self.done.set()
        if self.fut is not None:
            try:
                self.loop.call_soon_threadsafe(self._settle)
            except RuntimeError:  # the loop is closed: no one awaits the call any more
                pass

    def _settle(self) -> None:
        fut = self.fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def result(self) -> Any:
        """The call's output, or its exception raised (once :attr:`done`)."""
        if self.err is not None:
            raise self.err
        return self.out

    async def ended(self, within: float) -> bool:
        """``astep``'s wait for the call to end, at most ``within`` seconds: whether it ended."""
        done, _ = await asyncio_mod().wait((self.fut,), timeout=within)
        return bool(done)


class TimedOut:
    """What the ``TimeoutError`` of a plain function's timeout carries (its ``timed_out`` attribute): the step, its
    timeout and the call that runs on. The flow words the message with the try."""

    __slots__ = ("name", "running", "timeout")

    def __init__(self, name: str, timeout: float, running: Running | None) -> None:
        self.name = name
        self.timeout = timeout
        self.running = running
        """The plain function's call that runs on; ``None``: a coroutine, cancelled at the timeout."""

    def say(self, e: BaseException, tries: int, of: int, more: str = "") -> None:
        """Set ``e``'s message: which try timed out, and that the call may still be running (``more``: what then)."""
        if self.running is None:
            e.args = (f"step {self.name!r} timed out after {self.timeout} s (try {tries} of {of}); it was cancelled",)
            return
        e.args = (f"step {self.name!r} timed out after {self.timeout} s (try {tries} of {of}); a plain function "
                  f"cannot be stopped: it may still be running{more}",)


def timed_out_of(e: BaseException) -> TimedOut | None:
    """The :class:`TimedOut` of a step's timeout (a plain ``TimeoutError``: the journal's type stays its name)."""
    t = e.__dict__.get("timed_out")
    return t if type(t) is TimedOut else None


def _timed_out(name: str, timeout: float, running: Running | None) -> TimeoutError:
    e = TimeoutError(f"step {name!r} timed out after {timeout} s")
    e.__dict__["timed_out"] = TimedOut(name, timeout, running)
    return e


def call_sync(name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None) -> Any:
    """Call a step function for ``step``; with a timeout, in a daemon thread (:class:`Running`) waited for
    ``timeout`` seconds.

    Python cannot stop a thread: past the timeout the step fails with ``TimeoutError`` and the call runs on
    (its result dropped); the step's retry waits for it to end unless the step says ``overlap_retry=True``.
    """
    if timeout is None:
        return fn(*args, **kwargs)
    running = Running(name, fn, args, kwargs)
    if not running.done.wait(timeout):
        raise _timed_out(name, timeout, running)
    return running.result()


async def call_async(name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None) -> Any:
    """Call a step function for ``astep``: await a coroutine function (cancelled at ``timeout``); a plain one runs
    in the loop's thread, or with a timeout in a daemon thread of its own (:class:`Running`: it cannot be stopped,
    and unlike the loop's executor it does not hold the process at exit)."""
    asyncio = _aio or asyncio_mod()
    if timeout is None:
        out = fn(*args, **kwargs)
        if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future):
            out = await out
        return out
    if _is_async_fn(fn):
        try:
            return await asyncio.wait_for(fn(*args, **kwargs), timeout)
        except TimeoutError as e:
            if isinstance(e.__cause__, asyncio.CancelledError):  # the timeout cancelled it (its own: left as it is)
                raise _timed_out(name, timeout, None) from None
            raise
    running = Running(name, fn, args, kwargs, asyncio.get_running_loop())
    try:
        await asyncio.wait_for(asyncio.shield(running.fut), timeout)
    except TimeoutError:
        raise _timed_out(name, timeout, running) from None
    return running.result()
