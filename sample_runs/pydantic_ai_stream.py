"""A streaming Pydantic AI agent made durable (offline: ``FunctionModel`` with a stream function).

The ``scribe`` agent's model streams its answers (text in chunks, tool calls as argument deltas): it takes
``--notes`` notes with its ``note`` tool, one a request, then streams a summary. The run is consumed as a stream,
``--mode events`` (``run_stream_events``, the default), ``stream`` (``run_stream`` and ``stream_text``) or
``handler`` (``run`` with an ``event_stream_handler``). Each streamed model request is one journaled step, the
response recorded whole; the run gets it as a stream of its parts, live and on resume alike, so a resumed run
streams what a clean one does without asking the model again::

    agent-supervisor supervise -- python sample_runs/pydantic_ai_stream.py

Test hooks (environment): ``LEDGER_FILE=<path>`` appends a JSON line per call actually made (``call``, the step's
idempotency ``key``, the ``attempt``); ``RESULT_FILE=<path>`` receives the output, the usage and what was
streamed, as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from supervisor import Run
from supervisor.integrations.pydantic_ai import DurableAgent


class Ledger:
    """The calls actually made, one JSON line each (``LEDGER_FILE``), with the step and the attempt that paid."""

    def __init__(self, run: Run, path: str | None) -> None:
        self.run = run
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if path else None

    def paid(self, call: str) -> None:
        if self.fd is not None:  # one write per line, O_APPEND: whole lines even when the process is killed
            line = {"call": call, "key": self.run.key, "attempt": self.run.attempt}
            os.write(self.fd, (json.dumps(line) + "\n").encode())


def build(run: Run, *, notes: int = 4, delay: float = 0.0) -> Agent[None, str]:
    """The scribe agent, its calls paid in ``LEDGER_FILE``."""
    ledger = Ledger(run, os.environ.get("LEDGER_FILE"))

    async def scribe_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        taken = [p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)]
        n = len(taken)
        # named in the ledger as a test names its step: by the tool call id it streams (note-<n>), else "final"
        ledger.paid(f"scribe:model:{n if n < notes else 'final'}")
        await asyncio.sleep(delay)
        if n < notes:
            yield {0: DeltaToolCall(name="note", tool_call_id=f"note-{n}")}
            yield {0: DeltaToolCall(json_args='{"n": ')}
            yield {0: DeltaToolCall(json_args=f"{n}}}")}
            return
        for word in ("Summary:", *(str(p.content) for p in taken)):
            yield word + " "

    scribe = Agent(FunctionModel(stream_function=scribe_stream, model_name="openai:gpt-4o"), name="scribe")

    @scribe.tool_plain
    async def note(n: int) -> str:
        """Take note ``n``."""
        ledger.paid(f"note:{n}")
        await asyncio.sleep(delay / 2)
        return f"note{n}"

    return scribe


def seen(event: object) -> str | None:
    """An event as a test compares it (without its times and ids), ``None`` for one it leaves out."""
    if isinstance(event, PartStartEvent):
        part = event.part
        return f"start:{part.part_kind}:{part.content if isinstance(part, TextPart) else getattr(part, 'tool_name', '')}"
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return f"delta:{event.delta.content_delta}"
    if isinstance(event, FunctionToolCallEvent):
        return f"call:{event.part.tool_name}:{event.part.args_as_json_str()}"
    if isinstance(event, FunctionToolResultEvent):
        return f"result:{event.part.content}"
    return None


async def scribe_run(run: Run, *, mode: str = "events", notes: int = 4, delay: float = 0.0) -> dict[str, Any]:
    """The scribe's run, journaled in ``run`` and consumed as ``mode`` says: output, usage and what it streamed."""
    durable = DurableAgent(build(run, notes=notes, delay=delay), run)
    prompt = "Take your notes, then sum them up."
    streamed: list[str] = []
    if mode == "events":
        async with durable.run_stream_events(prompt) as events:
            async for event in events:
                if (s := seen(event)) is not None:
                    streamed.append(s)
            result = events.result
    elif mode == "stream":
        async with durable.run_stream(prompt) as response:
            async for text in response.stream_text(delta=True):
                streamed.append(text)
            output = await response.get_output()
            usage = response.usage
        return {"output": output, "requests": usage.requests, "tool_calls": usage.tool_calls, "streamed": streamed}
    else:
        async def handler(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
            async for event in events:
                if (s := seen(event)) is not None:
                    streamed.append(s)

        result = await durable.run(prompt, event_stream_handler=handler)
    assert result is not None
    u = result.usage
    return {"output": result.output, "requests": u.requests, "tool_calls": u.tool_calls,
            "input_tokens": u.input_tokens, "output_tokens": u.output_tokens, "streamed": streamed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="given by the supervisor on restarts (Run.open resumes anyway)")
    ap.add_argument("--mode", choices=("events", "stream", "handler"), default="events")
    ap.add_argument("--notes", type=int, default=4)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds each model call takes")
    args = ap.parse_args()
    with Run.open(args.run_dir) as run:
        out = asyncio.run(scribe_run(run, mode=args.mode, notes=args.notes, delay=args.delay))
        if path := os.environ.get("RESULT_FILE"):
            Path(path).write_text(json.dumps(out))
        print(f"{out['output']!r}; replayed {len(run.replayed)} steps, ran {len(run.executed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
