"""A Pydantic AI agent that delegates to another agent from a tool, made durable (offline: ``FunctionModel``).

The ``desk`` agent asks ``--parallel`` experts at a time (parallel tool calls of ``ask_expert``), ``--rounds``
times; the tool runs the ``expert`` agent (``await expert.run(topic, usage=ctx.usage)``, Pydantic AI's delegation
pattern), which looks two facts up with its ``lookup`` tool before it answers. With ``--wrap both`` the tool runs
the expert as a ``DurableAgent`` too; with ``--wrap outer`` only the desk is wrapped: the expert's run is
journaled all the same, inside the tool's step. Each model and tool call is a step, the expert's nested in the
tool's, so a crash is resumed without paying for a finished call again, and the run's usage counts the expert's
calls as a clean run does::

    agent-supervisor supervise -- python sample_runs/pydantic_ai_delegate.py --wrap outer --parallel 1

(``--parallel 2``, the default, resumes after a crash too, but a run cut off again and again can stop with a
divergence: the SDK's numbering of the nested steps of steps that run at once, not this adapter's; see the README.)

The fake models are named like real ones (``openai:gpt-4o``, ``openai:gpt-4o-mini``): their calls are priced.

Test hooks (environment): ``LEDGER_FILE=<path>`` appends a JSON line per call actually made (``call``, the step's
idempotency ``key``, the ``attempt``); ``RESULT_FILE=<path>`` receives the output and the usage as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

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


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)]


def build(run: Run, *, wrap: str = "both", rounds: int = 3, delay: float = 0.0, parallel: int = 2) -> Agent[None, str]:
    """The desk agent, its calls paid in ``LEDGER_FILE``; ``wrap``: ``both`` or ``outer`` (see the module)."""
    ledger = Ledger(run, os.environ.get("LEDGER_FILE"))

    # Each call is named in the ledger as a test names its step: a model call by the response's
    # provider_response_id (which the journal records), a tool call by its name and arguments.
    async def desk_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answers = returns(messages)
        asked = len(answers)
        call = f"desk:model:{asked}"
        ledger.paid(call)
        await asyncio.sleep(delay)
        if asked < parallel * rounds:
            asks = [ToolCallPart("ask_expert", {"topic": f"topic {asked + i}"}) for i in range(parallel)]
            return ModelResponse(parts=asks, provider_response_id=call)
        return ModelResponse(parts=[TextPart("; ".join(str(a.content) for a in answers))], provider_response_id=call)

    async def expert_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        facts = returns(messages)
        topic = str(getattr(messages[0].parts[-1], "content", ""))  # the user prompt
        call = f"expert:model:{topic}:{len(facts)}"
        ledger.paid(call)
        await asyncio.sleep(delay)
        if len(facts) < 2:
            return ModelResponse(parts=[ToolCallPart("lookup", {"topic": topic, "n": len(facts)})], provider_response_id=call)
        return ModelResponse(parts=[TextPart(" & ".join(str(f.content) for f in facts))], provider_response_id=call)

    expert = Agent(FunctionModel(expert_model, model_name="openai:gpt-4o-mini"), name="expert")

    @expert.tool_plain
    async def lookup(topic: str, n: int) -> str:
        """A fact about the topic."""
        ledger.paid(f"lookup:{n}:{topic}")
        await asyncio.sleep(delay / 2)
        return f"{topic} fact {n}"

    desk = Agent(FunctionModel(desk_model, model_name="openai:gpt-4o"), name="desk")

    @desk.tool
    async def ask_expert(ctx: RunContext[Any], topic: str) -> str:
        """Ask the expert agent about a topic."""
        ledger.paid(f"ask_expert:{topic}")
        agent = DurableAgent(expert, run) if wrap == "both" else expert
        result = await agent.run(topic, usage=ctx.usage)
        return result.output

    return desk


def report(result: Any) -> dict[str, Any]:
    """What a test compares between runs: the output and the usage."""
    u = result.usage
    return {"output": result.output, "requests": u.requests, "tool_calls": u.tool_calls,
            "input_tokens": u.input_tokens, "output_tokens": u.output_tokens}


async def desk_run(
    run: Run, *, wrap: str = "both", rounds: int = 3, delay: float = 0.0, parallel: int = 2
) -> dict[str, Any]:
    """The desk's run, journaled in ``run``: its :func:`report`."""
    desk = build(run, wrap=wrap, rounds=rounds, delay=delay, parallel=parallel)
    result = await DurableAgent(desk, run).run("What do the experts say?")
    return report(result)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="given by the supervisor on restarts (Run.open resumes anyway)")
    ap.add_argument("--wrap", choices=("both", "outer"), default="both")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of delegations")
    ap.add_argument("--parallel", type=int, default=2, help="experts asked at once in a round")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds each model call takes")
    args = ap.parse_args()
    with Run.open(args.run_dir) as run:
        out = asyncio.run(desk_run(run, wrap=args.wrap, rounds=args.rounds, delay=args.delay, parallel=args.parallel))
        if path := os.environ.get("RESULT_FILE"):
            Path(path).write_text(json.dumps(out))
        print(f"{json.dumps(out)}; replayed {len(run.replayed)} steps, ran {len(run.executed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
