"""The Gantt model (``views.gantt``): bars from a journal the real SDK wrote with ``asyncio.gather`` and a flaky
tool's retries, attempts and windows, and the cells drawn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from supervisor import Run
from supervisor.core.journal_reader import JournalReader
from supervisor.views import gantt as gm

from ..tui.gantt_run import make_gantt_run


def _sdk_run(run_dir: Path) -> None:
    """8 searches and a tool that fails twice (retried, ``ConnectionError`` is transient) in one gather."""
    calls = {"n": 0}

    async def search(q: str) -> str:
        await asyncio.sleep(0.005 * (int(q[1:]) % 4 + 1))
        return "r-" + q

    async def flaky(x: str) -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionError(f"down #{calls['n']}")
        return "ok"

    async def main() -> None:
        with Run.open(run_dir, retries=3, transient=(ConnectionError,), backoff=0.001) as run:
            await run.astep("plan", search, "p0")
            await asyncio.gather(*(run.astep(f"search:{i}", search, f"q{i}") for i in range(8)),
                                 run.astep("tool:fetch", flaky, "x"))

    asyncio.run(main())


def _gantt(run_dir: Path, lo: int = 0, hi: int | None = None) -> gm.Gantt:
    g = gm.Gantt()
    g.add_all(JournalReader(run_dir).load()[lo:hi])
    return g


def test_the_sdks_gather_and_retries_make_one_bar_a_step(tmp_path: Path) -> None:
    _sdk_run(tmp_path / "run")
    g = _gantt(tmp_path / "run")
    names = [g.bars[i].name for i in g.rows()]
    assert sorted(names) == sorted(["plan", "tool:fetch", *(f"search:{i}" for i in range(8))])  # no bar per failed try
    fetch = next(b for b in g.bars if b.name == "tool:fetch")
    assert [t.failed for t in fetch.tries] == [True, True, False] and fetch.outcome == gm.OK
    assert fetch.tries_label() == "3 tries, succeeded" and fetch.tries[0].error == "ConnectionError: down #1"
    assert all(a.end <= b.start + 1e-3 for a, b in zip(fetch.tries, fetch.tries[1:], strict=False))  # in order
    steps = [r for r in JournalReader(tmp_path / "run").load() if r.get("kind") == "step"]
    assert fetch.seq == max(int(r["seq"]) for r in steps if r["step"] == "tool:fetch")  # Enter: its last record
    assert g.most_in_flight() == 9 and g.summary()["retried"] == 1 and not g.in_flight
    assert g.bars[g.rows()[0]].name == "plan"  # rows by start


def test_attempts_served_nesting_and_interruption(tmp_path: Path) -> None:
    run = make_gantt_run(tmp_path)
    starts = {1: 0, 2: 24}
    assert gm.attempt_span(starts, 33, 5) == (1, 0, 24)
    assert gm.attempt_span(starts, 33, None) == (2, 24, 33)
    assert gm.attempt_span({}, 33, 5) == (None, 0, 33)  # no start records: one attempt
    first = _gantt(run, 0, 24)
    summarize = next(b for b in first.bars if b.name == "summarize")
    assert summarize.open and first.in_flight == 1
    first.interrupt()  # the attempt ended: what was in flight was interrupted
    assert summarize.outcome == gm.INTERRUPTED and summarize.tries_label() == "interrupted"
    second = _gantt(run, 24)
    assert second.served == 9 and [second.bars[i].name for i in second.rows()] == [
        "search:q7", "summarize", "llm:draft", "tool:publish"]
    draft = next(b for b in second.bars if b.name == "llm:draft")
    assert draft.depth == 1 and draft.parent is not None and second.bars[draft.parent].name == "summarize"
    publish = second.bars[-1]
    assert publish.open and publish.tries_label() == "running" and second.span()[1] > publish.start


def test_a_step_without_begin_and_a_step_begun_again(tmp_path: Path) -> None:
    g = gm.Gantt()
    g.add({"step": "a", "output": 1, "dur_ms": 500, "seq": 0, "ts": "2026-11-30T10:00:01.000Z"})  # hand-written
    g.add({"kind": "begin", "step": "b", "pos": 1, "seq": 1, "ts": "2026-11-30T10:00:01.100Z"})
    g.add({"kind": "begin", "step": "b", "pos": 1, "seq": 2, "ts": "2026-11-30T10:00:01.200Z"})
    assert g.bars[0].start == gm.parse_ts("2026-11-30T10:00:00.500Z")  # its duration before its record
    assert g.bars[1].outcome == gm.INTERRUPTED and g.bars[2].open


def test_window_and_cells() -> None:
    assert gm.window(0, 100, 50, size=200) == (0, 100)
    assert gm.window(0, 100_000, 50_000, size=20_000) == (40_000, 60_000)
    assert gm.window(0, 100_000, None, size=20_000) == (80_000, 100_000)  # live: the end
    assert gm.window(10, 100_000, 0, size=20_000) == (10, 20_010)
    bar = gm.Bar("t", 0, 0.0, 3, end=10.0, outcome=gm.OK,
                 tries=[gm.Try(0.0, 2.0, True, 1), gm.Try(4.0, 6.0, True, 2), gm.Try(8.0, 10.0, False, 3)])
    cells = gm.bar_cells(bar, 0.0, 10.0, 10)
    assert "".join(gm.GLYPH[c] if c else " " for c in cells) == "▒▒╌╌▒▒╌╌██"
    tiny = gm.Bar("u", 1, 5.0, 4, end=5.0001, outcome=gm.OK, tries=[gm.Try(5.0, 5.0001, False, 4)])
    assert gm.bar_cells(tiny, 0.0, 10.0, 10).count(gm.OK) == 1  # at least a cell
    assert gm.axis(0.0, 1.0, 40).startswith("┆0") and "┆500ms" in gm.axis(0.0, 1.0, 40)
