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
    from .steps import Steps

P = ParamSpec("P")
T = TypeVar("T")


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

    __slots__ = ("call", "inputs", "k", "key", "name", "pos", "replay", "usage")

    def __init__(
        self, pos: int, name: str, inputs: dict[str, Any], key: str, replay: dict[str, Any] | None = None, k: int = 0,
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
    ) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """``run.task`` with these options (the ones given here win)."""
        opts = self._opts.merged(
            timeout=timeout, retries=retries, retry_on=retry_on, backoff=backoff, returns=returns, call=call
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


def _timed_out(name: str, timeout: float) -> TimeoutError:
    return TimeoutError(f"step {name!r} did not finish in {timeout} s (its thread runs on: Python cannot stop a thread)")


def call_sync(name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None) -> Any:
    """Call a step function for ``step``; with a timeout, in a daemon thread waited for ``timeout`` seconds.

    Python cannot stop a thread: past the timeout the step fails with ``TimeoutError`` and the
    thread is left to finish on its own (its result is dropped).
    """
    if timeout is None:
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}
    ctx = copy_context()  # run.usage and run.key inside it see this step

    def target() -> None:
        try:
            box["out"] = ctx.run(fn, *args, **kwargs)
        except BaseException as e:  # handed to the caller's thread, raised there
            box["err"] = e

    t = threading.Thread(target=target, name=f"step {name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise _timed_out(name, timeout)
    if "err" in box:
        raise box["err"]
    return box["out"]


async def call_async(name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None) -> Any:
    """Call a step function for ``astep``: await a coroutine function (cancelled at ``timeout``); a plain one runs
    in the loop's thread, or with a timeout in the loop's default executor (the thread cannot be stopped)."""
    asyncio = _aio or asyncio_mod()
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
        raise _timed_out(name, timeout) from None
