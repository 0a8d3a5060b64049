"""The views part of the proxy's calls (no app): the messages and answer text, placement by time, the follower."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.views.call_text import Turn, answer_turns, call_facts, request_turns
from supervisor.views.fmt import fmt_ms
from supervisor.views.scan import scan_journal
from supervisor.views.timeline import TimelineModel
from supervisor.views.timeline_calls import CallsFollower, place

from .llm_run import make_llm_run

pytestmark = pytest.mark.timeout(30)


def _ev(data: Any, event: str = "") -> str:
    head = f"event: {event}\n" if event else ""
    return head + "data: " + orjson.dumps(data).decode()


def _call(api: str, body: Any, provider: str = "openai", stream: bool = False, **out: Any) -> dict[str, Any]:
    return {"kind": "step", "seq": 0, "ts": "2026-12-02T10:00:00.000Z", "attempt": 1, "dur_ms": 12.5,
            "call": {"kind": "model", "via": "proxy", "provider": provider, "model": "m1", "api": api, "stream": stream},
            "inputs": {"method": "POST", "path": "/x", "headers": {}, "body": body}, **out}


# ------------------------------------------------------------------ OpenAI chat
def test_chat_messages_tool_calls_and_results_then_the_answer() -> None:
    rec = _call("chat", {"model": "m1", "tools": [{"type": "function", "function": {"name": "web_search"}}], "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "web_search", "arguments": "{\"q\":\"a\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"}]},
        output={"status": 200, "body": {"choices": [{"message": {"role": "assistant", "content": "Here it is."}}]}})
    assert request_turns(rec) == [
        Turn("tools", "web_search"), Turn("system", "be brief"), Turn("user", "look\n[image_url]"),
        Turn("assistant", '→ tool call web_search({"q":"a"})  [c1]'), Turn("tool", "← tool result [c1]: found")]
    assert answer_turns(rec) == [Turn("assistant", "Here it is.")]


def test_chat_stream_assembles_deltas_and_tool_call_arguments() -> None:
    events = [
        _ev({"choices": [{"delta": {"role": "assistant", "content": "Hel"}}]}),
        _ev({"choices": [{"delta": {"content": "lo"}}]}),
        _ev({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "t1", "function": {"name": "f", "arguments": "{\"a\""}}]}}]}),
        _ev({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]}),
        "data: [DONE]"]
    rec = _call("chat", {"messages": []}, stream=True, output={"status": 200, "events": events})
    assert answer_turns(rec) == [Turn("assistant", 'Hello\n→ tool call f({"a":1})  [t1]')]


# ------------------------------------------------------------------ OpenAI Responses
def test_responses_input_items_and_output() -> None:
    rec = _call("responses", {"instructions": "sys", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "function_call", "call_id": "f1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": "42"}]},
        output={"status": 200, "body": {"output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 42."}]}]}})
    assert request_turns(rec) == [Turn("system", "sys"), Turn("user", "q"),
                                  Turn("assistant", "→ tool call lookup({})  [f1]"), Turn("tool", "← tool result [f1]: 42")]
    assert answer_turns(rec) == [Turn("assistant", "It is 42.")]
    assert request_turns(_call("responses", {"input": "just text"})) == [Turn("user", "just text")]


def test_responses_stream_output_text_deltas() -> None:
    events = [_ev({"type": "response.output_text.delta", "delta": "Par"}, "response.output_text.delta"),
              _ev({"type": "response.output_text.delta", "delta": "is"}, "response.output_text.delta")]
    rec = _call("responses", {"input": "capital?"}, stream=True, output={"status": 200, "events": events})
    assert answer_turns(rec) == [Turn("assistant", "Paris")]
    done = _ev({"type": "response.completed", "response": {"output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Paris."}]}]}}, "response.completed")
    rec["output"]["events"] = [*events, done]
    assert answer_turns(rec) == [Turn("assistant", "Paris.")]  # the completed response, when the stream has it


# ------------------------------------------------------------------ Anthropic
def test_anthropic_blocks_and_answer() -> None:
    rec = _call("messages", {"system": [{"type": "text", "text": "sys"}], "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "calc", "input": {"x": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": "2"}]}]},
        provider="anthropic",
        output={"status": 200, "body": {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Two."}]}})
    assert request_turns(rec) == [Turn("system", "sys"), Turn("user", "hi"),
                                  Turn("assistant", '→ tool call calc({"x":1})  [u1]'),
                                  Turn("user", "← tool result [u1]: 2")]
    assert answer_turns(rec) == [Turn("assistant", "Two.")]


def test_anthropic_stream_text_and_tool_use_deltas() -> None:
    events = [
        _ev({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 3}}}, "message_start"),
        _ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
        _ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}, "content_block_delta"),
        _ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}}, "content_block_delta"),
        _ev({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "u2", "name": "calc"}}),
        _ev({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"x\": 2}"}}),
        _ev({"type": "message_stop"}, "message_stop")]
    rec = _call("messages", {"messages": []}, provider="anthropic", stream=True, output={"status": 200, "events": events})
    assert answer_turns(rec) == [Turn("assistant", 'Let me check.\n→ tool call calc({"x":2})  [u2]')]


def test_failed_call_error_body_and_facts() -> None:
    rec = _call("chat", {"messages": [{"role": "user", "content": "x"}]}, error={
        "type": "HTTPError", "status": 429, "message": "Too Many Requests",
        "body": {"error": {"type": "rate_limit_error", "message": "slow down"}}})
    assert answer_turns(rec) == [Turn("error", "rate_limit_error: slow down")]
    facts = dict(call_facts(rec))
    assert facts["status"] == "429 ✗ HTTPError: Too Many Requests"
    assert facts["streamed"] == "no" and facts["latency"] == fmt_ms(12.5)
    ok = _call("chat", {"messages": []}, output={"status": 200, "body": {}},
               usage=[{"model": "m1", "input_tokens": 10, "output_tokens": 5, "cached_tokens": 4}])
    facts = dict(call_facts(ok, served=[3, 2]))
    assert facts["tokens"] == "10 in → 5 out, 4 cached"
    assert facts["served"] == "from this record to attempts 2, 3"


# ------------------------------------------------------------------ placement
def test_place_matches_a_linear_search_from_any_hint() -> None:
    rng = random.Random(7)
    times = sorted(f"t{rng.randrange(100):03d}" for _ in range(300))
    for _ in range(400):
        ts = f"t{rng.randrange(-1, 101):03d}"
        want = next((i for i, t in enumerate(times) if t > ts), len(times))
        assert place(ts, len(times), times.__getitem__, 0, rng.randrange(0, 320)) == want
    # only the last records known (before the scan): a call earlier than them has no place yet
    known = dict(enumerate(times))
    assert place("t000", len(times), lambda s: known[s] if s >= 200 else None, 200) is None
    assert place(times[250], len(times), lambda s: known[s] if s >= 200 else None, 200) == times.index(times[250]) + times.count(times[250])


def test_follower_reads_committed_lines_only_with_blobs_from_earlier_lines(tmp_path: Path) -> None:
    f = CallsFollower(tmp_path)
    assert f.read(0, lambda: (lambda s: None, 0)) is None  # no llm.jsonl: nothing
    blob = {"role": "system", "content": "s" * 200}
    line0 = {"kind": "step", "seq": 0, "ts": "a", "inputs": {"body": {"messages": [{"$blob": "h1"}]}}, "blobs": {"h1": blob}}
    line1 = {"kind": "step", "seq": 1, "ts": "b", "inputs": {"body": {"messages": [{"$blob": "h1"}, {"role": "user", "content": "x"}]}}}
    note = {"kind": "note", "seq": 2, "message": "llm call served", "served": 0, "attempt": 2}
    path = tmp_path / "llm.jsonl"
    path.write_bytes(orjson.dumps(line0) + b"\n" + orjson.dumps(line1)[:10])  # the second line is being written
    got = f.read(0, lambda: (lambda s: None, 0))
    assert got is not None and [c.data["seq"] for c in got.rows] == [0]
    assert got.rows[0].data["inputs"]["body"]["messages"] == [blob] and got.rows[0].data["source"] == "llm"
    path.write_bytes(orjson.dumps(line0) + b"\n" + orjson.dumps(line1) + b"\n" + orjson.dumps(note) + b"\n")
    got = f.read(0, lambda: (lambda s: None, 0))
    assert got is not None and [c.data["seq"] for c in got.rows] == [1] and got.rows[0].order == 1
    assert got.rows[0].data["inputs"]["body"]["messages"][0] == blob  # defined by an earlier line
    assert got.served == {0: [2]}
    assert f.read(0, lambda: (lambda s: None, 0)) is None


def test_model_rows_interleave_calls_by_time_before_and_after_the_scan(tmp_path: Path) -> None:
    run = make_llm_run(tmp_path)
    m = TimelineModel(run)
    m.open()

    def rows() -> list[str]:
        out = []
        for r in range(m.rows):
            kind, i = m.row_item(r)
            if kind == "call":
                out.append(f"c{m.calls[i].data['seq']}")
            else:
                rec = m.record(i)
                assert isinstance(rec, dict)
                out.append(str(rec.get("step") or rec.get("kind")))
        return out

    want = ["start", "plan", "c0", "search:q1", "c1", "c2", "c4", "summarise"]
    assert rows() == want  # the first screen: placed among the tail's records
    assert m.served == {0: [2]}
    m.adopt(scan_journal(run))
    m.poll()
    assert rows() == want
    assert [m.row_of_call(k) for k in range(len(m.calls))] == [2, 4, 5, 6]
    assert m.error_event_rows() == [5]  # the 429: e and E go to it
    # appended while the model follows the file: a new row, at its time (after the last record)
    last_ts = m.record(m.count - 1)["ts"]  # type: ignore[index]
    with open(run / "llm.jsonl", "ab") as f:
        f.write(orjson.dumps({"kind": "step", "seq": 5, "ts": last_ts, "step": "llm:openai:gpt-4o-mini",
                              "call": {"kind": "model", "provider": "openai", "model": "gpt-4o-mini"},
                              "output": {"status": 200, "body": {}}}) + b"\n")
    _, changed = m.poll()
    assert changed and rows() == [*want, "c5"]
