"""What real receivers need of the OTLP export (issue 29): ids from run.json's uid, the live root's final
status, abandoned marks on the first copy, one resource, agent spans, GenAI content and provider names, the
protobuf encoding, ``log --json``'s step cost. In-process, on hand-written run directories and the samples."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from supervisor import __version__
from supervisor.cli.main import main
from supervisor.core import rundir
from supervisor.core.events import read_events
from supervisor.core.journal_reader import JournalReader
from supervisor.export.otlp import (
    Span,
    SpanBuilder,
    attempt_span_context,
    build_spans,
    export_request,
    resource_attributes,
    span_id,
    trace_id,
)
from supervisor.export.otlp_proto import encode_request
from supervisor.export.pricing import step_cost
from supervisor.supervise import otlp_live
from supervisor.supervise.otlp_live import OtlpLive, _Hold

from ..conftest import ROOT

SAMPLES = ROOT / "sample_runs" / "runs"
TS = "2026-12-01T10:00:0{}.000Z".format


def _run(path: Path, uid: str | None, *records: dict[str, Any], status: str = "succeeded") -> Path:
    """A run directory named ``path.name`` with run.json (``uid``) and a journal of ``records`` after a start."""
    path.mkdir(parents=True)
    meta = {"id": path.name, "created": TS(0), "format": rundir.FORMAT, "status": status,
            "command": ["python", "agent.py"], **({"uid": uid} if uid else {})}
    (path / "run.json").write_bytes(orjson.dumps(meta))
    lines = [{"kind": "start", "attempt": 1, "seq": 0, "ts": TS(0)}, *records]
    (path / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    return path


def _model_step(seq: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "step", "step": "model:gpt-4o", "seq": seq, "attempt": 1, "ts": TS(seq),
            "call": {"kind": "model", "model": "gpt-4o", "provider": "openai"},
            "usage": [{"input_tokens": 1000, "output_tokens": 100}], **extra}


def test_two_runs_of_one_name_never_share_ids_and_a_run_without_uid_keeps_its_old_ones(tmp_path: Path) -> None:
    a = _run(tmp_path / "a" / "agent", "11" * 16, _model_step(1))
    b = _run(tmp_path / "b" / "agent", "22" * 16, _model_step(1))
    (ra, sa), (rb, sb) = build_spans(a), build_spans(b)
    assert ra == rb == "agent"
    assert {s.trace_id for s in sa}.isdisjoint({s.trace_id for s in sb})
    assert {s.span_id for s in sa}.isdisjoint({s.span_id for s in sb})
    assert [s.span_id for s in build_spans(a)[1]] == [s.span_id for s in sa]  # re-export: the same ids
    old = _run(tmp_path / "c" / "agent", None, _model_step(1))
    assert {s.trace_id for s in build_spans(old)[1]} == {trace_id("agent")}  # as before uids
    # the attempt's context for TRACEPARENT: the span its steps hang under, as emitted
    tid, sid = attempt_span_context(a, 1)
    started = next(s for s in sa if s.name == "attempt 1 started")
    assert (tid, sid) == (started.trace_id, started.span_id)
    assert next(s for s in sa if s.name == "chat gpt-4o").parent_id == sid


def _feed_live(run: Path) -> list[Span]:
    """The spans the live exporter sends for ``run`` (records and events in time order, as they happen), each
    as its first copy."""
    live = OtlpLive(run, run.name, None)
    live._hold = _Hold()
    b = SpanBuilder(run.name, rundir.read_run_json(run), price=step_cost, live=True)
    items: list[tuple[str, int, Any]] = [(str(r.get("ts")), 0, ("j", [r])) for r in JournalReader(run).load()
                                         if isinstance(r, dict)]
    items += [(str(e.get("ts")), 1, ("e", e)) for e in read_events(run)]
    out: list[Span] = []
    for _, _, item in sorted(items, key=lambda t: (t[0], t[1])):
        out += live._spans_of(b, item)
    return out + live._spans_of(b, otlp_live._STOP)


def test_live_spans_of_an_abandoned_branch_are_marked_on_their_first_copy(tmp_path: Path) -> None:
    run = tmp_path / "rolled-back"
    shutil.copytree(SAMPLES / "rolled-back", run)
    live = _feed_live(run)
    assert len({s.span_id for s in live}) == len(live)  # each span once
    want = {s.span_id: s for s in build_spans(run)[1]}
    assert {s.span_id for s in live} == set(want)
    marked = {s.span_id for s in live if s.attributes.get("agent_supervisor.abandoned")}
    assert marked == {k for k, s in want.items() if s.attributes.get("agent_supervisor.abandoned")}
    assert len(marked) == 3  # summarize failed in attempts 1, 2 and 3, then the rollback to research-done
    root = live[-1]
    assert root.parent_id is None and root.status_code == 1  # OK: run.json says succeeded


def test_the_live_root_waits_for_the_final_status(tmp_path: Path) -> None:
    run = tmp_path / "clean"
    shutil.copytree(SAMPLES / "clean", run)
    meta = rundir.read_run_json(run)
    (run / "run.json").write_bytes(orjson.dumps({**meta, "status": "running"}))
    assert not [s for s in _feed_live(run) if s.parent_id is None]  # never a "running" root
    (run / "run.json").write_bytes(orjson.dumps({**meta, "status": "failed", "reason": "gave up"}))
    (root,) = [s for s in _feed_live(run) if s.parent_id is None]
    assert root.attributes["agent_supervisor.run.status"] == "failed"
    assert (root.status_code, root.status_message) == (2, "gave up")


def test_one_resource_for_the_file_and_the_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "openinference.project.name=my%20agents,team=a,bad")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "research")
    attrs = resource_attributes("r1")
    assert attrs == {"openinference.project.name": "my agents", "team": "a", "service.name": "research",
                     "agent_supervisor.run.id": "r1"}
    doc = export_request("r1", [])
    file_res = {a["key"]: a["value"]["stringValue"] for a in doc["resourceSpans"][0]["resource"]["attributes"]}
    req = ExportTraceServiceRequest.FromString(encode_request(attrs, ("agent-supervisor", "1"), []))
    http_res = {kv.key: kv.value.string_value for kv in req.resource_spans[0].resource.attributes}
    assert file_res == http_res == attrs


def test_our_protobuf_is_the_sdks(tmp_path: Path) -> None:
    """The live path encodes spans itself (no SDK objects): the bytes decode to what the SDK's encoder makes of
    the same spans (events, errors, lists, floats, negative ints, unicode)."""
    from supervisor.export.otlp_http import OtlpSender

    run = _run(tmp_path / "r", "33" * 16, _model_step(1, output="héllo ✓"),
               {"kind": "step", "step": "tool:x", "seq": 2, "attempt": 1, "ts": TS(2), "output": -5,
                "call": {"kind": "tool", "tool": "x", "call_id": "c1"}, "error": {"type": "E", "message": "no"}},
               {"kind": "checkpoint", "name": "cp", "seq": 3, "ts": TS(3)})
    _, spans = build_spans(run, content=True, price=step_cost)
    spans[0].attributes.update({"neg": -7, "f": 0.25, "l": ["a", "b"]})
    sender = OtlpSender("r", "http://127.0.0.1:9")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    sdk = MessageToDict(encode_spans([sender._readable(s) for s in spans]))
    ours = MessageToDict(ExportTraceServiceRequest.FromString(
        encode_request(sender._attrs, ("agent-supervisor", __version__), spans)))
    assert ours == sdk


def test_agent_spans_genai_content_and_provider_names(tmp_path: Path) -> None:
    pyd_in = {"kwargs": {"request": {"kind": "request", "instructions": "Be brief.",
                                     "parts": [{"part_kind": "user-prompt", "content": "Write a report."}]}}}
    pyd_out = {"kind": "response", "parts": [{"part_kind": "text", "content": "Done."}],
               "finish_reason": "stop", "provider_response_id": "resp-1"}
    run = _run(tmp_path / "r", "44" * 16,
               {**_model_step(1, inputs=pyd_in, output=pyd_out), "call": {"kind": "model", "model": "gemini-2.5-pro",
                                                                          "provider": "google-gla"},
                "usage": [{"input_tokens": 10, "output_tokens": 2}]},
               {**_model_step(2), "call": {"kind": "model", "model": "openai:gpt-4o", "provider": "function"},
                "usage": [{"model": "gpt-4o", "provider": "openai", "input_tokens": 5, "output_tokens": 1}]})
    spans = build_spans(run, content=True)[1]
    gem = next(s for s in spans if s.name == "chat gemini-2.5-pro").attributes
    assert gem["gen_ai.provider.name"] == "gcp.gemini"
    assert gem["gen_ai.response.id"] == "resp-1" and gem["gen_ai.response.finish_reasons"] == ["stop"]
    assert orjson.loads(gem["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    assert orjson.loads(gem["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Write a report."}]}]
    assert orjson.loads(gem["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Done."}], "finish_reason": "stop"}]
    fn = next(s for s in spans if s.name == "chat openai:gpt-4o").attributes
    assert fn["gen_ai.provider.name"] == "openai"  # as its usage says (a FunctionModel named like gpt-4o)
    root = spans[-1].attributes
    assert root["gen_ai.operation.name"] == "invoke_workflow" and root["gen_ai.agent.name"] == "agent"
    assert root["session.id"] == root["gen_ai.conversation.id"] == "44" * 16
    assert "gen_ai.usage.input_tokens" not in root and root["gen_ai.aggregated_usage.input_tokens"] == 15
    attempt = next(s for s in spans if s.name == "attempt 1").attributes
    assert attempt["gen_ai.operation.name"] == "invoke_agent" and attempt["session.id"] == "44" * 16
    assert not any("gen_ai.input.messages" in s.attributes for s in build_spans(run)[1])  # only with --content


def test_a_proxied_calls_content_in_genai_form() -> None:
    rec = {"kind": "step", "seq": 0, "ts": TS(1), "attempt": 1,
           "call": {"kind": "model", "api": "messages", "provider": "anthropic", "model": "claude-sonnet-4-5"},
           "inputs": {"body": {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}},
           "output": {"status": 200, "body": {"id": "msg_1", "type": "message", "role": "assistant",
                                              "content": [{"type": "text", "text": "hello"}],
                                              "stop_reason": "end_turn"}}}
    b = SpanBuilder("r", {"uid": "55" * 16}, content=True)
    (s,) = b.call(rec)
    a = s.attributes
    assert a["gen_ai.response.id"] == "msg_1" and a["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert orjson.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    assert orjson.loads(a["gen_ai.input.messages"]) == [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    assert orjson.loads(a["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "hello"}], "finish_reason": "end_turn"}]
    # a streamed Chat Completions answer: its chunks' id and last finish reason
    chunks = [{"id": "c-1", "choices": [{"delta": {"content": "he"}, "finish_reason": None}]},
              {"id": "c-1", "choices": [{"delta": {"content": "llo"}, "finish_reason": "stop"}]}]
    stream = {**rec, "seq": 1, "call": {"kind": "model", "api": "chat", "provider": "openai", "model": "gpt-4o"},
              "output": {"status": 200, "events": [f"data: {orjson.dumps(c).decode()}" for c in chunks] + ["data: [DONE]"]}}
    (s,) = b.call(stream)
    assert s.attributes["gen_ai.response.id"] == "c-1" and s.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert orjson.loads(s.attributes["gen_ai.output.messages"])[0]["parts"] == [{"type": "text", "content": "hello"}]


def test_log_json_carries_each_steps_cost(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    run = _run(tmp_path / "r", "66" * 16, _model_step(1), {"kind": "step", "step": "plain", "seq": 2, "ts": TS(2)})
    capsysbinary.readouterr()
    assert main(["log", "--json", str(run)]) == 0
    lines = [orjson.loads(x) for x in capsysbinary.readouterr().out.splitlines() if x.strip()]
    by = {x.get("step"): x for x in lines}
    assert by["model:gpt-4o"]["cost_usd"] == pytest.approx(step_cost(_model_step(1)))
    assert by["model:gpt-4o"]["cost_usd"] == pytest.approx((1000 * 2.5 + 100 * 10.0) / 1e6)
    assert "cost_usd" not in by["plain"]


def test_the_attempts_span_ids_are_the_documented_ones(tmp_path: Path) -> None:
    run = _run(tmp_path / "r", "77" * 16, _model_step(1))
    spans = build_spans(run)[1]
    key = "uid:" + "77" * 16
    assert next(s for s in spans if s.name == "attempt 1").span_id == span_id(key, "attempt:1")
    assert next(s for s in spans if s.name == "run r").span_id == span_id(key, "run")
