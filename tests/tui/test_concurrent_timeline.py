"""The timeline with concurrent steps: begins paired with their steps by pos, one row per step, the toggle."""

from __future__ import annotations

from pathlib import Path

import orjson

from supervisor.core.history import load
from supervisor.tui.app import make_app
from supervisor.views.scan import ScanResult, StepPairs, scan_bytes, scan_journal
from supervisor.views.timeline import TimelineModel

from ..conftest import wait_for
from ..integration.test_concurrent_readers import J, gather_journal
from .conftest import caught_up, until

SIZE = (120, 34)


def paired_begins(run: Path) -> list[int]:
    """The full read's answer: the begins of the whole journal that have their step."""
    return sorted(load(run).pairing().paired)


def concurrent_run(run: Path) -> J:
    """A gather finishing out of order, a step in flight at the end, a changed-inputs note."""
    j = gather_journal(run)
    j.begin("write", 6)
    j.begin("extra", 7)
    j.step("extra", 7)
    j.add({"kind": "note", "message": "changed inputs", "step": "search:2", "pos": 2})
    j.write()
    return j


def row_seqs(m: TimelineModel) -> list[int]:
    return [m.row_item(r)[1] for r in range(m.rows) if m.row_item(r)[0] == "rec"]


def test_scan_pairs_like_the_full_read_and_rows_map_both_ways(tmp_path: Path) -> None:
    j = concurrent_run(tmp_path)
    m = TimelineModel(tmp_path)
    m.open()
    assert list(m.hidden) == paired_begins(tmp_path)  # before the scan: from the parsed tail
    m.adopt(scan_journal(tmp_path))
    assert list(m.hidden) == paired_begins(tmp_path) == [0, 2, 3, 4, 5, 10, 13]
    assert m.changed_inputs == {2: "search:2"}
    seqs = row_seqs(m)
    assert seqs == [s for s in range(len(j.recs)) if s not in m.hidden]  # one row per step; the running begin keeps its row
    assert m.begin_status(12) == "running" and m.begin_status(2) == "done"
    for row, seq in enumerate(seqs):
        assert m.row_of_seq(seq) == row
    m.toggle_begins()
    assert row_seqs(m) == list(range(len(j.recs)))
    m.toggle_begins()
    assert row_seqs(m) == seqs


def test_pairs_across_chunks_and_a_start_interrupts(tmp_path: Path) -> None:
    """A begin whose step is in the next chunk (or the next live read) pairs; a start ends it."""
    j = J(tmp_path)
    j.begin("a", 0)
    j.begin("b", 1)
    j.step("a", 0)
    j.begin("c", 2)  # its step never comes: the attempt ends
    cut = len(j.recs)
    j.step("b", 1)
    j.start()
    j.begin("c", 2)
    j.step("c", 2)
    j.write()
    data = (tmp_path / "journal.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    res = ScanResult()
    scan_bytes(b"".join(lines[:cut]), 0, res)
    assert sorted(res.pairs.hidden) == [0] and set(res.pairs.pending.values()) == {1, 3}
    scan_bytes(b"".join(lines[cut:]), cut, res)
    assert sorted(res.pairs.hidden) == paired_begins(tmp_path) == [0, 1, 6]
    assert res.pairs.pending == {}
    m = TimelineModel(tmp_path)
    m.open()
    m.adopt(scan_journal(tmp_path))
    assert m.begin_status(3) == "interrupted"


def test_transient_failure_keeps_the_step_running(tmp_path: Path) -> None:
    j = J(tmp_path)
    j.begin("a", 0)
    j.step("a", 0, error=True, transient=True)
    j.write()
    pairs = StepPairs()
    pairs.scan((tmp_path / "journal.jsonl").read_bytes(), 0)
    assert pairs.hidden == [] and list(pairs.pending.values()) == [0]
    j.step("a", 0)
    j.write()
    assert paired_begins(tmp_path) == [0]
    m = TimelineModel(tmp_path)
    m.open()
    m.adopt(scan_journal(tmp_path))
    assert list(m.hidden) == [0]


def test_live_reads_fold_a_begin_when_its_step_comes(tmp_path: Path) -> None:
    j = J(tmp_path)
    j.begin("plan", 0)
    j.step("plan", 0)
    for p in (1, 2, 3):
        j.begin(f"s{p}", p)
    j.write()
    m = TimelineModel(tmp_path)
    m.open()
    m.adopt(scan_journal(tmp_path))
    m.poll()
    assert list(m.hidden) == [0] and m.rows == 4
    assert all(m.begin_status(s) == "running" for s in (2, 3, 4))
    j.step("s3", 3)
    j.step("s1", 1)
    j.write()
    wait_for(lambda: (m.poll(), m.count == len(j.recs))[1], what="the live read")
    assert list(m.hidden) == [0, 2, 4]
    assert row_seqs(m) == [1, 3, 5, 6]
    j.step("s2", 2)
    j.write()
    wait_for(lambda: (m.poll(), m.count == len(j.recs))[1], what="the live read")
    assert list(m.hidden) == paired_begins(tmp_path) == [0, 2, 3, 4]


async def test_pilot_one_row_per_step_the_toggle_and_the_marks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    j = concurrent_run(run)
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(app), what="scan")
        d = app.screen
        tl = d.timeline  # type: ignore[attr-defined]
        m = tl.model

        def text(seq: int) -> str:
            y = m.row_of_seq(seq) - int(tl.scroll_y)
            return "".join(seg.text for seg in tl.render_line(y))

        assert m.rows == len(j.recs) - 7
        assert "running" in text(12)  # write, in flight: its begin row, running with its elapsed time
        assert "≠ ✓" in text(9)  # search:2, served with changed inputs
        assert "changed inputs: step 'search:2' #2" in text(15)
        await until(pilot, lambda: tl.selected() == ("rec", 15), what="the last row")
        await pilot.press("k", "k", "k")
        seq = tl.selected_seq()
        await pilot.press("a")
        assert m.show_begins and m.rows == len(j.recs) and tl.selected_seq() == seq  # the cursor stays on its record
        assert "…" in text(4)  # a begin row, its step done
        await pilot.press("a")
        assert not m.show_begins and tl.selected_seq() == seq
        await pilot.press("colon", *"3", "enter")  # a folded begin asked for by its seq: begin rows are shown
        await until(pilot, lambda: tl.selected_seq() == 3, what="the begin row")
        assert m.show_begins
        # the dashboard's status says no agent runs (a run stopped without its supervisor): no time counted
        from supervisor.core.status import RunStatus

        d._show_status(RunStatus(state="crashed"))  # type: ignore[attr-defined]
        assert "no step record (the agent is not running)" in text(12) and "running 0" not in text(12)
        d._show_status(RunStatus(state="running"))  # type: ignore[attr-defined]
        assert "⟳ running" in text(12)
        # the supervisor saw its attempt exit: the step in flight was interrupted (it counted on, before)
        with open(run / "supervisor.jsonl", "ab") as f:
            f.write(orjson.dumps({"ts": "2026-11-30T10:01:00.000Z", "event": "exit", "attempt": 1, "signal": "SIGKILL"}) + b"\n")
        await until(pilot, lambda: "interrupted" in text(12), what="the begin interrupted")


def test_names_with_quotes_and_backslashes_pair(tmp_path: Path) -> None:
    j = J(tmp_path)
    names = ['say "hi"', "path\\to", 'x\\"y']
    for p, n in enumerate(names):
        j.begin(n, p)
    for p in (2, 0, 1):
        j.step(names[p], p)
    j.write()
    m = TimelineModel(tmp_path)
    m.open()
    m.adopt(scan_journal(tmp_path))
    assert list(m.hidden) == paired_begins(tmp_path) == [0, 1, 2]
    from supervisor.core.history import Fold
    from supervisor.core.journal_reader import JournalReader

    f = Fold()
    f.extend(JournalReader(tmp_path).load(lazy=True))
    assert [r["pos"] for r in f.history.steps] == [0, 1, 2]
    assert [r.record()["step"] for r in f.history.steps] == names
