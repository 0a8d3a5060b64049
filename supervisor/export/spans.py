"""The spans of a run, neutral to their encoding, and what their attributes are made of: ids, times, the
GenAI names of model and tool calls, the root's status and totals (:mod:`supervisor.export.otlp` builds them)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..core.usage import RunUsage

SCOPE = "agent-supervisor"
"""The instrumentation scope name (and the default ``service.name``)."""
KIND_INTERNAL, KIND_CLIENT = 1, 3
"""OTLP ``Span.SpanKind`` values."""
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
EXIT_RESTART = 75
"""An agent exit that asks for a restart (a rollback the SDK requested): not a crash."""
ATTEMPT_EVENTS = frozenset(
    {"backoff", "hang", "memory-limit", "rollback", "give-up", "stop", "pause", "resume", "resource-error"}
)
"""Supervisor events that become events of the attempt span they name (``restart``: of the attempt it ends)."""


def id_key(meta: Mapping[str, Any], run_id: str) -> str:
    """What a run's trace and span ids derive from: ``run.json``'s ``uid`` (random, written when the run was
    created: two runs of one directory name never share it), else the run id (a run from before uids)."""
    uid = meta.get("uid")
    return f"uid:{uid}" if isinstance(uid, str) and uid else run_id


def trace_id(key: str) -> str:
    """The run's trace id: 32 lowercase hex digits derived from its :func:`id_key` (never all zero)."""
    return _hex_id(f"agent-supervisor trace {key}", 16)


def span_id(key: str, what: str) -> str:
    """A span's id: 16 lowercase hex digits derived from the run's :func:`id_key` and what the span stands for
    (``run``, ``attempt:3``, ``attempt:3:started``, ``step:12``)."""
    return _hex_id(f"agent-supervisor span {key} {what}", 8)


def _hex_id(text: str, n: int) -> str:
    h = hashlib.sha256(text.encode()).hexdigest()[: 2 * n]
    return h if h.strip("0") else "0" * (2 * n - 1) + "1"  # an all-zero id is invalid


@dataclass
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Span:
    """One span, neutral to its encoding (OTLP/JSON here, the SDK's ReadableSpan in ``otlp_http``)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    kind: int = KIND_INTERNAL
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    status_code: int = STATUS_UNSET
    status_message: str = ""


def _scalar(v: Any) -> Any:
    """An attribute value OTLP takes: str, bool, int, float, or a list of one of them; else JSON text."""
    if isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        return v
    return orjson.dumps(v, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


FINAL_STATUSES = ("succeeded", "failed", "stopped")
"""``run.json`` statuses a run ends with (the live exporter sends the root span once one is written)."""


def root_status(meta: Mapping[str, Any]) -> tuple[int, str]:
    """The root span's status: OK for a run that succeeded, ERROR (with its reason) for one that failed, UNSET
    for one stopped (resumable: neither) or still running (a file export made mid-run)."""
    status = meta.get("status")
    if status == "succeeded":
        return STATUS_OK, ""
    if status == "failed":
        return STATUS_ERROR, str(meta.get("reason") or "failed")
    return STATUS_UNSET, ""


def agent_name(meta: Mapping[str, Any], run_id: str) -> str:
    """``gen_ai.agent.name``: the agent's script or program (``python agent.py`` -> ``agent``), else the run id."""
    cmd = meta.get("command")
    if isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd):
        for arg in cmd:
            if arg.endswith((".py", ".js", ".mjs", ".ts")):
                return Path(arg).stem
        prog = Path(cmd[0]).name
        if prog.startswith("python") and len(cmd) > 2 and cmd[1] == "-m":
            return str(cmd[2])
        return prog
    return run_id


def usage_attributes(u: RunUsage) -> dict[str, Any]:
    """A run's totals as root span attributes (costs only where known). Token totals under keys of their own
    (Pydantic AI's ``gen_ai.aggregated_usage.*``): a backend summing ``gen_ai.usage.*`` over the trace's spans
    does not count them twice."""
    attrs: dict[str, Any] = {
        "gen_ai.aggregated_usage.input_tokens": u.tokens.input,
        "gen_ai.aggregated_usage.output_tokens": u.tokens.output,
        "agent_supervisor.saved.input_tokens": u.saved_tokens.input,
        "agent_supervisor.saved.output_tokens": u.saved_tokens.output,
        "agent_supervisor.saved.steps": u.saved_steps,
    }
    if u.tokens.cached:
        attrs["gen_ai.aggregated_usage.cache_read.input_tokens"] = u.tokens.cached
    if u.cost_usd is not None:
        attrs["agent_supervisor.cost_usd"] = u.cost_usd
    if u.unpriced:
        attrs["agent_supervisor.unpriced_steps"] = u.unpriced
    if u.saved_cost_usd is not None:
        attrs["agent_supervisor.saved.cost_usd"] = u.saved_cost_usd
    return attrs


def _call_attrs(call: dict[str, Any], attrs: dict[str, Any]) -> tuple[int, str]:
    """A model or tool call's GenAI attributes; its span kind and name (``chat {model}``, ``execute_tool {name}``)."""
    if call["kind"] == "model":
        model = call.get("model") if isinstance(call.get("model"), str) else None
        provider = call.get("provider") if isinstance(call.get("provider"), str) else None
        attrs["gen_ai.operation.name"] = "chat"
        if provider:
            attrs["gen_ai.provider.name"] = provider_name(provider)
        if model:
            attrs["gen_ai.request.model"] = model
        return KIND_CLIENT, f"chat {model}" if model else "chat"
    tool = call.get("tool") if isinstance(call.get("tool"), str) else None
    attrs["gen_ai.operation.name"] = "execute_tool"
    attrs["gen_ai.tool.type"] = "function"
    if tool:
        attrs["gen_ai.tool.name"] = tool
    cid = call.get("call_id")
    if isinstance(cid, (str, int)) and not isinstance(cid, bool):
        attrs["gen_ai.tool.call.id"] = str(cid)
    return KIND_INTERNAL, f"execute_tool {tool}" if tool else "execute_tool"


PROVIDER_NAMES = {
    "google": "gcp.gemini", "google-gla": "gcp.gemini", "gemini": "gcp.gemini", "google-vertex": "gcp.vertex_ai",
    "vertexai": "gcp.vertex_ai", "vertex_ai": "gcp.vertex_ai", "bedrock": "aws.bedrock", "aws": "aws.bedrock",
    "azure": "azure.ai.openai", "azure-openai": "azure.ai.openai", "mistral": "mistral_ai", "x-ai": "x_ai",
    "xai": "x_ai", "grok": "x_ai", "ibm": "ibm.watsonx.ai", "watsonx": "ibm.watsonx.ai",
}
"""Provider ids of the adapters and genai-prices (``google-gla``...) as the GenAI semantic conventions name them;
the others (``openai``, ``anthropic``, ``cohere``, ``deepseek``, ``groq``, ``perplexity``...) are the same."""


def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` of a recorded provider id."""
    return PROVIDER_NAMES.get(provider.lower(), provider)


def _error_on(s: Span, err: Any, end_ns: int, *, transient: bool) -> None:
    """A failed step: an ``exception`` event and an ERROR status on its span."""
    etype = err.get("type") if isinstance(err, dict) else None
    msg = err.get("message") if isinstance(err, dict) else err
    ev: dict[str, Any] = {"exception.type": str(etype or "Error"), "exception.message": str(msg or "")}
    if isinstance(err, dict) and isinstance(err.get("traceback"), str):
        ev["exception.stacktrace"] = err["traceback"]
    s.events.append(SpanEvent("exception", end_ns, ev))
    s.status_code, s.status_message = STATUS_ERROR, str(msg or etype or "failed")
    s.attributes["error.type"] = str(etype or "Error")
    if transient:
        s.attributes["agent_supervisor.transient"] = True


def resource_attributes(run_id: str) -> dict[str, Any]:
    """The one resource of both exports (file and OTLP/HTTP, so a receiver routes them alike): the attributes
    of ``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,k2=v2``, values percent-decoded), ``service.name`` from
    ``OTEL_SERVICE_NAME``, else that variable's, else ``agent-supervisor``; and the run id."""
    from urllib.parse import unquote

    attrs: dict[str, Any] = {}
    for item in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        k, eq, v = item.partition("=")
        if eq and k.strip():  # a malformed entry is skipped, as the SDK does
            attrs[k.strip()] = unquote(v.strip())
    attrs["service.name"] = os.environ.get("OTEL_SERVICE_NAME") or attrs.get("service.name") or SCOPE
    attrs["agent_supervisor.run.id"] = run_id
    return attrs
