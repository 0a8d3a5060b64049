"""A served model call as LangChain's callbacks see it: marked served, without token usage (issue 29).

A :class:`~supervisor.integrations.langgraph.JournaledChatModel` call served from the journal still goes through
LangChain's callbacks (``stream_mode="messages"`` shows it), and the tracers among them (LangSmith, OpenInference,
Langfuse) would report it as a new call with the tokens it had when it ran: a resumed run would look paid twice.
So, inside the model's ``invoke``, the served ``ChatResult`` reaches the callbacks with the usage keys taken out
(the message's ``usage_metadata``, ``token_usage``/``usage`` in ``llm_output``, ``generation_info`` and
``response_metadata``) and ``agent_supervisor.served: true`` in its ``generation_info``; once the callbacks
have seen it, the message the graph gets is given its recorded usage back and loses the mark, so the graph's
state (and the digest of the calls after it) is the one the live run had. Called any other way (``generate``
directly), a served result is handed over as recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

SERVED = "agent_supervisor.served"
USAGE_KEYS = ("token_usage", "usage", "usage_metadata")

_Hidden = tuple[Any, dict[str, Any]]  # the message's usage_metadata, the usage keys the merge would give it
_HIDDEN: ContextVar[list[_Hidden] | None] = ContextVar("agent_supervisor_served_calls", default=None)


@contextmanager
def hiding() -> Iterator[list[_Hidden]]:
    """The scope of one ``invoke``: served results met inside have their usage hidden from the callbacks."""
    held: list[_Hidden] = []
    token = _HIDDEN.set(held)
    try:
        yield held
    finally:
        _HIDDEN.reset(token)


def _without_usage(d: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    d = d or {}
    return {k: v for k, v in d.items() if k not in USAGE_KEYS}, {k: v for k, v in d.items() if k in USAGE_KEYS}


def hide_usage(result: ChatResult) -> ChatResult:
    """``result`` (served) without its usage and marked served, when inside :func:`hiding`; else as it is."""
    held = _HIDDEN.get()
    if held is None or len(result.generations) != 1:  # invoke reads one generation
        return result
    (gen,) = result.generations
    msg = gen.message
    result.llm_output, from_output = _without_usage(result.llm_output) if result.llm_output is not None else (None, {})
    info, from_info = _without_usage(gen.generation_info)
    msg.response_metadata, from_message = _without_usage(msg.response_metadata)
    # LangChain merges these into the message's response_metadata, later ones winning: what it would have held
    held.append((getattr(msg, "usage_metadata", None), {**from_output, **from_info, **from_message}))
    if isinstance(msg, AIMessage):
        msg.usage_metadata = None
    gen.generation_info = {**info, SERVED: True}
    return result


def give_back(message: Any, held: list[_Hidden]) -> Any:
    """The message ``invoke`` returns, with the usage :func:`hide_usage` took out put back and no served mark."""
    if len(held) != 1 or not isinstance(message, BaseMessage):
        return message
    ((usage, meta),) = held
    message.response_metadata = {k: v for k, v in message.response_metadata.items() if k != SERVED} | meta
    if isinstance(message, AIMessage):
        message.usage_metadata = usage
    return message
