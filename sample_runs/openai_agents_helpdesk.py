"""A help-desk conversation on the OpenAI Agents SDK, made durable with ``durable(agent, run)``; offline.

Each turn of the conversation (a ``SQLiteSession`` keeps its history) is streamed (``Runner.run_streamed``) by
the ``support`` agent, whose model streams responses without an id. An input guardrail runs the guard agent
``Guardrail check`` with ``Runner.run`` (as the SDK's documentation shows), in parallel with the first model call;
``support`` asks the ``researcher`` agent through ``researcher.as_tool(...)``, and ``researcher`` calls the function
tool ``lookup``. The models are :class:`DeskModel`, a fake ``Model`` whose answers depend only on its input (the
answer counts the user turns in the history: a session that lost or doubled a turn answers otherwise).

    agent-supervisor supervise -- python sample_runs/openai_agents_helpdesk.py [--observe]

With ``--observe`` the agent of ``openai_agents_observed.py`` runs beside the conversation, not durable, seen only by
``JournalTracingProcessor``: its model calls are steps with their tokens, made anew by each attempt.

Environment, for the tests: ``LEDGER_FILE`` (a JSON line is appended per real model call and per real tool
call), ``RESULT_FILE`` (the answers and the session's final history, as JSON), ``SESSION_DB`` (the session's
SQLite file; default: ``session.db`` beside the run directory), ``DESK_DELAY`` (the longest pause of a model or tool
call, in seconds: the tests kill the agent at random moments, some of them inside a call), ``HOLD_FILE`` (the last
turn waits until this file exists: the tests let the run end when they have killed it enough).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from types import ModuleType
from typing import Any

import agents
from agents import (
    Agent,
    GuardrailFunctionOutput,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    input_guardrail,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses.response_usage import InputTokensDetails
from pydantic import BaseModel

QUESTIONS = ["my printer is offline", "the printer still says offline", "now it prints blank pages",
             "thanks, and the scanner?"]


def _ledger(entry: dict[str, Any]) -> None:
    path = os.environ.get("LEDGER_FILE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


async def _pause() -> None:
    delay = float(os.environ.get("DESK_DELAY") or 0)
    if delay:
        await asyncio.sleep(random.uniform(0, delay))


async def _hold() -> None:
    hold = os.environ.get("HOLD_FILE")
    if hold and not os.path.exists(hold):
        Path(f"{hold}.{os.getpid()}").touch()  # says this process waits
    deadline = time.monotonic() + 120
    while hold and not os.path.exists(hold) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # held until the test lets the run end


@function_tool
async def lookup(q: str) -> str:
    """Look a problem up in the knowledge base."""
    _ledger({"kind": "tool", "tool": "lookup", "q": q})
    await _pause()
    return f"kb:{hashlib.sha256(q.encode()).hexdigest()[:6]}"


class Verdict(BaseModel):
    """The guard's answer."""

    homework: bool


def _items(input: Any) -> list[Any]:
    return [{"role": "user", "content": input}] if isinstance(input, str) else list(input)


def _after_last_user(items: list[Any]) -> tuple[str, list[str]]:
    """The last user message's text and the tool outputs after it."""
    text, outputs = "", []
    for i in items:
        if not isinstance(i, dict):
            continue
        if i.get("role") == "user":
            content = i.get("content")
            text, outputs = (content if isinstance(content, str) else json.dumps(content)), []
        elif i.get("type") == "function_call_output":
            outputs.append(str(i.get("output")))
    return text, outputs


class DeskModel(Model):
    """A fake model: what it answers depends only on the instructions and the input (never on the order of calls)."""

    model = "desk-1"

    async def _step(self, system_instructions: str | None, input: Any) -> ModelStep:
        items = _items(input)
        digest = hashlib.sha256(json.dumps([system_instructions, items], sort_keys=True, default=str).encode())
        agent = (system_instructions or "").split("]", 1)[0].lstrip("[")
        _ledger({"kind": "model", "agent": agent, "request": digest.hexdigest()[:12]})
        await _pause()
        text, outputs = _after_last_user(items)
        turns = sum(1 for i in items if isinstance(i, dict) and i.get("role") == "user")
        key = digest.hexdigest()[:8]
        if agent == "guard":
            out = [assistant_message(json.dumps({"homework": "homework" in text}))]
        elif agent == "researcher":
            out = ([function_call("lookup", {"q": text}, call_id=f"call_lookup_{key}")] if not outputs
                   else [assistant_message(f"found {outputs[-1]}")])
        else:
            out = ([function_call("research", {"input": text}, call_id=f"call_research_{key}")] if not outputs
                   else [assistant_message(f"answer to turn {turns}: {outputs[-1]}")])
        n_in = len(json.dumps(items, default=str)) // 4
        usage = Usage(requests=1, input_tokens=n_in, output_tokens=7, total_tokens=n_in + 7,
                      input_tokens_details=InputTokensDetails(cached_tokens=n_in // 2, cache_write_tokens=0))
        # no response id: the SDK allows a model that gives none (a response served from the journal keeps it so)
        return ModelStep(output=out, usage=usage, response_id=None)

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **kw: Any) -> Any:
        step = await self._step(system_instructions, input)
        return await ScriptedModel([step]).get_response(system_instructions, input, model_settings, tools,
                                                        output_schema, handoffs, tracing, **kw)

    async def stream_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,  # type: ignore[override]
                              output_schema: Any, handoffs: Any, tracing: Any, **kw: Any) -> AsyncIterator[Any]:
        step = await self._step(system_instructions, input)
        async for ev in ScriptedModel([step]).stream_response(system_instructions, input, model_settings, tools,
                                                              output_schema, handoffs, tracing, **kw):
            yield ev


guard_agent = Agent(name="Guardrail check", instructions="[guard] Is the user asking for homework help?",
                    model=DeskModel(), output_type=Verdict)


@input_guardrail
async def no_homework(ctx: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
    """The SDK's documented pattern: a guard agent run with ``Runner.run`` inside the guardrail."""
    result = await Runner.run(guard_agent, input, context=ctx.context)
    return GuardrailFunctionOutput(output_info=result.final_output, tripwire_triggered=result.final_output.homework)


def build_agent() -> Agent[Any]:
    """The plain help-desk agent (not durable)."""
    researcher = Agent(name="researcher", instructions="[researcher] Look the problem up, then say what you found.",
                       model=DeskModel(), tools=[lookup])
    return Agent(name="support", instructions="[support] Ask the researcher, then answer the user.",
                 model=DeskModel(), input_guardrails=[no_homework],
                 tools=[researcher.as_tool("research", "Research a problem in the knowledge base.")])


async def converse(agent: Agent[Any], session: SQLiteSession) -> list[str]:
    """The conversation: every question a streamed turn of ``agent`` on ``session``."""
    answers = []
    for q in QUESTIONS:
        if q == QUESTIONS[-1]:
            await _hold()
        result = Runner.run_streamed(agent, q, session=session)
        async for _ in result.stream_events():
            pass
        answers.append(str(result.final_output))
    return answers


def _observed_sample() -> ModuleType:
    """``openai_agents_observed.py`` beside this file (its agent, observed only, runs beside the conversation)."""
    path = Path(__file__).with_name("openai_agents_observed.py")
    spec = importlib.util.spec_from_file_location("openai_agents_observed", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # function_tool reads the module's annotations
    spec.loader.exec_module(mod)
    return mod


async def _with_observed(conversation: Awaitable[list[str]], observed: Agent[Any] | None,
                         prompt: str) -> tuple[list[str], Any]:
    if observed is None:
        return await conversation, None
    answers, result = await asyncio.gather(conversation, Runner.run(observed, prompt))
    return answers, result.final_output


def run_conversation(run_dir: Path | None, db: Path | None, *, observe: bool = False) -> tuple[list[str], list[Any], Any, Any]:
    """One process's whole conversation on the run ``run_dir``: the answers, the session's history, the observed
    agent's answer (``observe``: the agent of ``openai_agents_observed.py`` runs beside the conversation, not durable,
    seen by ``JournalTracingProcessor``; else ``None``) and the run."""
    from supervisor import Run
    from supervisor.integrations.openai_agents import JournalTracingProcessor, durable

    with Run.open(run_dir) as run:
        session = SQLiteSession("desk", db or run.run_dir.parent / f"{run.run_dir.name}.session.db")
        observed, prompt = None, ""
        if observe:
            sample = _observed_sample()
            observed, prompt = sample.build_agent(), sample.PROMPT
            agents.set_trace_processors([JournalTracingProcessor(run)])  # instead of the exporter: nothing leaves
            set_tracing_disabled(False)
        try:
            answers, seen = asyncio.run(_with_observed(converse(durable(build_agent(), run), session), observed, prompt))
            history = asyncio.run(session.get_items())
        finally:
            session.close()
            set_tracing_disabled(True)
    return answers, history, seen, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="given by supervise on restarts (the journal says what to resume)")
    ap.add_argument("--observe", action="store_true",
                    help="run the agent of openai_agents_observed.py beside the conversation, observed only")
    args = ap.parse_args()
    set_tracing_disabled(True)  # offline: the SDK's default exporter would send traces to OpenAI
    db = os.environ.get("SESSION_DB")
    answers, history, seen, run = run_conversation(args.run_dir, Path(db) if db else None, observe=args.observe)
    for a in answers:
        print(f"openai_agents_helpdesk: {a}")
    if seen is not None:
        print(f"openai_agents_helpdesk: observed agent: {seen}")
    print(f"openai_agents_helpdesk: replayed {len(run.replayed)} steps, ran {len(run.executed)}")
    target = os.environ.get("RESULT_FILE")
    if target:
        Path(target).write_text(json.dumps({"answers": answers, "history": history, "observed": seen}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
