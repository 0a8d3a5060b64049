"""What the record pane shows of a step, in the order a person reads it (no Textual).

- A **model call** (a ``call`` of kind ``model``, a ``usage`` list, or a messages list in its inputs; the proxy's
  ``llm.jsonl`` records too): the answer first (its text, its tool calls as a list), then usage and cost, then the
  conversation as turns (the earlier history folded, the messages new since the model last spoke open), the raw
  record on demand.
- A **tool call** (a ``call`` of kind ``tool``): its arguments, its result or error, its earlier failed tries.
- **Any other step**: its output (or error), its inputs, then the record's bookkeeping fields, dimmed.

The shapes read: OpenAI chat messages and answers, Responses items, Anthropic messages (``call_text``); Pydantic
AI's ``ModelRequest``/``ModelResponse`` parts; LangChain's message dicts (``{"type", "data"}``) and ``ChatResult``;
the OpenAI Agents adapter's ``ModelResponse`` (Responses items). Anything else is shown as JSON, never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import call_text as ct
from .call_text import Turn

__all__ = ["BOOKKEEPING", "CallView", "Section", "call_kind", "proxied_view", "step_view"]

BOOKKEEPING = (
    "kind", "step", "seq", "id", "ts", "dur_ms", "attempt", "pos", "k", "key", "inputs_hash", "output_type",
    "transient", "parent", "context", "call", "usage", "state_patch",
)
"""The fields a reader rarely needs first: shown last, dimmed (any other unknown field too)."""


@dataclass(frozen=True, slots=True)
class Section:
    """One part of the view. ``form``: ``text`` (an answer: ``markdown`` says whether it reads as Markdown),
    ``tools`` (one tool call a line), ``facts`` (``(label, value)`` lines), ``chat`` (:class:`Turn` s, the first
    ``history`` of them the earlier conversation, folded), ``json`` (a value), ``error`` (a failed step's error)."""

    title: str
    form: str
    value: Any
    dim: bool = False
    history: int = 0
    markdown: bool = False


@dataclass(frozen=True, slots=True)
class CallView:
    """A record's sections in order (``kind``: ``model``, ``tool`` or ``step``) and the record itself (raw)."""

    kind: str
    sections: tuple[Section, ...]
    raw: Any


# --------------------------------------------------------------------------- detection
def call_kind(rec: Mapping[str, Any]) -> str:
    """``model``, ``tool`` or ``step``: by the ``call`` field, else a usage list or a conversation in the inputs."""
    call = rec.get("call")
    kind = call.get("kind") if isinstance(call, dict) else None
    if kind in ("model", "tool"):
        return str(kind)
    if isinstance(rec.get("usage"), list) and rec["usage"]:
        return "model"
    return "model" if conversation(rec.get("inputs")) is not None else "step"


_MESSAGE_KEYS = ("messages", "input", "request", "prompt", "history")


def _is_message(m: Any) -> bool:
    """A chat message of a known shape: a role (OpenAI, Anthropic), LangChain's ``type``/``data``, Pydantic AI parts."""
    return isinstance(m, dict) and (
        isinstance(m.get("role"), str) or (isinstance(m.get("type"), str) and isinstance(m.get("data"), dict))
        or (isinstance(m.get("parts"), list) and m.get("kind") in ("request", "response"))
    )


def conversation(inputs: Any, depth: int = 0) -> list[Any] | None:
    """The messages a model step was called with: a list of messages in its inputs (``args``, ``kwargs``, a
    ``messages``-like key, a request body), or a single Pydantic AI request; ``None`` when there is none."""
    if depth > 3:
        return None
    if isinstance(inputs, list):
        if inputs and all(_is_message(m) for m in inputs):
            return inputs
        for v in inputs[:4]:
            found = conversation(v, depth + 1)
            if found is not None:
                return found
        return None
    if not isinstance(inputs, dict):
        return None
    if _is_message(inputs) and isinstance(inputs.get("parts"), list):
        return [inputs]
    for key in ("args", "kwargs", "body", *_MESSAGE_KEYS):
        found = conversation(inputs.get(key), depth + 1)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------- turns of the other shapes
_LC_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}


def _langchain_turn(m: dict[str, Any]) -> Turn:
    """A LangChain message dict (``message_to_dict``): its content, tool calls and tool call id."""
    data = m["data"]
    role = _LC_ROLES.get(str(m.get("type")), str(m.get("type")))
    lines = []
    if role == "tool":
        lines.append(ct.tool_result_line(data.get("content"), data.get("tool_call_id")))
    elif ct.content_text(data.get("content")):
        lines.append(ct.content_text(data.get("content")))
    for tc in data.get("tool_calls") or ():
        if isinstance(tc, dict):
            lines.append(ct.tool_call_line(tc.get("name"), tc.get("args"), tc.get("id")))
    return Turn(role, "\n".join(lines))


_PYD_ROLES = {"system-prompt": "system", "user-prompt": "user", "tool-return": "tool", "retry-prompt": "user",
              "text": "assistant", "tool-call": "assistant", "thinking": "reasoning"}


def _pydantic_turns(m: dict[str, Any]) -> list[Turn]:
    """A Pydantic AI ``ModelRequest`` or ``ModelResponse``: a turn per part."""
    out = [Turn("system", ct.content_text(m["instructions"]))] if isinstance(m.get("instructions"), str) else []
    for p in m["parts"]:
        if not isinstance(p, dict):
            continue
        kind = str(p.get("part_kind"))
        role = _PYD_ROLES.get(kind, kind)
        if kind == "tool-call":
            out.append(Turn(role, ct.tool_call_line(p.get("tool_name"), p.get("args"), p.get("tool_call_id"))))
        elif kind == "tool-return":
            out.append(Turn(role, ct.tool_result_line(p.get("content"), p.get("tool_call_id"))))
        else:
            out.append(Turn(role, ct.content_text(p.get("content"))))
    return out


def message_turns(m: Any) -> list[Turn]:
    """The turns of one message of any shape this module knows."""
    if isinstance(m, dict) and isinstance(m.get("parts"), list):
        return _pydantic_turns(m)
    if isinstance(m, dict) and isinstance(m.get("data"), dict) and isinstance(m.get("type"), str):
        return [_langchain_turn(m)]
    if isinstance(m, dict) and "role" not in m and m.get("type") is not None:
        return [ct.response_turn(m)]
    return [ct.chat_turn(m)]


def answer_of(output: Any) -> list[Turn]:
    """What a model step answered: a string, an OpenAI/Anthropic body, Responses items, a Pydantic AI response,
    a LangChain ``ChatResult``; another value as JSON."""
    if isinstance(output, str):
        return [Turn("assistant", output)]
    if isinstance(output, dict):
        if isinstance(output.get("parts"), list):
            return _pydantic_turns(output)
        gens = output.get("generations")
        if isinstance(gens, list):
            return [t for g in gens if isinstance(g, dict) for t in message_turns(g.get("message"))]
        if isinstance(output.get("message"), dict):
            return message_turns(output["message"])
        if isinstance(output.get("choices"), list) or isinstance(output.get("output"), list) or output.get("type") == "message":
            return ct.body_turns(output)
        if isinstance(output.get("role"), str):
            return [ct.chat_turn(output)]
    if isinstance(output, list) and output and all(_is_message(m) or (isinstance(m, dict) and "type" in m) for m in output):
        return [t for m in output for t in message_turns(m)]
    return [Turn("answer", ct.content_text(output) if output is not None else "null")]


# --------------------------------------------------------------------------- sections
_MD = re.compile(r"^(#{1,6} |\s*[-*+] |\s*\d+\. |```|>\s)|\*\*[^*]+\*\*|`[^`]+`|\[[^\]]+\]\([^)]+\)", re.M)


def looks_markdown(text: str) -> bool:
    """Whether ``text`` reads as Markdown (a heading, a list, a code fence, bold, a link): rendered as such."""
    return bool(_MD.search(text))


def answer_sections(turns: list[Turn], failed: bool = False) -> list[Section]:
    """The answer's text (one section, Markdown if it reads so) and its tool calls (one line each)."""
    texts: list[str] = []
    tools: list[str] = []
    for t in turns:
        lines = t.text.split("\n")
        tools += [ln for ln in lines if ln.startswith("→ tool call")]
        text = "\n".join(ln for ln in lines if not ln.startswith("→ tool call")).strip("\n")
        if text:
            texts.append(text if t.role in ("assistant", "answer") or len(turns) == 1 else f"({t.role}) {text}")
    out: list[Section] = []
    body = "\n\n".join(texts)
    if failed:
        out.append(Section("error", "error", body or "(no answer body)"))
    elif body or not tools:
        out.append(Section("answer", "text", body or "(no answer text)", markdown=looks_markdown(body)))
    if tools:
        out.append(Section(f"tool calls ({len(tools)})", "tools", [ln.removeprefix("→ tool call ") for ln in tools]))
    return out


def chat_section(turns: list[Turn], note: str = "") -> Section:
    """The conversation: the turns up to the model's last answer in it are the history (folded), the rest new."""
    last = max((i for i, t in enumerate(turns) if t.role == "assistant"), default=-1)
    title = f"conversation ({len(turns)} message{'s' if len(turns) != 1 else ''}{', ' + note if note else ''})"
    return Section(title, "chat", turns, history=last + 1)


def _usage_facts(rec: Mapping[str, Any], cost: float | None, priced: bool) -> list[tuple[str, str]]:
    from ..core.usage import usage_entries
    from .fmt import fmt_cost, fmt_tokens

    entries = usage_entries(rec) or []
    facts = []
    for model, provider, t in entries:
        extra = f", {fmt_tokens(t.cached)} cached" if t.cached else ""
        who = f"  ({provider + ' ' if provider else ''}{model or '?'})" if len(entries) > 1 else ""
        facts.append(("tokens", f"{fmt_tokens(t.input)} in → {fmt_tokens(t.output)} out{extra}{who}"))
    if entries:
        facts.append(("cost", fmt_cost(cost) if cost is not None else "unknown (no price for this model)" if priced
                      else "not priced yet (prices load in the background)"))
    return facts


def _call_facts(rec: Mapping[str, Any], cost: float | None, priced: bool) -> list[tuple[str, str]]:
    from .fmt import fmt_ms

    call = _dict(rec.get("call"))
    facts = [("status", "failed" if rec.get("error") is not None else "ok")]
    facts += _usage_facts(rec, cost, priced)
    if rec.get("dur_ms") is not None:
        facts.append(("latency", fmt_ms(rec.get("dur_ms"))))
    model = call.get("model")
    if model or call.get("provider"):
        facts.append(("model", f"{call.get('provider') or '?'} {model or '?'}"))
    where = [f"{k} {call[k]}" for k in ("agent", "node", "superstep", "branch") if k in call]
    if where:
        facts.append(("where", ", ".join(where)))
    if rec.get("attempt") is not None:
        facts.append(("attempt", str(rec.get("attempt"))))
    return facts


def _conversation_section(inputs: Any) -> Section | None:
    msgs = conversation(inputs)
    if msgs is not None:
        return chat_section([t for m in msgs for t in message_turns(m)])
    # the adapters' digest form (LangGraph, OpenAI Agents): the number of messages and the last one
    last = _digest_last(inputs)
    if last is not None:
        count, msg = last
        return Section(f"conversation ({count} message{'' if count == 1 else 's'}; the record keeps the last)", "chat",
                       message_turns(msg))
    return None


def _digest_last(inputs: Any) -> tuple[Any, Any] | None:
    """``(count, last message)`` of an adapter's digest inputs (``{"digest", "messages"|"items", "last"}``)."""
    for v in (inputs, *(_dict(inputs).get("args") or ())[:1], _dict(inputs).get("kwargs")):
        if isinstance(v, dict) and "digest" in v and isinstance(v.get("last"), dict):
            return v.get("messages", v.get("items", "?")), v["last"]
    return None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def simple_inputs(inputs: Any) -> Any:
    """The SDK's ``{"args": [...], "kwargs": {...}}`` as the value a reader means: the kwargs alone, the one
    argument alone; anything else as it is."""
    if isinstance(inputs, dict) and set(inputs) <= {"args", "kwargs"}:
        args = inputs.get("args") or []
        kwargs = inputs.get("kwargs") or {}
        if not args and isinstance(kwargs, dict):
            return kwargs
        if isinstance(args, list) and len(args) == 1 and not kwargs:
            return args[0]
    return inputs


def _bookkeeping(rec: Mapping[str, Any], shown: Iterable[str]) -> Section | None:
    rest = {k: v for k, v in rec.items() if k not in shown}
    return Section("record", "json", rest, dim=True) if rest else None


def _result_section(rec: Mapping[str, Any], title: str = "output") -> Section:
    if rec.get("error") is not None:
        return Section("error", "error", rec.get("error"))
    if "output" in rec:
        out = rec.get("output")
        msg = out.get("message") if isinstance(out, dict) and len(out) == 1 else None
        if isinstance(msg, dict) and isinstance(msg.get("data"), dict) and "content" in msg["data"]:
            out = msg["data"]["content"]  # a LangChain tool message: its content is the result
        return Section(title, "json", out)
    return Section(title, "json", "(no output yet: the step has not finished)", dim=True)


def step_view(rec: Mapping[str, Any], *, cost: float | None = None, priced: bool = False,
              retries: Sequence[Mapping[str, Any]] | None = None) -> CallView:
    """A journal record's view: a model call, a tool call or another step (see the module's docstring).

    ``cost``: the step's price (``None``: unknown); ``priced``: whether prices were loaded to tell it. ``retries``:
    the earlier failed tries of the same call (records)."""
    kind = call_kind(rec)
    if kind == "model":
        return _model_view(rec, cost, priced)
    sections: list[Section] = []
    if kind == "tool":
        sections.append(Section("arguments", "json", simple_inputs(rec.get("inputs"))))
        sections.append(_result_section(rec, "result"))
        if retries:
            sections.append(Section(f"retries ({len(retries)} earlier failed tr{'ies' if len(retries) > 1 else 'y'})",
                                    "facts", [_retry_line(r) for r in retries]))
    else:
        sections.append(_result_section(rec))
        if "inputs" in rec:
            sections.append(Section("inputs", "json", simple_inputs(rec.get("inputs"))))
    book = _bookkeeping(rec, ("inputs", "output", "error"))
    if book is not None:
        sections.append(book)
    return CallView(kind, tuple(sections), rec)


def _retry_line(r: Mapping[str, Any]) -> tuple[str, str]:
    err = r.get("error")
    text = f"{err.get('type', 'error')}: {err.get('message', '')}" if isinstance(err, dict) else str(err)
    return (f"#{r.get('seq', '?')}", f"attempt {r.get('attempt', '?')}, {r.get('ts', '')}: {text}")


def _model_view(rec: Mapping[str, Any], cost: float | None, priced: bool) -> CallView:
    failed = rec.get("error") is not None
    if failed:
        sections = [_result_section(rec)]
    else:
        sections = answer_sections(answer_of(rec.get("output")))
    sections.append(Section("usage", "facts", _call_facts(rec, cost, priced)))
    chat = _conversation_section(rec.get("inputs"))
    if chat is not None:
        sections.append(chat)
    elif "inputs" in rec:
        sections.append(Section("inputs", "json", simple_inputs(rec.get("inputs"))))
    return CallView("model", tuple(sections), rec)


def proxied_view(rec: Mapping[str, Any], served: Iterable[int] = (), *, cost: float | None = None,
                 priced: bool = False) -> CallView:
    """A model call the proxy recorded (``llm.jsonl``): its answer, its facts, its request's messages."""
    if rec.get("kind") == "note":
        note = f"{rec.get('message', 'note')}: {rec.get('step', '')} #{rec.get('served')}"
        return CallView("model", (Section("note", "error", note),), rec)
    failed = rec.get("error") is not None
    sections = answer_sections(ct.answer_turns(rec), failed)
    facts = ct.call_facts(rec, served)
    usage = _usage_facts(rec, cost, priced)
    at = next((i for i, (label, _) in enumerate(facts) if label == "tokens"), 0) + 1
    facts[at:at] = [f for f in usage if f[0] == "cost"]
    sections.append(Section("usage", "facts", facts))
    sections.append(chat_section(ct.request_turns(rec)))
    return CallView("model", tuple(sections), rec)
