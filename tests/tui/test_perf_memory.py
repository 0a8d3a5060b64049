"""What keeps the dashboard's memory flat under a live load, and the start without cyclic GC (fast, in process)."""

from __future__ import annotations

import gc
import random
from array import array
from pathlib import Path

import orjson

from supervisor.core.journal_writer import JournalWriter
from supervisor.tui import app as app_mod
from supervisor.views.scan import scan_journal, search_regions
from supervisor.views.timeline import CACHE_MAX, REGION_MAX, TimelineModel


def _sdk_like(w: JournalWriter, pos: int) -> None:
    """A begin and its step, as the SDK writes them (the begin folds into the step's row)."""
    w.append({"kind": "begin", "step": f"work:{pos}", "pos": pos, "attempt": 1}, sync=False)
    w.append({"kind": "step", "step": f"work:{pos}", "pos": pos, "attempt": 1, "output": pos}, sync=False)


def test_live_reads_keep_few_regions_and_a_bounded_cache(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    w = JournalWriter(run, durable=False)
    try:
        for pos in range(50):
            _sdk_like(w, pos)
        m = TimelineModel(run)
        m.open()
        m.adopt(scan_journal(run))
        m.poll()
        base = len(m.regions)
        for pos in range(50, 3_050):  # 3,000 reads of one step each: a live load read every few ms
            _sdk_like(w, pos)
            assert m.poll()[0] == 2
        # each read's region goes on from the last one: merged, not 3,000 more
        assert len(m.regions) <= base + 1
        assert all(r.end - r.start <= REGION_MAX for r in m.regions)
        # ...and they still cover every line: the search finds the first and the last step's output
        hits = search_regions(list(m.regions), '"output":3049,')
        assert hits == [m.count - 1]
        assert search_regions(list(m.regions), '"output":0,') == [1]
        assert len(m.cache) <= CACHE_MAX
        # one row per step; the last row is the last step
        assert m.rows == 3_050
        assert m.row_item(m.rows - 1) == ("rec", m.count - 1)
        assert m.record(m.count - 1)["output"] == 3049  # type: ignore[index]
    finally:
        w.close()


def test_rows_and_seqs_are_inverse_for_any_folded_begins() -> None:
    """``seq_at`` (a bisect over hidden[i] - i computed on the fly, no second array) inverts ``visible_index``."""
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(0, 60)
        hidden = sorted(rng.sample(range(n), rng.randint(0, n)))
        m = TimelineModel(Path("/nonexistent/journal.jsonl"))
        m.count = n
        m.hidden = array("q", hidden)
        visible = [s for s in range(n) if s not in hidden]
        assert [m.seq_at(i) for i in range(len(visible))] == visible
        assert [m.visible_index(s) for s in visible] == list(range(len(visible)))
        m.add_hidden(visible[: len(visible) // 2])  # concurrent steps: begins folded below the last one
        left = [s for s in visible[len(visible) // 2 :]]
        assert [m.seq_at(i) for i in range(len(left))] == left


def test_the_start_pauses_gc_until_the_first_frame_only_for_the_command() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    app_mod.pause_gc()
    try:
        assert not gc.isenabled()
        app_mod.pause_gc()  # twice: still one pause
    finally:
        app_mod.resume_gc()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen  # the start's objects are set apart for good
    gc.unfreeze()  # (the test process's objects: back to the collector)
    gc.disable()
    try:
        app_mod.pause_gc()  # a caller that disabled it itself: not ours to enable
        app_mod.resume_gc()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_sdk_like_lines_are_what_the_scan_folds(tmp_path: Path) -> None:
    """The helper above writes what the scan pairs (else the region test would count rows wrongly)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    w = JournalWriter(run, durable=False)
    try:
        _sdk_like(w, 0)
    finally:
        w.close()
    lines = (run / "journal.jsonl").read_bytes().splitlines()
    assert [orjson.loads(x)["kind"] for x in lines] == ["begin", "step"]
    assert scan_journal(run).pairs.hidden == [0]
