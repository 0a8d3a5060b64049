"""The wire contract (``supervisor/core/wire.py``): the lines the SDK writes satisfy every predicate the readers
test lines with, and the same records written with another key order and spaces take the general path and give
the same answers in each reader (the fold, the streaming ``log``, the SDK's resume, the TUI's scan). And the
writer's byte shapes are spelled in ``wire`` only."""

from __future__ import annotations

import importlib
import io
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from supervisor import Run
from supervisor.cli.main import main
from supervisor.core import history, stream, wire
from supervisor.core.journal_reader import JournalReader
from supervisor.core.pairing import Pairing
from supervisor.supervise.rollback import rollback

ROOT = Path(__file__).resolve().parents[2]


def _scan_module() -> ModuleType:
    """The TUI's scan (``supervisor.tui.scan``; ``supervisor.views.scan`` once the views move): the one line to fix."""
    for name in ("supervisor.views.scan", "supervisor.tui.scan"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise AssertionError("no scan module")


class Flaky(Exception):
    pass


def _agent(run_dir: Path, calls: list[str]) -> None:
    """One attempt: plain steps, a model call's step, a failed step, a retried try, a checkpoint, a note."""

    def work(name: str, x: Any) -> Any:
        calls.append(name)
        return {"name": name, "x": x, "text": "a long output " * 8}

    tries = {"n": 0}

    def flaky() -> str:
        calls.append("flaky")
        tries["n"] += 1
        if tries["n"] == 1:
            raise Flaky("the first try fails")
        return "second try"

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("it breaks")

    with Run.open(run_dir, retries=0) as run:
        run.step("plan", work, "plan", 1)
        run.checkpoint("planned")
        run.step("search:q1", work, "search:q1", [1, 2])
        run.with_options(call={"kind": "tool", "tool": "search", "call_id": "c1"}).step("tool:search", work, "tool", "q")
        run.note("a note", extra={"k": 1})
        with pytest.raises(RuntimeError):
            run.step("broken", broken)
        run.with_options(retries=1, retry_on=(Flaky,), backoff=0).step("flaky", flaky)
        run.step("search:q2", work, "search:q2", "naïve \"quoted\" \\ name")
        run.checkpoint("searched")
        run.step("summarize", work, "summarize", None)


def _never(*args: Any) -> Any:
    pytest.fail(f"a recorded step ran again: {args}")


def _journal(tmp_path: Path) -> Path:
    """A run with two attempts and a rollback between them (an abandoned branch)."""
    run_dir = tmp_path / "run"
    calls: list[str] = []
    _agent(run_dir, calls)
    rollback(run_dir, "planned", reason="try again")
    with Run.open(run_dir) as run:
        assert run.step("plan", _never, "plan", 1) == {"name": "plan", "x": 1, "text": "a long output " * 8}
        run.step("search:other", lambda: "after the rollback")
        run.checkpoint("end")
    return run_dir


def _lines(run_dir: Path) -> list[bytes]:
    return (run_dir / "journal.jsonl").read_bytes().splitlines()


def _respelled(run_dir: Path, dest: Path) -> Path:
    """The same records, keys reversed and spaces after every separator: no line in the writer's form."""
    dest.mkdir()
    out = []
    for raw in _lines(run_dir):
        rec = orjson.loads(raw)
        text = orjson.dumps(dict(reversed(list(rec.items())))).decode()
        out.append(text.replace('","', '", "').replace('":', '": ').replace(",{", ", {") + "\n")
    (dest / "journal.jsonl").write_text("".join(out))
    for name in ("run.json",):
        (dest / name).write_bytes((run_dir / name).read_bytes())
    if (run_dir / "checkpoints").is_dir():
        (dest / "checkpoints").mkdir()
        for p in (run_dir / "checkpoints").iterdir():
            (dest / "checkpoints" / p.name).write_bytes(p.read_bytes())
    return dest


def test_the_sdks_lines_satisfy_every_predicate(tmp_path: Path) -> None:
    run_dir = _journal(tmp_path)
    lines = _lines(run_dir)
    data = (run_dir / "journal.jsonl").read_bytes()
    assert wire.is_writer_chunk(data, len(lines)) and not wire.is_suspect(data)
    kinds = set()
    for seq, raw in enumerate(lines):
        rec = orjson.loads(raw)
        kind = rec["kind"]
        kinds.add(kind)
        assert raw.startswith(wire.WRITER + kind.encode() + b'",') and wire.is_writer_line(raw), raw
        assert rec["seq"] == seq, raw
        assert wire.is_marker_line(raw) == (kind in (wire.CHECKPOINT, wire.ROLLBACK) or b"checkpoint" in raw or b"rollback" in raw)
        assert any(m in raw for m in wire.MARKS) == (kind in (wire.CHECKPOINT, wire.ROLLBACK))
        assert (wire.ERROR_KEY in raw) == ("error" in rec)
        assert (wire.FIELD_TRANSIENT in raw) == ("transient" in rec)
        assert wire.is_lazy_step(raw) == (kind == wire.STEP and "error" not in rec)
        assert (raw[wire.KIND_AT] == wire.S_BYTE) == kind.startswith("s")
        head = {wire.STEP: wire.STEP_HEAD, wire.BEGIN: wire.BEGIN_HEAD, wire.START: wire.START_HEAD,
                wire.ROLLBACK: wire.ROLLBACK_HEAD, wire.CHECKPOINT: wire.CHECKPOINT_HEAD}.get(kind)
        if head is not None:
            assert raw.startswith(head)
        if kind in (wire.STEP, wire.BEGIN):
            assert list(rec)[:3] == ["kind", "step", "pos"] and list(rec)[-3:] == ["seq", "id", "ts"], raw
            m = wire.CANON.fullmatch(raw)
            assert m is not None, raw
            assert m[1].decode() == kind and orjson.loads(b'"' + m[2] + b'"') == rec["step"]
            assert int(m[3]) == rec["pos"] and int(m[4]) == seq and m[5].decode() == rec["ts"]
            if kind == wire.STEP:
                sp = wire.STEP_POS.match(raw)
                assert sp is not None and int(sp[1]) == rec["pos"]
            else:
                bp = wire.BEGIN_NAME_POS.match(raw)
                assert bp is not None and orjson.loads(bp[1]) == rec["step"] and int(bp[2]) == rec["pos"]
                pb = wire.PLAIN_BEGIN.fullmatch(raw)
                assert (pb is not None) == (b"\\" not in m[2] and rec["ts"].isascii())
                assert pb is None or (int(pb[2]) == seq and pb[3].decode() == rec["ts"][:23])
                nxt = lines[seq + 1] if seq + 1 < len(lines) else b""
                assert not nxt or wire.closes_begin(nxt)  # sequential steps: each begin's next line closes it
                if nxt.startswith(wire.STEP_HEAD):
                    assert nxt.startswith(wire.step_head(bp[1], bp[2]))
        else:
            assert wire.CANON.fullmatch(raw) is None
    assert {"start", "begin", "step", "checkpoint", "rollback", "note"} <= kinds
    assert not wire.overlaps(data) and wire.OVERLAP.search(data) is None
    assert any("error" in orjson.loads(x) for x in lines) and any(b"transient" in x for x in lines)


def _log(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> bytes:
    buf = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(buf, encoding="utf-8"))
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert main(argv) == 0
    sys.stdout.flush()
    return buf.getvalue()


def _fold_answers(run_dir: Path) -> dict[str, Any]:
    h = history.load(run_dir)
    view = JournalReader(run_dir).resume_view()
    f = history.Fold()
    f.extend(view.entries, view.overlaps)
    lazy = f.history
    return {
        "steps": [(r["step"], r["pos"], r["seq"], r.get("output")) for r in h.steps],
        "lazy_steps": [(r["step"], r["pos"], r["seq"], r.get("output")) for r in lazy.steps],
        "effective": [r["seq"] for r in h.effective],
        "checkpoints": [(r["name"], r["seq"]) for r in h.checkpoints],
        "rollbacks": [(r["checkpoint"], r["seq"]) for r in h.rollbacks],
        "branches": [[r["seq"] for r in b.records] for b in h.branches],
        "concurrent": (h.concurrent, lazy.concurrent),
        "paired": h.pairing().paired,
        "next_pos": h.next_pos,
        "lazy_kinds": sorted({type(e).__name__ for e in view.entries}),
    }


def test_another_key_order_gives_the_same_answers_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _journal(tmp_path)
    other = _respelled(run_dir, tmp_path / "respelled")
    assert not any(wire.is_writer_line(x) for x in _lines(other))  # the general path only

    a, b = _fold_answers(run_dir), _fold_answers(other)
    assert a.pop("lazy_kinds") == ["LazyRecord", "dict"] and b.pop("lazy_kinds") == ["dict"]
    assert a == b
    # the streaming log: text byte for byte, JSON as the same objects, with --all and without
    for flags in ([], ["--all"], ["--kind", "step"], ["--tail", "5"], ["--all", "--step", "search:*"]):
        assert _log(["log", str(run_dir), *flags], monkeypatch) == _log(["log", str(other), *flags], monkeypatch), flags
        ja = [orjson.loads(x) for x in _log(["log", str(run_dir), "--json", *flags], monkeypatch).splitlines()]
        jb = [orjson.loads(x) for x in _log(["log", str(other), "--json", *flags], monkeypatch).splitlines()]
        assert ja == jb, flags
    pa, pb = stream.plan(run_dir, pairs=True), stream.plan(other, pairs=True)
    assert (pa.cuts, pa.abandoned, pa.count, pa.last) == (pb.cuts, pb.abandoned, pb.count, pb.last)
    assert not pb.paired  # the look ahead is only skipped for writer lines (and a retried try needs it)
    items_a = [(i.seq, i.kind, i.pos, i.abandoned, i.step_name(), i.time()) for i in stream.Walk(run_dir, pa, all_=True).items()]
    items_b = [(i.seq, i.kind, i.pos, i.abandoned, i.step_name(), i.time()) for i in stream.Walk(other, pb, all_=True).items()]
    assert items_a == items_b
    # the TUI's scan
    scan = _scan_module()
    sa, sb = scan.scan_journal(run_dir), scan.scan_journal(other)
    fa, fb = history.Fold(keep=False), history.Fold(keep=False)
    fa.extend(sa.markers)
    fb.extend(sb.markers)
    assert (sa.count, sa.steps, fa.step_count, fa.problem_count) == (sb.count, sb.steps, fb.step_count, fb.problem_count)
    assert [(m.seq, m.kind, m.ok_before) for m in sa.markers] == [(m.seq, m.kind, m.ok_before) for m in sb.markers]
    every = Pairing()  # the scan pairs the begins of the abandoned branches too
    for e in history.load(run_dir).entries:
        every.add(e)
    assert sorted(sa.pairs.hidden) == sorted(every.paired)
    # the SDK's resume: every effective step served, none called again, the same outputs
    for d in (run_dir, other):
        served: list[Any] = []
        with Run.open(d) as run:
            for name, _, _, _output in a["steps"]:
                got = run.step(name, lambda: pytest.fail(f"{name} ran again"))
                served.append(got)
        assert served == [s[3] for s in a["steps"]], d


def test_the_scan_pairs_begins_in_another_key_order(tmp_path: Path) -> None:
    run_dir = _journal(tmp_path)
    other = _respelled(run_dir, tmp_path / "respelled")
    scan = _scan_module()
    every = Pairing()
    for e in history.load(other).entries:
        every.add(e)
    assert sorted(scan.scan_journal(other).pairs.hidden) == sorted(every.paired)


_SHAPES = [
    re.compile(r"""b['"]\{"kind":"""),  # a line head as a bytes literal
    re.compile(r"""['"]\{\\?"kind\\?":\\?\""""),
    re.compile(r'''"kind":"(step|begin|start|checkpoint|rollback|fork|note)"'''),  # a marker word
    re.compile(r"""\\\{"kind"\s*:"""),  # a regex over the head
]


def test_the_writers_byte_shapes_are_in_wire_only() -> None:
    offenders = []
    for path in sorted((ROOT / "supervisor").rglob("*.py")):
        if path == ROOT / "supervisor" / "core" / "wire.py":
            continue
        text = path.read_text()
        for n, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in _SHAPES):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "the writer's byte shapes belong in supervisor/core/wire.py:\n" + "\n".join(offenders)
