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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..core.llm_calls import event_data

__all__ = [
    "Turn", "answer_turns", "body_turns", "call_facts", "chat_turn", "content_text", "request_turns", "response_turn",
    "tool_call_line", "tool_result_line",
]


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


def tool_call_line(name: Any, args: Any, call_id: Any = None) -> str:
    ident = f"  [{call_id}]" if call_id else ""
    return f"→ tool call {name or '?'}({_args(args)}){ident}"


def tool_result_line(content: Any, call_id: Any = None) -> str:
    ident = f" [{call_id}]" if call_id else ""
    return f"← tool result{ident}: {content_text(content)}"


def content_text(content: Any) -> str:
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
        return content_text(p)
    t = p.get("type")
    if t in ("text", "input_text", "output_text") and isinstance(p.get("text"), str):
        return str(p["text"])
    if t == "tool_use":
        return tool_call_line(p.get("name"), p.get("input"), p.get("id"))
    if t == "tool_result":
        return tool_result_line(p.get("content"), p.get("tool_use_id"))
    if t in ("image_url", "input_image", "image"):
        return f"[{t}]"
    if t == "refusal":
        return f"(refusal) {p.get('refusal', '')}"
    if t in ("thinking", "reasoning") and isinstance(p.get("thinking"), str):
        return f"(thinking) {p['thinking']}"
    return _json(p)


def chat_turn(m: Any) -> Turn:
    """An OpenAI chat message (request or answer) or an Anthropic message."""
    if not isinstance(m, dict):
        return Turn("?", content_text(m))
    role = str(m.get("role") or "?")
    lines = []
    text = content_text(m.get("content"))
    if role == "tool":
        lines.append(tool_result_line(m.get("content"), m.get("tool_call_id")))
    elif text:
        lines.append(text)
    if isinstance(m.get("refusal"), str) and m["refusal"]:
        lines.append(f"(refusal) {m['refusal']}")
    for tc in m.get("tool_calls") or ():
        if isinstance(tc, dict):
            fn = _dict(tc.get("function"))
            lines.append(tool_call_line(fn.get("name"), fn.get("arguments"), tc.get("id")))
    if isinstance(m.get("function_call"), dict):  # the legacy single function call
        fc = m["function_call"]
        lines.append(tool_call_line(fc.get("name"), fc.get("arguments")))
    return Turn(role, "\n".join(lines))


def response_turn(item: Any) -> Turn:
    """An item of the Responses API's ``input`` or ``output``."""
    if not isinstance(item, dict):
        return Turn("user", content_text(item))
    t = item.get("type")
    if t == "function_call":
        return Turn("assistant", tool_call_line(item.get("name"), item.get("arguments"), item.get("call_id")))
    if t == "function_call_output":
        return Turn("tool", tool_result_line(item.get("output"), item.get("call_id")))
    if t == "reasoning":
        summary = item.get("summary")
        text = "\n".join(_part(s) for s in summary) if isinstance(summary, list) else ""
        return Turn("reasoning", text or "(reasoning)")
    if "role" in item or t == "message":
        return Turn(str(item.get("role") or "assistant"), content_text(item.get("content")))
    return Turn(str(t or "?"), _json(item))


def _body(rec: Mapping[str, Any], *where: str) -> Any:
    v: Any = rec
    for k in where:
        v = v.get(k) if isinstance(v, dict) else None
    return v


def _api(rec: Mapping[str, Any]) -> str:
    """The call's API, a key of ``_REQUESTS``: as the proxy recorded it, else told by the request body's keys."""
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
    out = _REQUESTS[_api(rec)](body)
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        out.insert(0, Turn("tools", ", ".join(_tool_name(t) for t in tools)))
    return out


def _chat_request(body: dict[str, Any]) -> list[Turn]:
    """An OpenAI Chat Completions request: its ``messages``."""
    messages = body.get("messages")
    return [chat_turn(m) for m in messages] if isinstance(messages, list) else []


def _responses_request(body: dict[str, Any]) -> list[Turn]:
    """An OpenAI Responses request: its ``instructions`` (as the system prompt), then its ``input`` (a string or
    items)."""
    out = [Turn("system", content_text(body["instructions"]))] if body.get("instructions") is not None else []
    inp = body.get("input")
    if isinstance(inp, str):
        out.append(Turn("user", inp))
    elif isinstance(inp, list):
        out += [response_turn(i) for i in inp]
    return out


def _messages_request(body: dict[str, Any]) -> list[Turn]:
    """An Anthropic Messages request: its ``system`` prompt, then its ``messages``."""
    system = [Turn("system", content_text(body["system"]))] if body.get("system") is not None else []
    return system + _chat_request(body)


def _other_request(body: dict[str, Any]) -> list[Turn]:
    """A request of an API this module does not know: its body as JSON."""
    return [Turn("request", _json(body))]


_REQUESTS: dict[str, Callable[[dict[str, Any]], list[Turn]]] = {
    "chat": _chat_request,
    "responses": _responses_request,
    "messages": _messages_request,
    "other": _other_request,
}
"""The turns of a request body, by API."""


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
    if isinstance(src.get("events"), list):
        return _stream_turns(src["events"])
    body = src.get("body")
    if body is None:
        return []
    if src is err:
        return [Turn("error", _error_text(body))]
    return _body_turns(_api(rec), body)


def body_turns(body: Any) -> list[Turn]:
    """An answer body of any of the three APIs, told by its shape (an SDK step's output)."""
    return _body_turns("other", body)


def _body_turns(api: str, body: Any) -> list[Turn]:
    """An answer's body by its shape: Chat Completions' ``choices``, Responses' ``output`` items, an Anthropic
    message; else the body as it is (its text, or JSON)."""
    if isinstance(body, dict):
        if isinstance(body.get("choices"), list):
            return [chat_turn(c.get("message")) for c in body["choices"] if isinstance(c, dict)]
        if isinstance(body.get("output"), list):
            return [response_turn(i) for i in body["output"]]
        if api == "messages" or body.get("type") == "message":
            return [chat_turn({"role": body.get("role", "assistant"), "content": body.get("content")})]
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


# --------------------------------------------------------------------------- streamed answers
class _Tool:
    """A tool call as a stream's events build it: its name, id and the arguments so far."""

    __slots__ = ("args", "id", "name")

    def __init__(self, name: Any = None, call_id: Any = None, args: str = "") -> None:
        self.name = name
        self.id = call_id
        self.args = args


class _Stream:
    """What a stream's events have assembled so far: the text deltas, the tool calls by their index, and the
    Responses API's completed response (which, when it has output, is the answer)."""

    __slots__ = ("completed", "text", "tools")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.tools: dict[Any, _Tool] = {}
        self.completed: Any = None

    def tool(self, index: Any) -> _Tool:
        """The tool call at ``index``, started if it is not yet."""
        return self.tools.setdefault(index, _Tool())

    def turns(self) -> list[Turn]:
        """The answer: the completed response's output items, else one assistant turn of text and tool calls."""
        completed = self.completed
        if completed is not None and isinstance(completed.get("output"), list) and completed["output"]:
            return [response_turn(i) for i in completed["output"]]
        lines = ["".join(self.text)] if self.text else []
        lines += [tool_call_line(tl.name, tl.args, tl.id) for tl in self.tools.values()]
        return [Turn("assistant", "\n".join(lines))] if lines else []


def _stream_turns(events: Iterable[Any]) -> list[Turn]:
    """The answer a stream's events assemble into: text deltas concatenated, tool calls with their arguments."""
    s = _Stream()
    for block in events:
        d = event_data(block) if isinstance(block, str) else None
        if isinstance(d, dict):
            _stream_event(s, d)
    return s.turns()


def _stream_event(s: _Stream, d: dict[str, Any]) -> None:
    """Add an event to ``s``: a Chat Completions chunk (``choices``), else by its ``type``; an untyped error."""
    if isinstance(d.get("choices"), list):
        _chat_chunk(s, d["choices"])
        return
    t = d.get("type")
    handler = _STREAM_EVENTS.get(t) if isinstance(t, str) else None
    if handler is not None:
        handler(s, d)
    elif not t and isinstance(d.get("error"), dict):
        _error_event(s, d)


def _chat_chunk(s: _Stream, choices: list[Any]) -> None:
    """An OpenAI Chat Completions chunk: each choice's ``delta`` content and tool call pieces."""
    for c in choices:
        delta = c.get("delta") if isinstance(c, dict) else None
        if not isinstance(delta, dict):
            continue
        if isinstance(delta.get("content"), str):
            s.text.append(delta["content"])
        for tc in delta.get("tool_calls") or ():
            if not isinstance(tc, dict):
                continue
            tool = s.tool(tc.get("index", len(s.tools)))
            fn = _dict(tc.get("function"))
            tool.id = tc.get("id") or tool.id
            tool.name = fn.get("name") or tool.name
            if isinstance(fn.get("arguments"), str):
                tool.args += fn["arguments"]


def _responses_completed(s: _Stream, d: dict[str, Any]) -> None:
    """OpenAI Responses' ``response.completed``: the whole response."""
    if isinstance(d.get("response"), dict):
        s.completed = d["response"]


def _responses_text(s: _Stream, d: dict[str, Any]) -> None:
    """OpenAI Responses' ``response.output_text.delta``: a piece of text."""
    if isinstance(d.get("delta"), str):
        s.text.append(d["delta"])


def _responses_item(s: _Stream, d: dict[str, Any]) -> None:
    """OpenAI Responses' ``response.output_item.added``: a function call starts."""
    item = d.get("item")
    if isinstance(item, dict) and item.get("type") == "function_call":
        s.tools[d.get("output_index", len(s.tools))] = _Tool(item.get("name"), item.get("call_id"), "")


def _responses_args(s: _Stream, d: dict[str, Any]) -> None:
    """OpenAI Responses' ``response.function_call_arguments.delta``: a piece of a function call's arguments."""
    if isinstance(d.get("delta"), str):
        s.tool(d.get("output_index", len(s.tools))).args += d["delta"]


def _messages_block_start(s: _Stream, d: dict[str, Any]) -> None:
    """Anthropic's ``content_block_start``: a tool use starts, or a text block with its first text."""
    cb = d.get("content_block")
    if not isinstance(cb, dict):
        return
    if cb.get("type") == "tool_use":
        s.tools[d.get("index", len(s.tools))] = _Tool(cb.get("name"), cb.get("id"), "")
    elif isinstance(cb.get("text"), str):
        s.text.append(cb["text"])


def _messages_block_delta(s: _Stream, d: dict[str, Any]) -> None:
    """Anthropic's ``content_block_delta``: a piece of text, or of a tool use's input JSON."""
    delta = d.get("delta")
    if not isinstance(delta, dict):
        return
    if isinstance(delta.get("text"), str):
        s.text.append(delta["text"])
    elif isinstance(delta.get("partial_json"), str):
        s.tool(d.get("index", len(s.tools))).args += delta["partial_json"]


def _error_event(s: _Stream, d: dict[str, Any]) -> None:
    """An error event (any API): its message after the text so far."""
    s.text.append(f"\n(error event) {_error_text(d)}")


_STREAM_EVENTS: dict[str, Callable[[_Stream, dict[str, Any]], None]] = {
    "response.completed": _responses_completed,
    "response.output_text.delta": _responses_text,
    "response.output_item.added": _responses_item,
    "response.function_call_arguments.delta": _responses_args,
    "content_block_start": _messages_block_start,
    "content_block_delta": _messages_block_delta,
    "error": _error_event,
}
"""How a streamed event of each ``type`` adds to the answer (Chat Completions' chunks have no type)."""


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
