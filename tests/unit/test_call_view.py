"""The call view's order and content (``views.call_view``): a model step's answer first, then usage, the
conversation with the history folded; a tool call's arguments, result and retries; another step's output, inputs,
bookkeeping last; the shapes the SDK and the three adapters record."""

from __future__ import annotations

from typing import Any

from supervisor.views.call_view import call_kind, conversation, looks_markdown, proxied_view, step_view

from ..tui.call_run import ANSWER, records


def _titles(view: Any) -> list[str]:
    return [s.title.split(" (")[0] for s in view.sections]


def _rec(step: str) -> dict[str, Any]:
    return next(r for r in records() if r.get("step") == step and "output" in r)


def test_a_model_step_opens_on_its_answer_then_usage_then_the_conversation() -> None:
    rec = _rec("model:plan")
    view = step_view(rec, cost=0.0042, priced=True)
    assert view.kind == "model"
    assert _titles(view) == ["answer", "tool calls", "usage", "conversation"]
    answer, tools, usage, chat = view.sections
    assert answer.value == ANSWER and answer.markdown
    assert tools.value == ['search({"q":"journal format"})  [call_a]', 'fetch({"url":"https://x.invalid/1"})  [call_b]']
    facts = dict(usage.value)
    assert facts["tokens"] == "1.2k in → 34 out" and facts["cost"] == "$0.0042" and facts["latency"] == "812ms"
    assert facts["model"] == "openai gpt-4o-mini"
    # 75 messages: everything up to the model's last answer is history (folded), the new user message is open
    assert len(chat.value) == 75 and chat.history == 74
    assert chat.value[-1].role == "user" and "NEWEST-MESSAGE" in chat.value[-1].text
    assert chat.value[2].text == '→ tool call search({"q":"part 0"})  [call_0]'
    assert chat.value[3].text == "← tool result [call_0]: result of part 0"
    # unpriced: said, not a wrong figure
    assert dict(step_view(rec).sections[2].value)["cost"].startswith("not priced yet")
    assert dict(step_view(rec, priced=True).sections[2].value)["cost"].startswith("unknown")


def test_a_tool_call_shows_arguments_result_and_its_earlier_failed_tries() -> None:
    recs = records()
    failed, ok = recs[3], recs[4]
    view = step_view(ok, retries=[failed])
    assert view.kind == "tool"
    assert _titles(view) == ["arguments", "result", "retries", "record"]
    assert view.sections[0].value == {"q": "journal format"}  # the SDK's {"kwargs": ...} unwrapped
    assert view.sections[2].value == [("#3", "attempt 1, 2026-11-29T10:00:03.000Z: TimeoutError: search timed out after 30s")]
    assert _titles(step_view(failed)) == ["arguments", "error", "record"]


def test_another_step_shows_output_then_inputs_then_bookkeeping_dimmed() -> None:
    view = step_view(records()[1])
    assert view.kind == "step" and _titles(view) == ["output", "inputs", "record"]
    book = view.sections[2]
    assert book.dim and {"inputs_hash", "key", "pos", "seq", "ts"} <= set(book.value)
    assert "output" not in book.value and "inputs" not in book.value
    assert view.sections[1].value == "plugins"  # the one argument, not {"args": [...]}


def test_model_calls_are_told_by_call_usage_or_a_conversation() -> None:
    assert call_kind({"call": {"kind": "model"}}) == "model"
    assert call_kind({"usage": [{"input_tokens": 1}]}) == "model"
    assert call_kind({"inputs": {"args": [[{"role": "user", "content": "hi"}]]}}) == "model"
    assert call_kind({"inputs": {"args": ["hi"]}, "output": "x"}) == "step"
    assert call_kind({"call": {"kind": "tool"}}) == "tool"
    assert conversation({"kwargs": {"body": {"messages": [{"role": "user", "content": "x"}]}}}) == [{"role": "user", "content": "x"}]


def test_the_adapters_shapes() -> None:
    # Pydantic AI: a ModelRequest in, a ModelResponse out
    pyd = {"call": {"kind": "model"}, "inputs": {"kwargs": {"request": {"kind": "request", "parts": [
        {"part_kind": "user-prompt", "content": "Write a report."}]}}},
           "output": {"kind": "response", "parts": [{"part_kind": "text", "content": "Let me search."},
                                                     {"part_kind": "tool-call", "tool_name": "search", "args": {"q": "x"},
                                                      "tool_call_id": "t1"}]}}
    v = step_view(pyd)
    assert v.sections[0].value == "Let me search." and v.sections[1].value == ['search({"q":"x"})  [t1]']
    assert [(t.role, t.text) for t in v.sections[-1].value] == [("user", "Write a report.")]
    # LangGraph: a ChatResult of LangChain message dicts; the inputs keep the last message of N
    lg = {"call": {"kind": "model", "node": "agent", "superstep": 3},
          "inputs": {"args": [{"digest": "d", "messages": 4, "last": {"type": "tool", "data": {
              "content": "svc-0: 15 days", "tool_call_id": "c0", "type": "tool"}}}]},
          "output": {"generations": [{"message": {"type": "ai", "data": {"content": "Done.", "tool_calls": []}}}]}}
    v = step_view(lg)
    assert v.sections[0].value == "Done." and not v.sections[0].markdown
    assert v.sections[-1].title == "conversation (4 messages; the record keeps the last)"
    assert v.sections[-1].value[0].text == "← tool result [c0]: svc-0: 15 days"
    assert dict(v.sections[1].value)["where"] == "node agent, superstep 3"
    # OpenAI Agents: a ModelResponse of Responses items
    oa = {"call": {"kind": "model"}, "output": {"output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Answer: 42"}]}]}}
    assert step_view(oa).sections[0].value == "Answer: 42"
    # a LangChain tool message result: its content
    tool = {"call": {"kind": "tool"}, "inputs": {"args": [{"q": 1}]},
            "output": {"message": {"type": "tool", "data": {"content": "2 services"}}}}
    assert step_view(tool).sections[1].value == "2 services"


def test_a_proxied_call_puts_its_answer_first_and_cost_after_tokens() -> None:
    rec = {"kind": "step", "step": "llm:openai:gpt-4o-mini", "attempt": 1, "dur_ms": 5.0,
           "call": {"kind": "model", "via": "proxy", "provider": "openai", "model": "gpt-4o-mini", "api": "chat"},
           "usage": [{"model": "gpt-4o-mini", "provider": "openai", "input_tokens": 10, "output_tokens": 2}],
           "inputs": {"body": {"messages": [{"role": "user", "content": "hi"}]}},
           "output": {"status": 200, "body": {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}}}
    v = proxied_view(rec, [2], cost=0.5, priced=True)
    assert _titles(v) == ["answer", "usage", "conversation"]
    labels = [label for label, _ in v.sections[1].value]
    assert labels[:3] == ["status", "tokens", "cost"] and "served" in labels
    failed = {**rec, "output": None, "error": {"status": 429, "type": "HTTPError", "body": {"error": {
        "type": "rate_limit_error", "message": "slow down"}}}}
    failed.pop("output")
    v = proxied_view(failed)
    assert v.sections[0].form == "error" and v.sections[0].value == "rate_limit_error: slow down"


def test_markdown_is_told_from_plain_text() -> None:
    assert looks_markdown("# Title\n\ntext") and looks_markdown("- one\n- two") and looks_markdown("a **b** c")
    assert not looks_markdown("Done after 5 turns: svc-4 expires in 15 days.")
