"""The supervisor's journal watch parses no plain step: a real SDK journal fed to ``JournalWatch`` a few lines
at a time, polled without ``records``, parses none of the writer's successful ``step`` lines nor a ``begin``
whose step follows it, and gives at every poll the answers a journal of the same records in another form
(every line parsed) gives: progress credited per attempt, the steps in flight, rollbacks, the fold's steps
and checkpoints."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor import Run
from supervisor.core import wire
from supervisor.supervise.journal_watch import JournalWatch
from supervisor.supervise.policy import Attempt
from supervisor.supervise.rollback import rollback


class Flaky(Exception):
    pass


def _journal(run_dir: Path) -> list[bytes]:
    """Two attempts of the SDK: sequential steps, overlapping thread steps, a failed step, a retried try, a
    checkpoint, a note; a rollback between them. The journal's lines (the first attempt's start first)."""
    tries = {"n": 0}

    def flaky() -> str:
        tries["n"] += 1
        if tries["n"] == 1:
            raise Flaky("the first try fails")
        return "second try"

    def broken() -> None:
        raise RuntimeError("it breaks")

    both = threading.Barrier(2)
    journal = run_dir / "journal.jsonl"

    def together(i: int) -> int:
        both.wait(5)  # both threads' begins are written before either step
        deadline = time.monotonic() + 5
        while i == 1 and wire.STEP_HEAD + b'"step":"t0"' not in journal.read_bytes():  # t1's step after t0's
            assert time.monotonic() < deadline, "t0's step was not written"
            time.sleep(0.001)
        return i

    with Run.open(run_dir, retries=0) as run:
        for i in range(5):
            run.step(f"plan:{i}", lambda i: {"i": i, "text": "an output " * 4}, i)
        run.checkpoint("planned")
        threads = [threading.Thread(target=run.step, args=(f"t{i}", together, i)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run.step("naïve \"quoted\" \\ name", lambda: 1)
        with pytest.raises(RuntimeError):
            run.step("broken", broken)
        run.with_options(retries=1, retry_on=(Flaky,), backoff=0).step("flaky", flaky)
        run.note("a note")
        for i in range(7):
            run.step(f"more:{i}", lambda i: i, i)
    rollback(run_dir, "planned", reason="try again")
    with Run.open(run_dir) as run:  # the second attempt: not this watch's (see is_ours below)
        for i in range(5):
            run.step(f"plan:{i}", lambda i: pytest.fail("served on resume"), i)
        for i in range(8):
            run.step(f"again:{i}", lambda i: i * 2, i)
        run.checkpoint("end")
        run.step("last", lambda: "done")
    return _retried_with_begin(journal.read_bytes().splitlines(keepends=True))


def _retried_with_begin(lines: list[bytes]) -> list[bytes]:
    """The retried try written with a begin of its own (as a writer may): the failed try's begin repeated
    after it, the seqs renumbered. The first begin stays in flight past the failed try; the second's step
    closes it."""
    i = next(k for k, x in enumerate(lines) if b'"transient":true' in x)
    begin = next(x for x in reversed(lines[:i]) if x.startswith(wire.BEGIN_HEAD))
    out = []
    for seq, raw in enumerate([*lines[: i + 1], begin, *lines[i + 1 :]]):
        rec = orjson.loads(raw)
        rec["seq"] = seq
        out.append(orjson.dumps(rec) + b"\n")
    assert out[: i + 1] == lines[: i + 1]  # the writer's bytes: orjson wrote them
    return out


def _respelled(lines: list[bytes]) -> list[bytes]:
    """The same records, keys reversed and spaces after the separators: no line in the writer's form."""
    out = []
    for raw in lines:
        rec = orjson.loads(raw)
        text = orjson.dumps(dict(reversed(list(rec.items())))).decode()
        out.append((text.replace('","', '", "').replace('":', '": ') + "\n").encode())
    return out


def _follow(lines: list[bytes], run_dir: Path, sizes: list[int], *, records: bool, chunk: int | None = None) -> list[dict[str, Any]]:
    """Append ``lines`` to a fresh journal ``sizes`` lines at a time, in turn (a begin's step often in the next
    poll); the watch's answers after each poll."""
    run_dir.mkdir(parents=True)
    path = run_dir / "journal.jsonl"
    watch = JournalWatch(run_dir, is_ours=lambda pid, sup, attempt: pid == os.getpid() and attempt == 1, say=lambda s: None)
    if chunk is not None:
        watch.reader.chunk = chunk  # regions split mid-poll
    watch.load()
    cur = Attempt(number=1, pid=os.getpid())
    answers: list[dict[str, Any]] = []
    i = 0
    while i < len(lines):
        n = sizes[len(answers) % len(sizes)]
        with open(path, "ab") as f:
            f.write(b"".join(lines[i : i + n]))
        i += n
        watch.poll(cur, 1, records=records)
        f_ = watch.fold
        answers.append({
            "progress": cur.progress, "flying": dict(cur.flying), "rollbacks": cur.rollbacks,
            "records": watch.records, "steps": f_.step_count, "checkpoints": [c["seq"] for c in f_.checkpoints],
            "rollback_total": f_.rollback_total, "ours": watch._writer_ours,
        })
    return answers


def test_the_watch_parses_no_plain_step_and_answers_as_for_parsed_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_SUPERVISOR_RUN_DIR", raising=False)
    monkeypatch.delenv("AGENT_SUPERVISOR_ATTEMPT", raising=False)
    lines = _journal(tmp_path / "src")
    other = _respelled(lines)
    assert not any(wire.is_writer_line(x.rstrip(b"\n")) for x in other)
    # one line a poll; two (a retried try's own begin and step in one poll, the first begin in flight); three (a
    # poll ends between overlapping steps' ends); mixed; all at once
    for k, sizes in enumerate(([1], [2], [3], [1, 2, 3, 5, 1, 4, 7, 2], [len(lines)])):
        _check(lines, other, tmp_path / f"sizes{k}", sizes, monkeypatch)


def _check(lines: list[bytes], other: list[bytes], tmp: Path, sizes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _follow(other, tmp / "parsed", sizes, records=True)
    # the answers are worth comparing: steps credited and in flight, a rollback, the second attempt not ours
    if sizes == [1]:
        assert any(len(a["flying"]) == 2 for a in expected)
    assert expected[-1]["rollbacks"] == 1 and expected[-1]["ours"] is False
    assert 0 < expected[-1]["progress"] < expected[-1]["steps"] + 8

    parsed: list[bytes] = []
    loads = orjson.loads

    def counting(data: Any) -> Any:
        if bytes(data[:1]) == b"{":  # a record, not a step's name
            parsed.append(bytes(data))
        return loads(data)

    monkeypatch.setattr(orjson, "loads", counting)
    assert _follow(lines, tmp / "lazy", sizes, records=False) == expected
    steps = [x for x in parsed if x.startswith(wire.STEP_HEAD) and wire.ERROR_WORD not in x]
    assert not steps, f"{len(steps)} successful step lines parsed, e.g. {steps[0][:80]!r}"
    begins = [x for x in parsed if x.startswith(wire.BEGIN_HEAD)]
    assert not begins, f"{len(begins)} begin lines parsed"
    assert len(parsed) < len(lines) // 3  # starts, checkpoints, the rollback, the note, the failed tries
    parsed.clear()
    assert _follow(lines, tmp / "lazy_small", sizes, records=False, chunk=300) == expected
    assert not [x for x in parsed if x.startswith((wire.STEP_HEAD, wire.BEGIN_HEAD)) and wire.ERROR_WORD not in x]
    # the foreign form without records, and the writer's form with them: the same answers
    monkeypatch.setattr(orjson, "loads", loads)
    assert _follow(other, tmp / "parsed_lazy", sizes, records=False) == expected
    assert _follow(lines, tmp / "writer_parsed", sizes, records=True) == expected


def test_a_poll_with_records_returns_every_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_SUPERVISOR_RUN_DIR", raising=False)
    _journal(tmp_path / "src")
    lines = (tmp_path / "src" / "journal.jsonl").read_bytes().splitlines()
    watch = JournalWatch(tmp_path / "src", is_ours=lambda *a: True, say=lambda s: None)
    assert len(watch.poll(None, 1, records=True)) == len(lines)
    watch = JournalWatch(tmp_path / "src", is_ours=lambda *a: True, say=lambda s: None)
    got = watch.poll(None, 1, records=False)  # only the records that are not plain begins and steps
    assert 0 < len(got) < len(lines) // 3 and watch.records == len(lines)


def test_a_step_line_without_its_begin_does_not_close_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer lines where a begin is followed by another step's line (that step's begin never written): the
    begin stays in flight, as when every line is parsed."""
    monkeypatch.delenv("AGENT_SUPERVISOR_RUN_DIR", raising=False)
    with Run.open(tmp_path / "src") as run:
        run.step("a", lambda: 1)
        run.step("b", lambda: 2)
    start, begin_a, step_a, _begin_b, step_b = (tmp_path / "src" / "journal.jsonl").read_bytes().splitlines(keepends=True)
    lines = []
    for seq, raw in enumerate([start, begin_a, step_b, step_a]):
        rec = orjson.loads(raw)
        rec["seq"] = seq
        lines.append(orjson.dumps(rec) + b"\n")
    expected = _follow(_respelled(lines), tmp_path / "parsed", [1, 2, 1], records=True)
    assert expected[1]["flying"] == {0: "a"} and expected[-1]["flying"] == {}
    assert _follow(lines, tmp_path / "lazy", [1, 2, 1], records=False) == expected
