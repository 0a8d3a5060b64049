"""The SDK imports asyncio only when a step is awaited (or a coroutine has to be told apart): a sync agent, the
one resume's crash -> first new step figure times, does not pay for it at its start."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from ..conftest import ROOT, clean_env

AGENT = textwrap.dedent(
    """
    import dataclasses, functools, sys
    import supervisor.sdk as sdk
    import supervisor.sdk.options as options
    from supervisor import Run

    assert all("asyncio" not in vars(m) for m in (sdk, options))  # not imported by the SDK's modules themselves
    assert "asyncio" not in sys.modules  # nor by the journal writer, nor anything else the SDK imports
    sys.modules["asyncio"] = None  # any use of asyncio from here on raises ImportError

    @dataclasses.dataclass
    class Hit:
        url: str
        score: float

    def search(q: str) -> Hit:
        return Hit(f"https://example.com/{q}", 0.5)

    async def later() -> None: ...

    # told without asyncio: coroutine functions, also behind a partial; plain ones are not
    assert options._is_async_fn(later) and options._is_async_fn(functools.partial(later))
    assert not options._is_async_fn(search) and not options._is_async_fn(functools.partial(search, "q"))

    for attempt in range(2):  # a run, then its resume in the same process (the served steps decode their types)
        with Run.open(sys.argv[1]) as run:
            task = run.task(name=lambda q: f"task:{q}")(lambda q: {"q": q})
            got = [run.step("plain", lambda: [1, 2]), run.step("typed", search, "a"), task("b"),
                   run.with_options(retries=1).step("opts", lambda x: x * 2, 21)]
            if attempt == 0:
                run.step("live-only", lambda: None)
        assert got == [[1, 2], Hit("https://example.com/a", 0.5), {"q": "b"}, 42], got
        print(attempt, len(run.replayed), len(run.executed))
    """
)


def test_a_sync_agent_never_needs_asyncio(tmp_path: Path) -> None:
    """Plain, typed, task-decorated and optioned steps, live and then served, with asyncio made unimportable."""
    p = subprocess.run(
        [sys.executable, "-c", AGENT, str(tmp_path / "run")], capture_output=True, text=True, timeout=30, check=False,
        env=clean_env(), cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == ["0 0 5", "1 4 0"]  # the resume served the four recorded steps


def test_a_coroutine_returned_to_step_is_still_refused() -> None:
    """``run.step`` given an async function: the coroutine is told apart (asyncio imported for it) and refused."""
    from supervisor.sdk.options import _encode

    async def fetch() -> int:
        return 1

    coro = fetch()
    try:
        _encode(coro, "fetch")
        raise AssertionError("a coroutine output must be refused")
    except TypeError as e:
        assert "await run.astep" in str(e)
    assert coro.cr_frame is None  # closed: no "never awaited" warning
