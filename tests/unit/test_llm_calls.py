"""The proxied calls' file format: identities, blobs, SSE events, usage, the abandoned spans of a rollback."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from supervisor.core import llm_calls
from supervisor.core.journal_writer import JournalWriter
from supervisor.core.segments import count_lines

pytestmark = pytest.mark.timeout(30)

SYSTEM = {"role": "system", "content": "You are a careful agent. " * 10}


def test_identity_is_the_canonical_body_and_order_identity_ignores_it() -> None:
    a = llm_calls.identity("openai", "POST", "/chat/completions", {"model": "m", "messages": [1, 2]})
    b = llm_calls.identity("openai", "POST", "/chat/completions", {"messages": [1, 2], "model": "m"})
    c = llm_calls.identity("openai", "POST", "/chat/completions", {"messages": [1, 3], "model": "m"})
    assert a == b != c
    assert llm_calls.identity("anthropic", "POST", "/chat/completions", {"model": "m", "messages": [1, 2]}) != a
    o1 = llm_calls.order_identity("openai", "POST", "/chat/completions", "m")
    assert o1 == llm_calls.order_identity("openai", "POST", "/chat/completions", "m")
    assert o1 != llm_calls.order_identity("openai", "POST", "/chat/completions", "other")


def test_compact_stores_long_items_once_and_expand_restores_them() -> None:
    body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "hi"}], "tools": [{"name": "t" * 200}]}
    known: set[str] = set()
    blobs: dict[str, object] = {}
    small = llm_calls.compact(body, known, blobs)
    assert small["messages"][1] == {"role": "user", "content": "hi"}  # short: inline
    assert set(small["messages"][0]) == {"$blob"} and set(small["tools"]) == {"$blob"}
    assert len(blobs) == 2
    assert llm_calls.expand(small, blobs) == body
    known.update(blobs)
    again: dict[str, object] = {}
    assert llm_calls.compact(body, known, again) == small and again == {}  # defined once per file
    # a message that itself looks like a blob reference is always stored as a blob: never ambiguous
    tricky = {"messages": [{"$blob": "x"}]}
    b2: dict[str, object] = {}
    assert llm_calls.expand(llm_calls.compact(tricky, set(), b2), b2) == tricky


def test_sse_events_split_on_blank_lines_and_keep_the_rest() -> None:
    events, rest = llm_calls.sse_events(b'data: {"a":1}\n\nevent: x\r\ndata: 2\r\n\r\ndata: par')
    assert events == ['data: {"a":1}', "event: x\ndata: 2"] and rest == b"data: par"
    assert llm_calls.is_final_event("data: [DONE]")
    assert llm_calls.is_final_event('event: message_stop\ndata: {"type":"message_stop"}')
    assert llm_calls.is_final_event("event: response.completed\ndata: {}")
    assert not llm_calls.is_final_event('data: {"choices":[]}')


def test_usage_of_openai_anthropic_and_streams() -> None:
    chat = {"model": "gpt-x", "usage": {"prompt_tokens": 10, "completion_tokens": 4,
                                        "prompt_tokens_details": {"cached_tokens": 3},
                                        "completion_tokens_details": {"reasoning_tokens": 2}}}
    assert llm_calls.usage_of("openai", chat) == [{"model": "gpt-x", "provider": "openai", "input_tokens": 10,
                                                   "output_tokens": 4, "cached_tokens": 3, "reasoning_tokens": 2}]
    resp = {"model": "gpt-r", "usage": {"input_tokens": 7, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 0}}}
    assert llm_calls.usage_of("openai", resp)[0]["input_tokens"] == 7  # type: ignore[index]
    msg = {"model": "claude", "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 100,
                                        "cache_creation_input_tokens": 20}}
    u = llm_calls.usage_of("anthropic", msg)[0]  # type: ignore[index]
    assert (u["input_tokens"], u["cached_tokens"], u["cache_write_tokens"]) == (125, 100, 20)
    stream = [f"data: {orjson.dumps({'model': 'gpt-s', 'choices': [{'delta': {'content': 'x'}}]}).decode()}",
              f"data: {orjson.dumps({'model': 'gpt-s', 'choices': [], 'usage': {'prompt_tokens': 9, 'completion_tokens': 1}}).decode()}",
              "data: [DONE]"]
    assert llm_calls.usage_of("openai", None, stream)[0]["input_tokens"] == 9  # type: ignore[index]
    a_stream = [
        'event: message_start\ndata: {"type":"message_start","message":{"model":"claude","usage":{"input_tokens":8,"output_tokens":1}}}',
        'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":6}}',
        'event: message_stop\ndata: {"type":"message_stop"}',
    ]
    u = llm_calls.usage_of("anthropic", None, a_stream)[0]  # type: ignore[index]
    assert (u["model"], u["input_tokens"], u["output_tokens"]) == ("claude", 8, 6)
    assert llm_calls.usage_of("openai", {"choices": []}) is None  # says nothing: no guessed figure


def test_read_calls_expands_blobs_across_lines(tmp_path: Path) -> None:
    with JournalWriter(tmp_path, file=llm_calls.CALLS, count=count_lines) as w:
        known: set[str] = set()
        for i in range(3):
            blobs: dict[str, object] = {}
            body = llm_calls.compact({"model": "m", "messages": [SYSTEM, {"role": "user", "content": str(i)}]}, known, blobs)
            rec = {"kind": "step", "step": "llm:openai:m", "inputs": {"method": "POST", "path": "/x", "body": body},
                   "output": {"status": 200, "body": {"i": i}}}
            if blobs:
                rec["blobs"] = blobs
            w.append(rec)
            known.update(blobs)
        w.append({"kind": "note", "message": llm_calls.SERVED_NOTE, "served": 0})
    raw = (tmp_path / llm_calls.CALLS).read_bytes()
    assert raw.count(b"careful agent") == 10  # the system message is written once, not three times
    recs = llm_calls.read_calls(tmp_path)
    assert [r["seq"] for r in recs] == [0, 1, 2, 3] and all(r["source"] == "llm" for r in recs)
    assert all(r["inputs"]["body"]["messages"][0] == SYSTEM for r in recs[:3])
    assert len(llm_calls.step_calls(tmp_path)) == 3
    assert llm_calls.known_blobs(tmp_path) == known
    assert (tmp_path / "llm.lock").exists() and not (tmp_path / "journal.lock").exists()


def test_abandoned_spans_come_from_the_journals_rollbacks(tmp_path: Path) -> None:
    lines = [
        {"kind": "step", "seq": 0, "step": "a", "pos": 0, "output": 1, "ts": "2026-12-01T10:00:00.000Z"},
        {"kind": "checkpoint", "seq": 1, "name": "cp", "ts": "2026-12-01T10:00:01.000Z"},
        {"kind": "step", "seq": 2, "step": "b", "pos": 1, "output": 2, "ts": "2026-12-01T10:00:02.000Z"},
        {"kind": "rollback", "seq": 3, "to": "cp", "checkpoint": "cp", "ts": "2026-12-01T10:00:03.000Z"},
    ]
    (tmp_path / "journal.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    spans = llm_calls.abandoned_spans(tmp_path)
    assert spans == [("2026-12-01T10:00:01.000Z", "2026-12-01T10:00:03.000Z")]
    assert llm_calls.in_spans("2026-12-01T10:00:02.500Z", spans)
    assert not llm_calls.in_spans("2026-12-01T10:00:00.500Z", spans)
    assert not llm_calls.in_spans("2026-12-01T10:00:04.000Z", spans)


def test_merge_by_ts_keeps_each_files_order() -> None:
    j = [{"ts": "t1", "n": "j1"}, {"ts": "t3", "n": "j3"}]
    c = [{"ts": "t2", "n": "c2"}, {"ts": "t3", "n": "c3"}]
    assert [r["n"] for r in llm_calls.merge_by_ts(j, c)] == ["j1", "c2", "j3", "c3"]


def test_a_conversation_writes_each_message_once(tmp_path: Path) -> None:
    """Each request resends the conversation: its known prefix is a reference to the earlier record."""
    c = llm_calls.Compactor()
    convo: list[dict[str, object]] = [SYSTEM]
    with JournalWriter(tmp_path, file=llm_calls.CALLS, count=count_lines) as w:
        for i in range(30):
            convo.append({"role": "user", "content": f"question {i} " + "x" * 300})
            blobs: dict[str, object] = {}
            heads: dict[str, str] = {}
            body = c.compact({"model": "m", "messages": list(convo)}, blobs, heads)
            rec: dict[str, object] = {"kind": "step", "step": "llm:openai:m", "output": {"status": 200},
                                      "inputs": {"method": "POST", "path": "/x", "body": body}}
            if blobs:
                rec["blobs"] = blobs
            w.append(rec)
            c.written(rec["seq"], heads, blobs)  # type: ignore[arg-type]
            convo.append({"role": "assistant", "content": f"answer {i} " + "y" * 300})
    raw = (tmp_path / llm_calls.CALLS).read_bytes()
    assert raw.count(b"question 3 ") == 1 and raw.count(b"answer 3 ") == 1
    assert len(raw) < 2 * sum(len(orjson.dumps(m)) for m in convo)
    recs = llm_calls.step_calls(tmp_path)
    assert [len(r["inputs"]["body"]["messages"]) for r in recs] == [2 + 2 * i for i in range(30)]
    assert recs[-1]["inputs"]["body"]["messages"] == convo[:-1]
    again = llm_calls.Compactor.load(tmp_path)  # a proxy started again goes on referring to what is written
    assert again.compact({"model": "m", "messages": convo}, {}, {})["messages"]["$prefix"] == 29
