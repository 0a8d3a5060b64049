"""Scoped search and filter terms (``output:``, ``error:``, ``inputs:``, ``step:``, ``model:``, ``attempt:``), and
plain words that do not drown in model calls' conversations; the row texts that say what a record is."""

from __future__ import annotations

import orjson
import pytest

from supervisor.views.filters import filter_lines, parse_filter
from supervisor.views.row_text import answer_text, plain, telling_arg


def line(**rec: object) -> bytes:
    return orjson.dumps(rec)


HISTORY = {"kwargs": {"messages": [{"role": "user", "content": "run word_count on notes.md"}]}}
MODEL = {"kind": "model", "model": "gpt-4o", "provider": "openai"}
ASKS = line(kind="step", step="model:gpt-4o", pos=0, attempt=1, inputs=HISTORY, call=MODEL,
            output={"content": "Sure.", "role": "assistant"}, usage=[{"model": "gpt-4o", "input_tokens": 9}])
CALLS = line(kind="step", step="model:gpt-4o", pos=1, attempt=2, inputs=HISTORY, call=MODEL,
             output={"content": "", "tool_calls": [{"name": "word_count", "args": {"path": "notes.md"}}]})
TOOL = line(kind="step", step="tool:word_count", pos=2, attempt=2, inputs={"kwargs": {"path": "notes.md"}},
            call={"kind": "tool", "tool": "word_count"}, output=42)
FAILED = line(kind="step", step="tool:fetch", pos=3, attempt=1, inputs={"args": ["https://example.invalid/a"]},
              error={"type": "TimeoutError", "message": "timed out after 30s"})
CLAUDE = b'{"step": "llm", "call": {"kind": "model", "model": "claude-sonnet-4-5"}, "inputs": "word_count", "output": "ok"}'
LINES = [ASKS, CALLS, TOOL, FAILED, CLAUDE]


def passing(text: str) -> list[int]:
    f = parse_filter(text)
    by_line = [k for k, x in enumerate(LINES) if f.match_line(x)]
    got: list[int] = []  # the C-speed path agrees with the line-by-line test
    filter_lines(f, b"\n".join(LINES * 3) + b"\n", 0, got)
    assert got == [k + n * len(LINES) for n in range(3) for k in by_line], text
    return by_line


def test_a_plain_word_skips_the_conversation_of_model_calls() -> None:
    """``word_count`` is in every model call's history: a plain word finds the call that asked for the tool and
    the tool's own step, not the calls that only carry the conversation; ``inputs:`` searches it."""
    assert passing("word_count") == [1, 2]
    assert passing("inputs:word_count") == [0, 1, 4]
    assert passing("notes.md") == [1, 2]  # a tool's arguments are plain text: searched
    assert passing("!word_count") == [0, 3, 4]


@pytest.mark.parametrize(("query", "rows"), [
    ("output:word_count", [1]), ("output:42", [2]), ("error:timed", [3]), ("error:Timed", []), ("error:", [3]),
    ("step:tool:*", [2, 3]), ("model:GPT-4O", [0, 1]), ("model:claude", [4]), ("!model:gpt", [2, 3, 4]),
    ("attempt:2", [1, 2]), ("attempt:1,2", [0, 1, 2, 3]), ("attempt:1 step:tool:*", [3]),
    ("inputs:example.invalid", [3]), ("kind:step output:Sure", [0]),
])
def test_scoped_terms(query: str, rows: list[int]) -> None:
    assert passing(query) == rows


def test_scoped_terms_on_supervisor_rows_and_their_errors() -> None:
    crash = {"event": "exit", "attempt": 2, "code": 1, "stderr_tail": "Traceback: boom"}
    f = parse_filter
    assert f("attempt:2").match_event(crash) and not f("attempt:1").match_event(crash)
    assert f("error:boom").match_event(crash) and not f("error:boom").match_event({"event": "spawn", "x": "boom"})
    assert not f("output:boom").match_event(crash) and not f("model:x").match_event(crash)
    for bad, says in (("attempt:x", "not an attempt number"), ("output:", "output: needs a text"),
                      ("  ", "nothing to look for")):
        with pytest.raises(ValueError, match=says):
            parse_filter(bad)
    assert parse_filter("output:Found").describe() == "output has 'Found'"
    assert parse_filter("http://x").terms[0].what == "text"  # a colon that names no scope is text


def test_answers_and_values_read_without_json_punctuation() -> None:
    assert answer_text({"content": "The test suite passes.", "role": "assistant"}) == "The test suite passes."
    lc = {"generations": [{"message": {"type": "ai", "data": {"content": "", "tool_calls": [
        {"name": "search", "args": {"query": "durable agents"}, "id": "c1"}],
        "additional_kwargs": {"tool_calls": [{"function": {"name": "search", "arguments": "{}"}}]}}}}]}
    assert answer_text(lc) == "→ search(query=durable agents)"  # LangChain's, its duplicate in additional_kwargs skipped
    pyd = {"parts": [{"part_kind": "text", "content": "Hello"}, {"part_kind": "tool-call", "tool_name": "fetch",
                                                                  "args": {"url": "https://a"}}], "model_name": "m"}
    assert answer_text(pyd) == "Hello → fetch(url=https://a)"
    chat = {"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}}]}
    assert answer_text(chat) == "→ f(x=1)"
    assert answer_text({"output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}]}) == "Hi"
    assert answer_text({"content": [{"type": "text", "text": "A"}, {"type": "tool_use", "name": "g", "input": {}}]}) == "A → g()"
    assert plain([{"title": "Durable execution", "url": "https://x"}]) == "title: Durable execution, url: https://x"
    assert plain({"n": 3, "tags": ["a", "b"], "ok": True}) == "n: 3, tags: [a, b], ok: true"
    assert plain(None) == "" and plain("line\nnext") == "line ⏎ next"


def test_the_telling_argument_of_a_tool_call() -> None:
    assert telling_arg({"kwargs": {"query": "durable agents"}}) == "durable agents"
    assert telling_arg({"args": ["x" * 500, "https://example.invalid/a"]}) == "https://example.invalid/a"  # a body: next
    assert telling_arg({"args": [3], "kwargs": {"path": "  notes.md\n"}}) == "notes.md"
    assert telling_arg({"args": []}) == "" and telling_arg(None) == ""
