"""Per-call options (timeouts, retries, returns=), astep with plain functions, @run.task on async def,
run.usage, and run.step from many threads at once (in process; the crash tests are in test_sdk_async.py)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from supervisor import Run
from supervisor.core.journal_reader import JournalReader
from supervisor.errors import SupervisorError


class Flaky(Exception):
    pass


def records(run_dir: Path, kind: str = "step") -> list[dict[str, Any]]:
    return [r for r in JournalReader(run_dir).load() if r.get("kind") == kind]


def test_async_timeout_cancels_the_coroutine_and_retries_it(tmp_path: Path) -> None:
    cancelled: list[int] = []
    tries: list[int] = []

    async def slow(n: int) -> int:
        tries.append(n)
        try:
            await asyncio.sleep(0 if len(tries) == 3 else 30)
        except asyncio.CancelledError:
            cancelled.append(n)
            raise
        return n * 2

    async def main(run: Run) -> int:
        return await run.with_options(timeout=0.05, retries=2, backoff=0.001).astep("slow", slow, 21)  # type: ignore[no-any-return]

    with Run.open(tmp_path) as run:
        t0 = time.perf_counter()
        assert asyncio.run(main(run)) == 42
        assert time.perf_counter() - t0 < 10
    assert cancelled == [21, 21] and len(tries) == 3  # two tries timed out (cancelled), the third finished
    recs = records(tmp_path)
    assert [r.get("transient") for r in recs] == [True, True, None]
    assert recs[0]["error"]["type"] == "TimeoutError" and recs[-1]["output"] == 42


def test_sync_timeout_in_a_thread_fails_the_step(tmp_path: Path) -> None:
    release = threading.Event()

    def stuck() -> str:
        release.wait(30)
        return "late"

    with Run.open(tmp_path) as run:
        with pytest.raises(TimeoutError, match=re.escape("timed out after 0.05 s (try 1 of 1); a plain function cannot be stopped")):
            run.with_options(timeout=0.05, retries=0).step("stuck", stuck)
        release.set()
        assert run.position == 0  # the failed call gave its position back
        assert run.step("next", lambda: 1) == 1
    recs = records(tmp_path)
    assert recs[0]["error"]["type"] == "TimeoutError" and recs[0]["pos"] == 0 and recs[1]["pos"] == 0


def test_per_step_retries_apart_from_the_run_defaults(tmp_path: Path) -> None:
    n = {"a": 0, "b": 0}

    def flaky(key: str, fails: int) -> str:
        n[key] += 1
        if n[key] <= fails:
            raise Flaky(f"try {n[key]}")
        return key

    with Run.open(tmp_path, retries=0, backoff=0.001) as run:
        assert run.with_options(retries=3, retry_on=(Flaky,)).step("a", flaky, "a", 3) == "a"
        with pytest.raises(Flaky):
            run.step("b", flaky, "b", 1)  # the run's default: no retry, and Flaky is not transient for it
    assert n == {"a": 4, "b": 1}
    assert [(r["step"], bool(r.get("transient")), "error" in r) for r in records(tmp_path)] == [
        ("a", True, True), ("a", True, True), ("a", True, True), ("a", False, False), ("b", False, True)]


def test_task_options_and_async_task(tmp_path: Path) -> None:
    @dataclass
    class Point:
        x: int
        y: int

    with Run.open(tmp_path) as run:

        @run.task("double", retries=1, retry_on=(Flaky,), backoff=0.001)
        async def double(x: int, *, timeout: int = 0) -> int:  # its own 'timeout' kwarg does not collide
            return x * 2 + timeout

        @run.task(name=lambda p: f"point:{p}", returns=Point)
        def point(p: int) -> dict[str, int]:
            return {"x": p, "y": -p}

        assert asyncio.iscoroutinefunction(double) and double.__name__ == "double"
        assert asyncio.run(double(4, timeout=1)) == 9
        assert point(3) == {"x": 3, "y": -3}  # live: as the function returned it
    with Run.open(tmp_path) as run:
        double2 = run.task("double")(double.__wrapped__)  # type: ignore[attr-defined]
        assert asyncio.run(double2(4, timeout=1)) == 9
        point2 = run.task(name=lambda p: f"point:{p}", returns=Point)(point.__wrapped__)  # type: ignore[attr-defined]
        assert point2(3) == Point(3, -3)  # served: returns= wins over the annotation
        assert run.executed == []


def test_astep_with_a_plain_function_and_a_returned_coroutine(tmp_path: Path) -> None:
    loop_thread: list[int] = []

    def plain(x: int) -> int:
        loop_thread.append(threading.get_ident())
        return x + 1

    async def main(run: Run) -> list[Any]:
        a = await run.astep("plain", plain, 1)
        b = await run.with_options(timeout=5).astep("plain-timeout", plain, 2)  # a worker thread
        return [a, b]

    with Run.open(tmp_path) as run:
        assert asyncio.run(main(run)) == [2, 3]
        assert loop_thread[0] == threading.get_ident() and loop_thread[1] != threading.get_ident()

        async def coro() -> int:
            return 1

        with pytest.raises(TypeError, match=re.escape("returned a coroutine: call an async function with 'await run.astep")):
            run.step("wrong", coro)


def test_usage_inside_steps_and_outside(tmp_path: Path) -> None:
    with Run.open(tmp_path) as run:
        with pytest.raises(SupervisorError, match=r"run.usage\(...\) was called outside a step"):
            run.usage(model="m", input_tokens=1)

        def two_calls() -> str:
            run.usage(model="gpt-x", provider="openai", input_tokens=100, output_tokens=20, cached_tokens=80)
            run.usage(model="small", input_tokens=5)
            assert run.key == f"{run.run_id}:0"
            return "ok"

        async def inner(i: int) -> int:
            await asyncio.sleep(0.01 * (3 - i))
            run.usage(model=f"m{i}", output_tokens=i)
            return i

        async def gather() -> list[int]:
            return list(await asyncio.gather(*(run.astep(f"g:{i}", inner, i) for i in range(3))))

        run.step("two", two_calls)
        assert asyncio.run(gather()) == [0, 1, 2]
        assert run.key is None
    by_name = {r["step"]: r for r in records(tmp_path)}
    assert by_name["two"]["usage"] == [
        {"model": "gpt-x", "provider": "openai", "input_tokens": 100, "output_tokens": 20, "cached_tokens": 80},
        {"model": "small", "input_tokens": 5},
    ]
    for i in range(3):  # concurrent steps do not mix their usage
        assert by_name[f"g:{i}"]["usage"] == [{"model": f"m{i}", "output_tokens": i}]


def test_step_from_many_threads_numbers_every_call_once(tmp_path: Path) -> None:
    barrier = threading.Barrier(8)

    def work(i: int) -> int:
        return i * i

    def worker(t: int) -> list[int]:
        barrier.wait(10)
        return [run.step(f"t{t}:{j}", work, j) for j in range(25)]

    with Run.open(tmp_path) as run:
        with ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(worker, range(8)))
        assert outs == [[j * j for j in range(25)]] * 8
        assert run.position == 200 and len(run.executed) == 200
    steps = records(tmp_path)
    assert sorted(r["pos"] for r in steps) == list(range(200))
    assert sorted(r["seq"] for r in steps) == [r["seq"] for r in steps]  # file order is seq order
    with Run.open(tmp_path) as run:  # a resume serves all 200 whatever thread asks first
        with ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(lambda t: [run.step(f"t{t}:{j}", lambda j: -1, j) for j in range(25)], range(8)))
        assert outs == [[j * j for j in range(25)]] * 8 and len(run.executed) == 0


def test_state_changes_of_concurrent_steps_replay_in_file_order(tmp_path: Path) -> None:
    async def bump(i: int) -> int:
        await asyncio.sleep(0.005 * (5 - i))
        run.state.setdefault("order", []).append(i)
        run.state[f"k{i}"] = i
        return i

    async def main() -> None:
        await asyncio.gather(*(run.astep(f"b:{i}", bump, i) for i in range(5)))

    with Run.open(tmp_path) as run:
        asyncio.run(main())
        final = dict(run.state)
    assert final["order"] == [4, 3, 2, 1, 0]
    with Run.open(tmp_path) as run:
        asyncio.run(main())
        assert run.state == final and len(run.executed) == 0


def test_sequential_divergence_is_unchanged(tmp_path: Path) -> None:
    from supervisor.errors import DivergenceError

    with Run.open(tmp_path) as run:
        run.step("a", lambda: 1)
        run.step("b", lambda: 2)
    run = Run(tmp_path)
    with pytest.raises(DivergenceError, match="recorded 'a' but the agent asked for 'b'"):
        run.step("b", lambda: 2)
    run.close()


def test_bad_options_are_clear(tmp_path: Path) -> None:
    with Run.open(tmp_path) as run, pytest.raises(ValueError, match="timeout=0"):
        run.with_options(timeout=0)
    with pytest.raises(ValueError, match="on_changed_inputs='maybe': use 'warn', 'error' or 'rerun'"):
        Run.open(tmp_path / "x", on_changed_inputs="maybe")


def test_a_cancelled_gather_resumes_without_divergence(tmp_path: Path) -> None:
    ran: list[str] = []

    async def quick(x: int) -> int:
        ran.append(f"quick{x}")
        return x

    async def slow() -> str:
        ran.append("slow")
        await asyncio.sleep(0 if len(ran) > 3 else 30)
        return "slow"

    async def main(run: Run) -> list[Any]:
        try:
            got: list[Any] = list(await asyncio.wait_for(asyncio.gather(run.astep("quick", quick, 1), run.astep("slow", slow)), 0.3))
        except TimeoutError:
            got = ["timed out"]
        return [*got, await run.astep("after", quick, 2)]

    with Run.open(tmp_path) as run:
        assert asyncio.run(main(run)) == ["timed out", 2]
    assert ran == ["quick1", "slow", "quick2"]
    assert [(r["step"], r["pos"]) for r in records(tmp_path)] == [("quick", 0), ("after", 2)]  # slow kept its position
    with Run.open(tmp_path) as run:  # quick and after are served, slow runs (and now finishes)
        assert asyncio.run(main(run)) == [1, "slow", 2]
    assert ran == ["quick1", "slow", "quick2", "slow"]


def test_each_try_records_its_own_usage(tmp_path: Path) -> None:
    tries: list[int] = []

    def call() -> str:
        tries.append(1)
        run.usage(model="m", input_tokens=len(tries))
        if len(tries) == 1:
            raise Flaky("once")
        return "ok"

    with Run.open(tmp_path, transient=(Flaky,), backoff=0.001) as run:
        assert run.step("call", call) == "ok"
    first, second = records(tmp_path)
    assert first["transient"] and first["usage"] == [{"model": "m", "input_tokens": 1}]
    assert second["usage"] == [{"model": "m", "input_tokens": 2}]


def test_positions_of_another_attempt_never_shadow_a_committed_call(tmp_path: Path) -> None:
    """Threads number their calls in another order in each attempt: attempt 2's live 'c' took position 1,
    where attempt 1 had committed 'b'. The call's identity is in its records (step, k), so a third attempt
    still serves 'b' instead of paying for it again."""
    import threading

    import orjson

    from supervisor import Run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recs = [
        {"kind": "start", "attempt": 1, "pid": 1, "numbering": "name-k"},
        {"kind": "begin", "step": "a", "pos": 0, "attempt": 1},
        {"kind": "begin", "step": "b", "pos": 1, "attempt": 1},
        {"kind": "step", "step": "b", "pos": 1, "attempt": 1, "output": "B"},
        {"kind": "step", "step": "a", "pos": 0, "attempt": 1, "output": "A"},
        {"kind": "start", "attempt": 2, "pid": 2, "numbering": "name-k"},
        {"kind": "begin", "step": "c", "pos": 1, "attempt": 2},  # b was served at position 0 this time
        {"kind": "step", "step": "c", "pos": 1, "attempt": 2, "output": "C"},
    ]
    (run_dir / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    ran: list[str] = []
    got: dict[str, object] = {}
    with Run.open(run_dir) as run:
        def call(name: str) -> None:
            got[name] = run.step(name, lambda: ran.append(name) or name.upper())

        threads = [threading.Thread(target=call, args=(n,)) for n in ("c", "b", "a")]
        for t in threads:
            t.start()
            t.join()  # one at a time, from other threads than the one that opened the run: overlapping numbering
    assert got == {"a": "A", "b": "B", "c": "C"} and ran == [], (got, ran)


def test_match_by_name_serves_a_resumed_run_that_skips_calls(tmp_path) -> None:
    """A graph-like agent: its resume does not call the first step again. By position that is a divergence
    (another name at position 0); after run.match_by_name() each call finds its own step by (name, k)."""
    import pytest as _pytest

    from supervisor import Run
    from supervisor.errors import DivergenceError

    calls: list[str] = []

    def f(x: str) -> str:
        calls.append(x)
        return x.upper()

    with Run.open(tmp_path / "r") as run:
        run.step("a", f, "a")
        run.step("b", f, "b")
    with _pytest.raises(DivergenceError), Run.open(tmp_path / "r") as run:
        run.step("b", f, "b")  # by position: 'b' where the journal has 'a'
    calls.clear()
    with Run.open(tmp_path / "r") as run:
        run.match_by_name()
        assert run.step("b", f, "b") == "B"  # served, though at position 0
        assert run.step("c", f, "c") == "C"  # runs
    assert calls == ["c"]
