"""Model-call content in the GenAI semantic conventions' form (``export --content``): messages, system
instructions, finish reasons and the response id, for a receiver's LLM view (prompt and answer).

A proxied call (``llm.jsonl``) is read by the one parser of its three API shapes
(:mod:`supervisor.views.call_text`), an adapter's model step by the record pane's parser of the adapters'
shapes (:mod:`supervisor.views.call_view`: Pydantic AI, LangChain, OpenAI Agents): turns, each a role and its
text, tool calls and results written out as lines of it. The values are JSON text (span attributes hold no
nested objects); the caller redacts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..views.call_text import Turn, answer_turns, request_turns
from ..views.call_view import answer_of, conversation, message_turns

__all__ = ["call_content", "call_response", "step_content", "step_response"]

Messages = list[dict[str, Any]]


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def _from_turns(turns: list[Turn]) -> tuple[list[dict[str, Any]], Messages]:
    """System instructions (parts) and messages of turns (a ``tools`` turn, the request's tool names, left out)."""
    system: list[dict[str, Any]] = []
    messages: Messages = []
    for t in turns:
        if t.role == "system" or t.role == "developer":
            system.append(_text(t.text))
        elif t.role == "reasoning":
            messages.append({"role": "assistant", "parts": [{"type": "reasoning", "content": t.text}]})
        elif t.role != "tools":
            role = t.role if t.role in ("user", "assistant", "tool") else "assistant" if t.role in (
                "answer", "error") else "user"
            messages.append({"role": role, "parts": [_text(t.text)]})
    return system, messages


def call_content(rec: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Messages, Messages]:
    """A proxied call's ``(system instructions, input messages, output messages)``."""
    system, inputs = _from_turns(request_turns(rec))
    _, outputs = _from_turns(answer_turns(rec))
    reasons = call_response(rec)[1]
    for m, r in zip(outputs, reasons, strict=False):
        m["finish_reason"] = r
    return system, inputs, outputs


def call_response(rec: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """A proxied call's response id and finish reasons, from its answer's body or its stream's events."""
    from ..core.llm_calls import event_data

    out = rec.get("output")
    if not isinstance(out, dict):
        return None, []
    events = out.get("events")
    bodies = [event_data(e) for e in events if isinstance(e, str)] if isinstance(events, list) else [out.get("body")]
    rid: str | None = None
    reasons: list[str] = []
    for b in bodies:
        if isinstance(b, dict):
            got, more = _body_response(b)
            rid = rid or got
            reasons += more
    return rid, reasons


def _body_response(b: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The id and finish reasons of one answer body or stream event (Chat Completions, Responses, Anthropic)."""
    for inner in ("response", "message"):  # Responses' response.completed, Anthropic's message_start
        if isinstance(b.get(inner), dict):
            b = b[inner]
    reasons = [c["finish_reason"] for c in b.get("choices") or () if isinstance(c, dict)
               and isinstance(c.get("finish_reason"), str)]
    delta = b.get("delta")
    stop = b.get("stop_reason") or (delta.get("stop_reason") if isinstance(delta, dict) else None)
    if isinstance(stop, str):
        reasons.append(stop)
    if b.get("object") == "response" and isinstance(b.get("status"), str):
        reasons.append(b["status"])
    return (b["id"] if isinstance(b.get("id"), str) else None), reasons


# ------------------------------------------------------------------ an adapter's step


def step_response(rec: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """A model step's response id and finish reasons, where its output records them (Pydantic AI's response)."""
    answer = rec.get("output")
    if not isinstance(answer, dict):
        return None, []
    rid, reason = answer.get("provider_response_id"), answer.get("finish_reason")
    return (rid if isinstance(rid, str) else None), ([reason] if isinstance(reason, str) else [])


def step_content(rec: Mapping[str, Any], *, output: bool) -> tuple[list[dict[str, Any]], Messages, Messages]:
    """An adapter's model step's ``(system instructions, input messages, output messages)`` (``output``: its
    answer too), by the record pane's parser of the adapters' shapes (:mod:`supervisor.views.call_view`); inputs
    it does not read as messages are one user message of their JSON."""
    msgs = conversation(rec.get("inputs"))
    if msgs is not None:
        system, inputs = _from_turns([t for m in msgs for t in message_turns(m)])
    else:
        system, inputs = [], ([{"role": "user", "parts": [_text(_json(rec["inputs"]))]}] if "inputs" in rec else [])
    outputs: Messages = []
    if output and "output" in rec:
        _, outputs = _from_turns(answer_of(rec["output"]))
        for m, r in zip(outputs, step_response(rec)[1], strict=False):
            m["finish_reason"] = r
    return system, inputs, outputs


def _json(v: Any) -> str:
    import orjson

    return v if isinstance(v, str) else orjson.dumps(v, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
