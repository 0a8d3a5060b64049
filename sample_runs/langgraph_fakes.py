"""Offline stand-ins for the LangGraph samples (``langgraph_approval.py``, ``langgraph_react.py``,
``langgraph_fanout.py``): a chat model whose answer is a function of the conversation, a human who answers through
files, and a ledger of the calls that were really made.

- :class:`ScriptedModel` answers what its ``script`` makes of the messages: a resumed thread gets the answer of its
  turn, as a real model given the same messages would (langchain-core's fake models answer by a counter instead,
  which a new process starts again at 0). ``bind_tools`` binds OpenAI-format tools, as provider models do.
- :func:`paid` appends a line to ``LEDGER_FILE`` for each model call and tool execution that really runs: what it
  was, and the attempt and idempotency key of the step it ran in (``run.key``), so a test can tell a call whose step
  was committed from one a kill cut short. ``FAKE_CALL_DELAY=<seconds>``: each call then takes that long (a kill
  can land inside one).
- :func:`ask` is the human: with ``ANSWERS_DIR=<dir>`` a question is written as ``<dir>/<id>.asked`` (JSON: the
  question and the asking pid) and the answer is read from ``<dir>/<id>.answer`` once someone writes it
  (:func:`answer_to` is what a test answers); without it, the answer is given at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from supervisor import Run

RUN: Run | None = None
"""The sample's run: the ledger lines carry its attempt and the key of the step in flight."""


def paid(what: str, ident: str) -> None:
    """Record one call that really runs (a model call, a tool execution) in ``LEDGER_FILE``, then take
    ``FAKE_CALL_DELAY`` seconds, as a real call takes time."""
    path = os.environ.get("LEDGER_FILE")
    if path:
        line = {"what": what, "id": ident, "attempt": RUN.attempt if RUN else None, "key": RUN.key if RUN else None}
        with open(path, "a") as f:  # one short append: whole even when the process is killed right after
            f.write(json.dumps(line) + "\n")
    delay = float(os.environ.get("FAKE_CALL_DELAY") or 0)
    if delay:
        time.sleep(delay)


def digest(messages: Sequence[BaseMessage]) -> str:
    """What a request asked: its messages' types, texts and tool calls, hashed."""
    parts = [[m.type, m.content, [(c["name"], c["args"]) for c in getattr(m, "tool_calls", None) or []]] for m in messages]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


class ScriptedModel(BaseChatModel):
    """A chat model answering ``script(messages)`` (an ``AIMessage``), each call paid in the ledger."""

    script: Callable[[list[BaseMessage]], AIMessage]
    model_name: str = "scripted-model"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        paid("model", digest(messages))
        reply = self.script(messages)
        n = sum(len(str(m.content)) for m in messages)
        reply.usage_metadata = {"input_tokens": n // 4 + 1, "output_tokens": len(str(reply.content)) // 4 + 1,
                                "total_tokens": n // 4 + len(str(reply.content)) // 4 + 2}
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Sequence[Any], **kw: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kw)


def answer_to(question: str) -> str:
    """The human's answer to ``question`` (a test writes the same)."""
    return f"approved ({hashlib.sha256(question.encode()).hexdigest()[:6]})"


def ask(question: str, timeout: float = 60.0) -> str:
    """The human's answer: at once, or through ``ANSWERS_DIR`` (waiting for the answer file, up to ``timeout`` s)."""
    folder = os.environ.get("ANSWERS_DIR")
    if not folder:
        return answer_to(question)
    ident = hashlib.sha256(question.encode()).hexdigest()[:12]
    asked, answer = Path(folder, f"{ident}.asked"), Path(folder, f"{ident}.answer")
    tmp = asked.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"question": question, "pid": os.getpid()}))
    tmp.replace(asked)  # whole or absent: the test reads the question it answers
    deadline = time.monotonic() + timeout
    while not answer.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer to {question!r} in {answer} after {timeout} s")
        time.sleep(0.005)  # a human answers in their own time: poll the file
    return answer.read_text()


def summary(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The final messages as JSON (what a clean and a resumed run must agree on)."""
    return [{"type": m.type, "content": m.content, "tool_calls": [c["name"] for c in getattr(m, "tool_calls", None) or []]}
            for m in messages]


def write_result(result: Any) -> None:
    """The result in ``RESULT_FILE`` (when set), for a test to compare."""
    if os.environ.get("RESULT_FILE"):
        with open(os.environ["RESULT_FILE"], "w") as f:
            json.dump(result, f)
