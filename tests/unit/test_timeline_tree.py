"""The timeline's nesting read from the journal's bytes (``views.timeline_tree``, no Textual): the same facts
whatever the chunks, a parent's begin found in an earlier chunk, the steps a new attempt interrupted."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.core.segments import read_stream
from supervisor.views.scan import SeqBits, iter_new_regions
from supervisor.views.timeline_tree import Facts, StepTree, TreeScan

from ..nested_runs import NestedJournal, sample


def _facts(run: Path, chunk: int, lines: int | None = None) -> Facts:
    """The facts of a build over the first ``lines`` lines, then of the rest fed as the live reads feed it."""
    n = sum(c.count() for c in read_stream(run))
    tree = TreeScan.build(run, n if lines is None else lines, chunk=chunk)
    got = tree.take()
    if lines is not None:  # the live reads go on from the byte where the build stopped
        data = (run / "journal.jsonl").read_bytes()
        at = 0
        for _ in range(lines):
            at = data.index(b"\n", at) + 1
        for region, new in iter_new_regions(run / "journal.jsonl", at, lines, chunk=chunk):
            tree.feed(new, region)
        more = tree.take()
        got = Facts(got.parents + more.parents, got.children + more.children, got.closed + more.closed)
    return got


@pytest.mark.timeout(10)
def test_the_same_facts_whatever_the_chunks(tmp_path: Path) -> None:
    j = NestedJournal()
    j.start()
    a = j.begin("a", 1)
    for pos in range(2, 40):
        j.pair(f"flat:{pos}", pos)  # a's first child kilobytes after its begin
    b = j.begin("b", 40, a)
    j.pair("c", 41, "x", b)
    j.step("b", 40, "y", a)
    j.step("a", 1, "z")
    lost = j.begin("lost", 42)  # a parent the next attempt interrupts: no step record closes it
    j.pair("kid", 43, "k", lost)
    j.start(2)
    j.step("lost", 42, "from attempt 2", attempt=2)
    run = j.write(tmp_path / "run")
    want = _facts(run, 1 << 20)
    assert want.parents == [(a, 1, None), (b, 78, a), (lost, 83, None)]
    assert want.closed == [(b, 81), (a, 82)]  # not the lost one: its attempt ended
    assert [s for s, _ in want.children] == [78, 79, 80, 81, 84, 85]
    for chunk in (4096, 700, 200):
        assert _facts(run, chunk) == want, chunk
        assert _facts(run, chunk, lines=79) == want, chunk  # live reads after a build that ended between


@pytest.mark.timeout(10)
def test_fold_rows_and_moves(tmp_path: Path) -> None:
    """The sample's tree on the UI side: depths, the finished parents' rows at their begins, a fold's rows."""
    run = sample(tmp_path / "run")
    t = StepTree()
    hidden = SeqBits([1, 2, 3, 6, 9])  # the scan's paired begins
    assert t.take(_facts(run, 1 << 20), hidden, False)
    assert t.moved == {1: 8, 2: 5} and t.gone is not None
    assert [t.row_seq(i, False) for i in range(11 - len(t.gone))] == [0, 8, 5, 4, 7, 10]
    assert t.row_index(8, False) == 1 and t.row_index(1, False) == 1 and not t.no_row(8, False)
    assert t.depth({"parent": "fb5268152"}) == 2 and t.depth({}) == 0
    # deep's row folds inner; its row is at its begin (2), where it shows its step record (5)
    assert t.fold(4, lambda s: {"parent": "fb5268152"}, hidden, False) == (2, True)
    assert t.hidden_rows(5, hidden, False) == 1 and t.hidden_rows(8, hidden, False) is None
    assert t.fold(8, lambda s: {}, hidden, False) == (1, True)
    assert [t.row_seq(i, False) for i in range(11 - len(t.gone))] == [0, 8, 10]
    assert t.hidden_rows(8, hidden, False) == 3 and t.hidden_rows(8, hidden, True) == 6
    assert t.unfold_to(4, lambda s: {"parent": "fb5268152"}, hidden, False)
    assert not t.folded and t.gone is not None and len(t.gone) == 5
