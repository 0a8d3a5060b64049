"""Resume serving in order (``run.step`` while the calls come as the journal has them) serves exactly what the
general path serves: the same outputs, the same state after each step, the same misses (changed inputs, another
name), and the run's phase goes from serving in order to live once nothing is left to serve."""

from __future__ import annotations

import gc
import shutil
import weakref
from pathlib import Path
from typing import Any

from supervisor import Run
from supervisor.sdk import Phase


def _agent(run: Run, general: bool, n: int = 12, *, rename_at: int = -1) -> list[Any]:
    """Steps with arguments, keyword arguments, outputs and state changes between some of them."""
    step = run.with_options().step if general else run.step  # with_options: per-call options, the same serve path
    seen: list[Any] = []
    for i in range(n):
        name = f"other:{i}" if i == rename_at else f"s:{i}"
        out = step(name, lambda i, scale=1: {"i": i * scale, "l": [i, str(i)]}, i, scale=2)
        if i % 3 == 0:
            run.state["count"] = run.state.get("count", 0) + out["i"]
            run.state.setdefault("seen", []).append(i)
        seen.append((out, dict(run.state), len(run.replayed), len(run.executed)))
    return seen


def _recorded(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    with Run.open(src) as run:
        _agent(run, general=True, n=8)  # a crash after 8 of 12 steps: the resume serves 8, runs 4
    return src


def test_fast_path_serves_what_the_general_path_serves(tmp_path: Path) -> None:
    src = _recorded(tmp_path)
    results = []
    for general in (False, True):
        d = tmp_path / f"resume-{general}"
        shutil.copytree(src, d)
        with Run.open(d) as run:
            assert run.phase is Phase.IN_ORDER  # a resume that serves
            results.append(_agent(run, general))
            assert run.phase is Phase.LIVE  # nothing left to serve once live
            assert (len(run.replayed), len(run.executed)) == (8, 4)
    assert results[0] == results[1]
    assert results[0][-1][1] == {"count": 0 + 6 + 12 + 18, "seen": [0, 3, 6, 9]}


def test_fast_path_misses_to_the_general_path(tmp_path: Path) -> None:
    """Another name at a recorded position is the divergence the general path reports, with nothing served
    for it; a fresh run (nothing to serve) never installs the fast path."""
    src = _recorded(tmp_path)
    d = tmp_path / "diverge"
    shutil.copytree(src, d)
    run = Run(d)
    try:
        _agent(run, general=False, rename_at=5)
        raise AssertionError("a renamed step at a recorded position must diverge")
    except Exception as e:
        assert type(e).__name__ == "DivergenceError" and "other:5" in str(e), e
        assert len(run.replayed) == 5
    finally:
        run.close()
    fresh = Run(tmp_path / "fresh")
    try:
        assert fresh.step("a", lambda: 1) == 1
        assert fresh.phase is Phase.LIVE and len(fresh.replayed) == 0
    finally:
        fresh.close()


def test_a_subclass_step_is_not_bypassed(tmp_path: Path) -> None:
    src = _recorded(tmp_path)
    calls: list[str] = []

    class Logged(Run):
        def step(self, name: str, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return super().step(name, fn, *args, **kwargs)

    with Logged.open(src) as run:
        _agent(run, general=False)
    assert calls == [f"s:{i}" for i in range(12)]


def test_the_run_is_in_order_until_live_then_closed_and_holds_no_cycle(tmp_path: Path) -> None:
    """Serving in order until live, closed at the end; no reference cycle keeps a closed run and its maps alive."""
    src = _recorded(tmp_path)
    run = Run(src)
    try:
        assert run.phase is Phase.IN_ORDER
        run.step("s:0", lambda i, scale=1: {"i": i * scale, "l": [i, str(i)]}, 0, scale=2)
        assert run.phase is Phase.IN_ORDER  # still serving
    finally:
        run.close()
    assert run.phase is Phase.CLOSED
    gc.disable()  # only reference counting frees it: a cycle would keep it
    try:
        ref = weakref.ref(run)
        del run
        assert ref() is None
    finally:
        gc.enable()
    with Run.open(src) as run:
        for i in range(8):
            run.step(f"s:{i}", lambda i, scale=1: {"i": i * scale, "l": [i, str(i)]}, i, scale=2)
        run.step("new", lambda: 1)  # live: the resume view is let go
        assert run.phase is Phase.LIVE
