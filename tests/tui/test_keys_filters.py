"""Row filters without Textual: the syntax, the raw-line tests, the forward pass, the model's filtered rows."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from supervisor.core.events import is_error_event
from supervisor.views.filters import filter_lines, new_pass, parse_filter
from supervisor.views.scan import scan_journal
from supervisor.views.timeline import TimelineModel


def line(**rec: object) -> bytes:
    return orjson.dumps(rec)


STEP_OK = line(kind="step", step="search:q1", pos=0, output="Found Durable agents")
STEP_ERR = line(kind="step", step="search:q2", pos=1, error={"type": "Boom", "message": "boom"})
BEGIN = line(kind="begin", step="search:q3", pos=2, inputs={"args": ["q3"]})
CHECKPOINT = line(kind="checkpoint", name="plan-done", pos=1, file="0001-plan-done.json")
MINIMAL = b'{"step": "summarize", "output": "a \\"quoted\\" text"}'  # another writer: no kind, spaces
DAMAGED = b'{"kind":"step","step":"cut'


def test_syntax_and_one_line_errors() -> None:
    f = parse_filter('kind:step,checkpt step:search:* !errors "two words"')
    assert [t.what for t in f.terms] == ["kind", "step", "errors", "text"]
    assert f.terms[0].kinds == {"step", "checkpoint"} and f.terms[2].negate
    assert f.describe() == "kind:checkpoint,step and step:search:* and not errors and 'two words'"
    assert parse_filter("text:kind:step").terms[0].value == "kind:step"
    for bad, says in (("kind:nope", "unknown kind 'nope'"), ('"open', "cannot read '\"open': No closing"), ("  ", "nothing to look for"),
                      ("kind:errors", "errors is a term of its own")):
        with pytest.raises(ValueError, match=says):
            parse_filter(bad)


def test_terms_on_raw_lines() -> None:
    def passes(text: str) -> list[bool]:
        f = parse_filter(text)
        return [f.match_line(x) for x in (STEP_OK, STEP_ERR, BEGIN, CHECKPOINT, MINIMAL, DAMAGED, b"", b"   ")]

    assert passes("kind:step") == [True, True, False, False, True, False, False, False]  # no kind: a step
    assert passes("kind:bad") == [False, False, False, False, False, True, False, False]
    assert passes("errors") == [False, True, False, False, False, False, False, False]
    assert passes("!errors kind:step") == [True, False, False, False, True, False, False, False]
    assert passes("step:search:*") == [True, True, True, False, False, False, False, False]
    assert passes("step:Search:*") == [False] * 8  # a glob is case-sensitive
    assert passes("durable") == [True, False, False, False, False, False, False, False]  # smart case
    assert passes("Durable") == [True, False, False, False, False, False, False, False]
    assert passes("DURABLE") == [False] * 8
    assert passes('"quoted"') == [False, False, False, False, True, False, False, False]  # escaped in the raw JSON
    assert passes("!search") == [False, False, False, True, True, True, False, False]  # blank lines never pass


def test_supervisor_rows() -> None:
    crash = {"event": "exit", "attempt": 1, "code": 1, "step": "search:q2"}
    killed = {"event": "exit", "attempt": 2, "code": None, "signal": 9}
    clean = {"event": "exit", "attempt": 3, "code": 0}
    hang = {"event": "hang", "attempt": 4}
    give_up = {"event": "give-up", "attempt": 5}
    spawn = {"event": "spawn", "attempt": 1, "pid": 7}
    assert [is_error_event(e) for e in (crash, killed, clean, hang, give_up, spawn)] == [True, True, False, True, True, False]
    f = parse_filter("errors")
    assert [f.match_event(e) for e in (crash, clean, hang, spawn)] == [True, False, True, False]
    assert parse_filter("kind:event").match_event(spawn) and not parse_filter("kind:step").match_event(spawn)
    assert parse_filter("step:search:*").match_event(crash) and not parse_filter("step:search:*").match_event(spawn)
    assert parse_filter("pid").match_event(spawn) and not parse_filter("!pid").match_event(spawn)


def _journal(path: Path, lines: list[bytes]) -> Path:
    path.mkdir(mode=0o700)
    (path / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_forward_pass_reads_only_what_came(tmp_path: Path) -> None:
    run = _journal(tmp_path / "r", [STEP_OK, STEP_ERR, b"", DAMAGED, CHECKPOINT])
    p = new_pass(parse_filter("!kind:checkpoint"), run)
    seqs, upto = p.advance()
    assert seqs == [0, 1, 3] and upto == 5  # the blank line has a seq but no row
    seqs, upto = p.advance()
    assert seqs == [] and upto == 5
    with open(run / "journal.jsonl", "ab") as f:
        f.write(STEP_ERR + b"\n" + CHECKPOINT + b"\n" + b'{"kind":"step","step":"half')  # a torn tail waits
    seqs, upto = p.advance()
    assert seqs == [5] and upto == 7
    # text-only filters take the C-speed path: the same answer as a line by line test
    q = new_pass(parse_filter("search"), run)
    assert q.advance()[0] == [0, 1, 5]


def test_model_rows_under_a_filter(tmp_path: Path) -> None:
    """Rows and seqs map both ways; folded begins stay folded; supervisor rows that pass sit among them."""
    lines = []
    for i in range(40):
        lines.append(line(kind="begin", step=f"s{i}", pos=i, attempt=1))
        lines.append(line(kind="step", step=f"s{i}", pos=i, attempt=1, output=i) if i % 10 else
                     line(kind="step", step=f"s{i}", pos=i, attempt=1, error={"message": "x"}))
    lines.insert(0, line(kind="start", attempt=1, pid=1))
    run = _journal(tmp_path / "r", lines)
    (run / "supervisor.jsonl").write_bytes(
        line(ts="2026-01-01T00:00:00Z", event="spawn", attempt=1, pid=1) + b"\n"
        + line(ts="2026-01-01T00:00:01Z", event="exit", attempt=1, code=1) + b"\n")
    m = TimelineModel(run)
    m.open()
    m.adopt(scan_journal(run))
    m.poll()
    assert m.rows == 1 + 40 + 2  # start, one row per step, two supervisor rows
    f = parse_filter("errors")
    seqs, _ = new_pass(f, run).advance()
    m.set_filter(f, seqs)
    assert [m.row_item(r) for r in range(m.rows)] == [("rec", 2), ("rec", 22), ("rec", 42), ("rec", 62), ("event", 1)]
    for r in range(m.rows - 1):
        assert m.row_of_seq(m.row_item(r)[1]) == r
    assert m.row_of_seq(3) == 1  # a record the filter hides: the next row it shows
    assert m.error_event_rows() == [4] and m.row_of_event(0) is None and m.row_of_event(1) == 4
    # begins match step:s1* but fold into their steps' rows until shown
    f = parse_filter("step:s1*")
    seqs, _ = new_pass(f, run).advance()
    m.set_filter(f, seqs)
    names = [m.record(m.row_item(r)[1])["kind"] for r in range(m.rows)]  # type: ignore[index]
    assert names == ["step"] * 11  # s1, s10..s19
    m.toggle_begins()
    assert m.rows == 22 and m.passes(m.row_item(0)[1])
    m.toggle_begins()
    m.clear_filter()
    assert m.rows == 43


def test_a_sparse_filter_reads_only_its_rows(tmp_path: Path) -> None:
    """The timeline asks for the seqs between its first and last rows: under a sparse filter only the rows shown are read."""
    lines = [line(kind="step", step="s", pos=i, output="x" * 50) for i in range(20_000)]
    for i in (5, 9_000, 19_990):
        lines[i] = line(kind="step", step="needle", pos=i, output="y")
    run = _journal(tmp_path / "r", lines)
    m = TimelineModel(run)
    m.open()
    m.adopt(scan_journal(run))
    m.poll()
    m.cache.clear()
    f = parse_filter("step:needle")
    m.set_filter(f, new_pass(f, run).advance()[0])
    m.fetch(5, 19_991)
    assert sorted(m.cache) == [5, 9_000, 19_990]


@pytest.mark.parametrize("text", [
    "kind:step", "kind:checkpoint", "kind:step !errors", "errors", "step:search:*", "step:*q2", "durable",
    "Durable", '"quoted"', "search !q1", "kind:begin search", "!kind:step", "kind:step,begin", "kind:bad",
])
@pytest.mark.parametrize("mix", ["writer", "mixed"])
def test_needle_paths_agree_with_the_line_by_line_test(text: str, mix: str) -> None:
    """The C-speed candidates (the rarest needle; sparse finds or a dense per-line test) give what testing every
    line gives: a kind's text inside a value, a line cut short after its kind, blank lines, another writer's lines."""
    nested = line(kind="checkpoint", name="c", output={"kind": "step", "note": "durable"})  # {"kind":"step" in a value
    base = [STEP_OK, STEP_ERR, BEGIN, CHECKPOINT, nested, DAMAGED] * 3 + [STEP_OK] * 30  # dense and sparse needles
    lines = base if mix == "writer" else base + [MINIMAL, b"", b'not json "error"']
    data = b"\n".join(lines) + b"\n"
    f = parse_filter(text)
    got: list[int] = []
    assert filter_lines(f, data, 100, got) == len(lines)
    assert got == [100 + k for k, x in enumerate(lines) if f.match_line(x)]


def test_export_in_row_order_atomic_and_private(tmp_path: Path) -> None:
    from supervisor.views.export_rows import export_rows, merge_rows

    lines = [STEP_OK, DAMAGED, b"", MINIMAL, b"2026-11-29 10:00:01 | INFO | " + CHECKPOINT, STEP_ERR]
    run = _journal(tmp_path / "r", lines)
    crash = {"event": "exit", "code": 1}
    items = merge_rows([0, 1, 3, 4, 5], [(0, {"event": "spawn"}), (2, crash), (5, {"event": "give-up"})])
    assert [k for k, _ in items] == ["event", "rec", "rec", "event", "rec", "rec", "rec", "event"]
    out = tmp_path / "rows.jsonl"
    out.write_text("old")
    res = export_rows(run, items, out)
    got = out.read_bytes().splitlines()
    assert res.rows == 7 and res.skipped == 1  # the damaged line is no JSON: left out, and said
    assert got[0] == b'{"event":"spawn"}' and got[1] == STEP_OK and orjson.loads(got[2]) == crash
    assert got[3] == MINIMAL  # another writer's line as it is
    assert orjson.loads(got[4])["name"] == "plan-done" and orjson.loads(got[4])["prefix"].startswith("2026-11-29")
    assert got[5] == STEP_ERR and orjson.loads(got[6]) == {"event": "give-up"}
    assert out.stat().st_mode & 0o777 == 0o600 and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(OSError):
        export_rows(run, items, tmp_path / "missing" / "rows.jsonl")
