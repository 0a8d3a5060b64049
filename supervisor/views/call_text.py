"""A proxied model call as a person reads it (no Textual): the request's messages one by one, then the answer.

The proxy records bodies as the provider's HTTP API has them (``llm.jsonl``, blobs expanded by
``core.llm_calls.read_calls``). This module turns the three shapes it knows into :class:`Turn` s:

- OpenAI Chat Completions: ``messages`` (``content`` a string or parts; ``tool_calls``; role ``tool`` with
  ``tool_call_id``), the answer's ``choices[0].message``, or a stream's ``choices[0].delta`` chunks;
- OpenAI Responses: ``instructions`` and ``input`` (a string, messages, ``function_call`` and
  ``function_call_output`` items), the answer's ``output`` items, or a stream's ``response.completed``
  (else its ``response.output_text.delta`` and ``response.function_call_arguments.delta`` events);
- Anthropic Messages: ``system`` and ``messages`` (``text``, ``tool_use``, ``tool_result`` blocks), the
  answer's ``content`` blocks, or a stream's ``content_block_start``/``content_block_delta`` events.

Anything else is shown as JSON, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..core.llm_calls import event_data

__all__ = ["Turn", "answer_turns", "call_facts", "request_turns"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One message: who (``system``, ``user``, ``assistant``, ``tool``...) and its text (tool calls and results
    written out as lines of it)."""

    role: str
    text: str


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=repr).decode()
    except TypeError:
        return repr(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _args(value: Any) -> str:
    """A tool call's arguments: a JSON string as the compact JSON it holds, a value as JSON."""
    if isinstance(value, str):
        try:
            return _json(orjson.loads(value)) if value.strip() else ""
        except orjson.JSONDecodeError:
            return value
    return _json(value)


def _tool_call(name: Any, args: Any, call_id: Any = None) -> str:
    ident = f"  [{call_id}]" if call_id else ""
    return f"→ tool call {name or '?'}({_args(args)}){ident}"


def _tool_result(content: Any, call_id: Any = None) -> str:
    ident = f" [{call_id}]" if call_id else ""
    return f"← tool result{ident}: {_content(content)}"


def _content(content: Any) -> str:
    """A message's content: a string, or the text of its parts (OpenAI and Anthropic parts; others as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part(p) for p in content)
    return _json(content)


def _part(p: Any) -> str:
    if not isinstance(p, dict):
        return _content(p)
    t = p.get("type")
    if t in ("text", "input_text", "output_text") and isinstance(p.get("text"), str):
        return str(p["text"])
    if t == "tool_use":
        return _tool_call(p.get("name"), p.get("input"), p.get("id"))
    if t == "tool_result":
        return _tool_result(p.get("content"), p.get("tool_use_id"))
    if t in ("image_url", "input_image", "image"):
        return f"[{t}]"
    if t == "refusal":
        return f"(refusal) {p.get('refusal', '')}"
    if t in ("thinking", "reasoning") and isinstance(p.get("thinking"), str):
        return f"(thinking) {p['thinking']}"
    return _json(p)


def _chat_message(m: Any) -> Turn:
    """An OpenAI chat message (request or answer) or an Anthropic message."""
    if not isinstance(m, dict):
        return Turn("?", _content(m))
    role = str(m.get("role") or "?")
    lines = []
    text = _content(m.get("content"))
    if role == "tool":
        lines.append(_tool_result(m.get("content"), m.get("tool_call_id")))
    elif text:
        lines.append(text)
    if isinstance(m.get("refusal"), str) and m["refusal"]:
        lines.append(f"(refusal) {m['refusal']}")
    for tc in m.get("tool_calls") or ():
        if isinstance(tc, dict):
            fn = _dict(tc.get("function"))
            lines.append(_tool_call(fn.get("name"), fn.get("arguments"), tc.get("id")))
    if isinstance(m.get("function_call"), dict):  # the legacy single function call
        fc = m["function_call"]
        lines.append(_tool_call(fc.get("name"), fc.get("arguments")))
    return Turn(role, "\n".join(lines))


def _response_item(item: Any) -> Turn:
    """An item of the Responses API's ``input`` or ``output``."""
    if not isinstance(item, dict):
        return Turn("user", _content(item))
    t = item.get("type")
    if t == "function_call":
        return Turn("assistant", _tool_call(item.get("name"), item.get("arguments"), item.get("call_id")))
    if t == "function_call_output":
        return Turn("tool", _tool_result(item.get("output"), item.get("call_id")))
    if t == "reasoning":
        summary = item.get("summary")
        text = "\n".join(_part(s) for s in summary) if isinstance(summary, list) else ""
        return Turn("reasoning", text or "(reasoning)")
    if "role" in item or t == "message":
        return Turn(str(item.get("role") or "assistant"), _content(item.get("content")))
    return Turn(str(t or "?"), _json(item))


def _body(rec: Mapping[str, Any], *where: str) -> Any:
    v: Any = rec
    for k in where:
        v = v.get(k) if isinstance(v, dict) else None
    return v


def _api(rec: Mapping[str, Any]) -> str:
    call = rec.get("call")
    api = call.get("api") if isinstance(call, dict) else None
    if api in ("chat", "responses", "messages"):
        return str(api)
    body = _body(rec, "inputs", "body")
    if isinstance(body, dict):
        if "input" in body or "instructions" in body:
            return "responses"
        if "messages" in body:
            provider = call.get("provider") if isinstance(call, dict) else None
            return "messages" if provider == "anthropic" or "system" in body else "chat"
    return "other"


def request_turns(rec: Mapping[str, Any]) -> list[Turn]:
    """The request's messages in order (the system prompt, instructions or tools' names first)."""
    body = _body(rec, "inputs", "body")
    if not isinstance(body, dict):
        return [Turn("request", _json(body))] if body is not None else []
    api = _api(rec)
    out: list[Turn] = []
    if api == "messages" and body.get("system") is not None:
        out.append(Turn("system", _content(body["system"])))
    if api == "responses":
        if body.get("instructions") is not None:
            out.append(Turn("system", _content(body["instructions"])))
        inp = body.get("input")
        if isinstance(inp, str):
            out.append(Turn("user", inp))
        elif isinstance(inp, list):
            out += [_response_item(i) for i in inp]
    elif isinstance(body.get("messages"), list):
        out += [_chat_message(m) for m in body["messages"]]
    elif api == "other":
        out.append(Turn("request", _json(body)))
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        out.insert(0, Turn("tools", ", ".join(_tool_name(t) for t in tools)))
    return out


def _tool_name(t: Any) -> str:
    if isinstance(t, dict):
        fn = t.get("function")
        if isinstance(fn, dict) and fn.get("name"):
            return str(fn["name"])
        if t.get("name"):
            return str(t["name"])
        return str(t.get("type") or "?")
    return str(t)


# --------------------------------------------------------------------------- answers
def answer_turns(rec: Mapping[str, Any]) -> list[Turn]:
    """What the model answered: the body's message(s), or the text a stream's events assemble into;
    a failed call's error body (``[]``: no answer at all)."""
    out = rec.get("output")
    err = rec.get("error")
    src = out if isinstance(out, dict) else err if isinstance(err, dict) else None
    if src is None:
        return []
    api = _api(rec)
    if isinstance(src.get("events"), list):
        return _stream_turns(api, src["events"])
    body = src.get("body")
    if body is None:
        return []
    if src is err:
        return [Turn("error", _error_text(body))]
    if isinstance(body, dict):
        if api == "chat" or isinstance(body.get("choices"), list):
            choices = body.get("choices")
            if isinstance(choices, list):
                return [_chat_message(c.get("message")) for c in choices if isinstance(c, dict)]
        if api == "responses" or isinstance(body.get("output"), list):
            items = body.get("output")
            if isinstance(items, list):
                return [_response_item(i) for i in items]
        if api == "messages" or body.get("type") == "message":
            return [_chat_message({"role": body.get("role", "assistant"), "content": body.get("content")})]
    return [Turn("answer", _json(body) if not _is_text(body) else str(body["$text"]))]


def _is_text(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get("$text"), str)


def _error_text(body: Any) -> str:
    if _is_text(body):
        return str(body["$text"])
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        e = body["error"]
        kind = e.get("type") or e.get("code")
        msg = e.get("message", "")
        return f"{kind}: {msg}" if kind else str(msg)
    return _json(body)


class _Tool:
    __slots__ = ("args", "id", "name")

    def __init__(self, name: Any = None, call_id: Any = None, args: str = "") -> None:
        self.name = name
        self.id = call_id
        self.args = args


def _stream_turns(api: str, events: Iterable[Any]) -> list[Turn]:
    """The answer a stream's events assemble into: text deltas concatenated, tool calls with their arguments."""
    text: list[str] = []
    tools: dict[Any, _Tool] = {}
    completed: Any = None
    for block in events:
        d = event_data(block) if isinstance(block, str) else None
        if not isinstance(d, dict):
            continue
        t = d.get("type")
        if isinstance(d.get("choices"), list):  # OpenAI chat chunks
            for c in d["choices"]:
                delta = c.get("delta") if isinstance(c, dict) else None
                if not isinstance(delta, dict):
                    continue
                if isinstance(delta.get("content"), str):
                    text.append(delta["content"])
                for tc in delta.get("tool_calls") or ():
                    if not isinstance(tc, dict):
                        continue
                    tool = tools.setdefault(tc.get("index", len(tools)), _Tool())
                    fn = _dict(tc.get("function"))
                    tool.id = tc.get("id") or tool.id
                    tool.name = fn.get("name") or tool.name
                    if isinstance(fn.get("arguments"), str):
                        tool.args += fn["arguments"]
        elif t == "response.completed" and isinstance(d.get("response"), dict):
            completed = d["response"]
        elif t == "response.output_text.delta" and isinstance(d.get("delta"), str):
            text.append(d["delta"])
        elif t == "response.output_item.added" and isinstance(d.get("item"), dict):
            item = d["item"]
            if item.get("type") == "function_call":
                tools[d.get("output_index", len(tools))] = _Tool(item.get("name"), item.get("call_id"), "")
        elif t == "response.function_call_arguments.delta" and isinstance(d.get("delta"), str):
            tools.setdefault(d.get("output_index", len(tools)), _Tool()).args += d["delta"]
        elif t == "content_block_start" and isinstance(d.get("content_block"), dict):
            cb = d["content_block"]
            if cb.get("type") == "tool_use":
                tools[d.get("index", len(tools))] = _Tool(cb.get("name"), cb.get("id"), "")
            elif isinstance(cb.get("text"), str):
                text.append(cb["text"])
        elif t == "content_block_delta" and isinstance(d.get("delta"), dict):
            delta = d["delta"]
            if isinstance(delta.get("text"), str):
                text.append(delta["text"])
            elif isinstance(delta.get("partial_json"), str):
                tools.setdefault(d.get("index", len(tools)), _Tool()).args += delta["partial_json"]
        elif t == "error" or (isinstance(d.get("error"), dict) and not t):
            text.append(f"\n(error event) {_error_text(d)}")
    if completed is not None and isinstance(completed.get("output"), list) and completed["output"]:
        return [_response_item(i) for i in completed["output"]]
    lines = ["".join(text)] if text else []
    lines += [_tool_call(tl.name, tl.args, tl.id) for tl in tools.values()]
    return [Turn("assistant", "\n".join(lines))] if lines else []


# --------------------------------------------------------------------------- facts
def call_facts(rec: Mapping[str, Any], served: Iterable[int] = ()) -> list[tuple[str, str]]:
    """``(label, value)`` lines under the answer: status, tokens, latency, model, streamed, served or live.

    ``served``: the attempts that were answered from this record (the proxy's ``llm call served`` notes)."""
    from ..core.usage import step_tokens
    from .fmt import fmt_ms, fmt_tokens

    call = _dict(rec.get("call"))
    out = rec.get("output")
    err = rec.get("error")
    if isinstance(out, dict):
        status = str(out.get("status", "?"))
    elif isinstance(err, dict):
        status = f"{err.get('status') or 'no answer'} ✗ {err.get('type', 'error')}: {err.get('message', '')}".rstrip(": ")
    else:
        status = "?"
    facts = [("status", status)]
    tokens = step_tokens(rec)
    if tokens is not None:
        extra = f", {fmt_tokens(tokens.cached)} cached" if tokens.cached else ""
        facts.append(("tokens", f"{fmt_tokens(tokens.input)} in → {fmt_tokens(tokens.output)} out{extra}"))
    if rec.get("dur_ms") is not None:
        facts.append(("latency", fmt_ms(rec.get("dur_ms"))))
    facts.append(("model", f"{call.get('provider', '?')} {call.get('model') or '?'} ({call.get('api', '?')} API)"))
    facts.append(("streamed", "yes" if call.get("stream") else "no"))
    attempts = sorted(set(served))
    facts.append(("answer", "live (a call to the provider), attempt " + str(rec.get("attempt", "?"))))
    if attempts:
        facts.append(("served", "from this record to attempt" + ("s " if len(attempts) > 1 else " ")
                      + ", ".join(str(a) for a in attempts)))
    return facts
