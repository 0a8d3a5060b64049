"""OTLP export of nested steps: a nested step's span is a child of its enclosing step's span, not of its attempt's
(finished, failed and retried, interrupted, or finishing after its parent). Hand-written journals in the SDK's
shape (``tests/nested_runs.py``), exported in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.cli.main import main
from supervisor.core.journal_reader import JournalReader
from supervisor.export.otlp import SpanBuilder, build_spans, span_id

from ..nested_runs import NestedJournal, sample


def _export(run: Path, out: Path) -> dict[str, dict[str, Any]]:
    """``export --otlp``'s spans by ``name#seq`` (the step record's seq, else the begin's)."""
    assert main(["export", str(run), "--otlp", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    by: dict[str, dict[str, Any]] = {}
    for s in spans:
        seq = next((a["value"]["intValue"] for a in s["attributes"] if a["key"] == "agent_supervisor.seq"), None)
        key = f"{s['name']}#{seq}" if seq is not None else s["name"]
        assert key not in by, key
        by[key] = s
    return by


@pytest.mark.timeout(10)
def test_a_nested_steps_span_is_a_child_of_its_enclosing_steps(tmp_path: Path) -> None:
    run = sample(tmp_path / "run")
    by = _export(run, tmp_path / "t.json")
    attempt = by["attempt 1 started"]["spanId"]  # the attempt's steps' parent, sent at its spawn
    assert by["attempt 1 started"]["parentSpanId"] == by["attempt 1"]["spanId"]
    parent = {k: s.get("parentSpanId") for k, s in by.items()}
    assert parent["outer#8"] == attempt and parent["flat#10"] == attempt
    assert parent["inner#5"] == by["outer#8"]["spanId"] and parent["inner#7"] == by["outer#8"]["spanId"]
    assert parent["deep#4"] == by["inner#5"]["spanId"]
    for child, up in (("inner#5", "outer#8"), ("deep#4", "inner#5"), ("inner#7", "outer#8")):  # inside in time
        c, p = by[child], by[up]
        assert int(p["startTimeUnixNano"]) <= int(c["startTimeUnixNano"]) <= int(c["endTimeUnixNano"]) <= int(p["endTimeUnixNano"])
    # the ids are the ones a run without nesting gets (from the step record's seq): exporting twice agrees
    assert by["outer#8"]["spanId"] == span_id(run.name, "step:8")


def _spans(run: Path, *, live: bool) -> dict[str, Any]:
    """The spans by ``name#seq``, from the files (``build_spans``) or fed record by record as the supervisor does."""
    if live:
        b = SpanBuilder(run.name, live=True)
        spans = [s for e in JournalReader(run).load() if isinstance(e, dict) for s in b.record(e)] + b.finish()
    else:
        spans = build_spans(run)[1]
    return {f"{s.name}#{s.attributes.get('agent_supervisor.seq')}": s for s in spans}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("live", [False, True], ids=["files", "live"])
def test_failed_interrupted_and_late_nested_steps_keep_their_parent(tmp_path: Path, live: bool) -> None:
    """A retried try and the try that succeeds, a child still running when its parent failed (a gather whose
    other task raised), and a parent and child a crash interrupted."""
    j = NestedJournal()
    j.start()
    outer = j.begin("outer", 1)  # seq 1
    j.begin("flaky", 2, outer)  # 2
    j.step("flaky", 2, parent=outer, error={"type": "E", "message": "retry"}, transient=True)  # 3
    j.step("flaky", 2, "ok", outer)  # 4
    j.begin("slow", 3, outer)  # 5
    j.step("outer", 1, error={"type": "E", "message": "a sibling raised"})  # 6: the parent fails first
    j.step("slow", 3, "late", outer)  # 7
    j.start(2)  # 8
    again = j.begin("outer", 1)  # 9
    j.begin("inner", 2, again)  # 10: the attempt dies here
    run = j.write(tmp_path / "run")
    by = _spans(run, live=live)
    assert by["flaky#3"].parent_id == by["outer#6"].span_id  # the failed try that is retried
    assert by["flaky#4"].parent_id == by["outer#6"].span_id
    assert by["slow#7"].parent_id == by["outer#6"].span_id
    assert by["inner#10"].parent_id == by["outer#9"].span_id == span_id(run.name, "step:9")
    assert by["outer#9"].parent_id == span_id(run.name, "attempt:2:started")
