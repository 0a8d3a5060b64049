"""What a timeline row says in its few columns (no Textual): a call's arguments, an answer's text, a value without
JSON punctuation, a tool call's telling argument.

A row has some 40 columns for its preview: spent on ``{"content":"`` they say nothing. A model call's row shows
the answer's text (or the tool calls it asked for, ``→ search(query="durable agents")``), whichever of the shapes
the adapters and providers write (LangChain's ``ChatResult``, Pydantic AI's ``ModelResponse``, OpenAI's chat and
Responses, Anthropic's Messages); other outputs show their values with keys but without quotes and braces.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from ..core.records import preview
from ..core.times import parse_ts

TELLING_CHARS = 60
"""A string argument longer than this is a body (a prompt, a document), not what tells two calls apart."""

_TEXT_KEYS = ("content", "text")
"""Where an answer's text is, in every shape this module reads."""
_NAME_KEYS = ("name", "tool_name")
_ARGS_KEYS = ("args", "arguments", "input")
_SKIP_KEYS = frozenset({
    "additional_kwargs", "response_metadata", "usage_metadata", "llm_output", "generation_info", "usage",
    "provider_details", "id", "tool_call_id", "role", "type", "model", "model_name", "index", "logprobs",
})
"""Metadata beside an answer (LangChain's ``additional_kwargs`` repeats the tool calls): never read for its text."""


def pv(value: Any, width: int = 120) -> str:
    """``records.preview`` that cuts a long string before working on it (a 50 MB output renders fast)."""
    if isinstance(value, str) and len(value) > width * 2:
        value = value[: width * 2]
    return preview(value, width)


def _cut(text: str, width: int) -> str:
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= width else text[: width - 1] + "…"


def args_preview(inputs: Any, width: int = 120) -> str:
    """A call's inputs as its arguments (``"q1", 3, limit=5``); ``""`` for none (no "null")."""
    if inputs is None or inputs == {}:
        return ""
    if isinstance(inputs, dict) and set(inputs) <= {"args", "kwargs"}:
        args, kwargs = inputs.get("args") or [], inputs.get("kwargs") or {}
        if isinstance(args, list) and isinstance(kwargs, dict):
            if not args and not kwargs:
                return ""
            parts = [pv(a, width) if not isinstance(a, str) else pv(orjson.dumps(a[: width * 2]).decode(), width) for a in args[:8]]
            parts += [f"{k}={pv(v, width)}" for k, v in list(kwargs.items())[:8]]
            return _cut(", ".join(parts), width)
    return pv(inputs, width)


def telling_arg(inputs: Any) -> str:
    """A tool call's most telling argument: its first short string input (a query, a URL, a path); ``""``: none.

    Eight rows of ``⚙ tool search`` say nothing; ``search durable agents`` and ``search crash recovery`` do."""
    if isinstance(inputs, dict) and set(inputs) <= {"args", "kwargs"}:
        args, kwargs = inputs.get("args"), inputs.get("kwargs")
        values = [*(args if isinstance(args, list) else ()), *(kwargs.values() if isinstance(kwargs, dict) else ())]
    elif isinstance(inputs, dict):
        values = list(inputs.values())
    else:
        values = inputs if isinstance(inputs, list) else [inputs]
    for v in values[:16]:
        if isinstance(v, str) and v.strip() and len(v) <= TELLING_CHARS:
            return " ".join(v.split())
    return ""


def _tool_call(d: dict[str, Any]) -> str | None:
    """``→ name(args)`` if ``d`` is a tool call (a name and its arguments, any provider's keys), else ``None``."""
    name = next((d[k] for k in _NAME_KEYS if isinstance(d.get(k), str)), None)
    key = next((k for k in _ARGS_KEYS if k in d), None)
    if name is None or key is None:
        return None
    args = d[key]
    if isinstance(args, str):  # OpenAI's arguments: a JSON string
        try:
            args = orjson.loads(args) if args.strip() else {}
        except orjson.JSONDecodeError:
            return f"→ {name}({args})"
    shown = args_preview({"kwargs": args} if isinstance(args, dict) else {"args": [args]}, 200)
    return f"→ {name}({shown})"


def _texts(value: Any, out: list[str], depth: int = 0) -> None:
    """Collect an answer's texts and tool calls, in order (a bounded walk: an answer is a few levels deep)."""
    if depth > 8 or len(out) > 16:
        return
    if isinstance(value, list):
        for v in value[:32]:
            _texts(v, out, depth + 1)
        return
    if not isinstance(value, dict):
        return
    call = _tool_call(value)
    if call is not None:
        out.append(call)
        return
    for k, v in value.items():
        if k in _SKIP_KEYS:
            continue
        if k in _TEXT_KEYS and isinstance(v, str):
            if v.strip():
                out.append(v.strip())
        else:
            _texts(v, out, depth + 1)


def answer_text(output: Any, width: int = 320) -> str:
    """A model call's answer as it reads: its text, then the tool calls it asked for; the value without JSON
    punctuation when no text is found in it."""
    if isinstance(output, str):
        return _cut(output, width)
    found: list[str] = []
    _texts(output, found)
    return _cut(" ".join(found), width) if found else plain(output, width)


def _plain(value: Any, top: bool, budget: int) -> str:
    if isinstance(value, str):
        return value[:budget]
    if isinstance(value, list):  # a top list's items are as bare as it is (a search's results)
        sep = "; " if any(isinstance(v, (dict, list)) for v in value[:8]) else ", "
        body = sep.join(_plain(v, top, budget) for v in value[:16])
        return body if top else f"[{body}]"
    if isinstance(value, dict):
        body = ", ".join(f"{k}: {_plain(v, False, budget)}" for k, v in list(value.items())[:16])
        return body if top else f"{{{body}}}"
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def plain(value: Any, width: int = 320) -> str:
    """A value in a line without JSON's quotes (``title: Durable execution, url: https://…``): strings as they
    are, a dict's keys bare, a list's items side by side (the Record tab has the JSON)."""
    if value is None:
        return ""
    return _cut(_plain(value, True, width * 2), width)


def call_error(err: Any) -> str:
    """A failed call's error in a line: its HTTP status, type and message (or the error as text)."""
    if not isinstance(err, dict):
        return str(err)
    status = err.get("status")
    head = f"{status} " if status else ""
    return head + f"{err.get('type', 'error')}: {err.get('message', '')}".rstrip(": ")


def call_name(info: dict[str, Any], width: int) -> str:
    """A call's provider and model in ``width`` columns: the model alone when both do not fit (it matters more)."""
    name = f"{info.get('provider', '?')} {info.get('model') or '?'}"
    if len(name) > width:
        name = str(info.get("model") or "?")
    return name if len(name) <= width else name[: width - 1] + "…"


def elapsed(ts: Any, now: datetime | None = None) -> str:
    """Time since an ISO-8601 UTC ``ts`` (a running step's), e.g. ``3.2s`` or ``4m05s``; ``""`` if unreadable."""
    t = parse_ts(ts)
    if t is None:
        return ""
    sec = max(0.0, ((now or datetime.now(UTC)) - t).total_seconds())
    if sec < 60:
        return f"{sec:.1f}s"
    if sec < 3600:
        return f"{int(sec // 60)}m{int(sec % 60):02d}s"
    return f"{int(sec // 3600)}h{int(sec % 3600 // 60):02d}m"

