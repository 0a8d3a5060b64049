"""An OpenAI Agents SDK agent that is only observed: ``JournalTracingProcessor(run)``, no ``durable``; offline.

The ``planner`` agent calls the function tool ``search``, then hands off to the ``writer`` agent, which answers.
Their model is :class:`TracedModel`, a fake ``Model`` that traces each call as the SDK's OpenAI chat model does (a
``generation`` span with the model's name and the call's token usage): the processor journals each span as a note
and each model call as a step with its tokens, so ``agent-supervisor status`` and the dashboard count them. The
agent is not durable: a restarted attempt runs it again from the start, and its calls are journaled anew.

    agent-supervisor supervise -- python sample_runs/openai_agents_observed.py

Environment, for the tests: ``LEDGER_FILE`` (a JSON line is appended per real model call, with its agent, attempt
and tokens), ``RESULT_FILE`` (the final output, as JSON), ``OBSERVED_DELAY`` (the longest pause of a model call, in
seconds: the tests kill the agent at random moments, some of them inside a call), ``HOLD_FILE`` (the writer's
call waits until this file exists: the tests let the run end when they have killed it enough).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agents
from agents import Agent, ModelResponse, Runner, Usage, function_tool
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.tracing import generation_span
from openai.types.responses.response_usage import InputTokensDetails

PROMPT = "Write a line about durable agents."


@function_tool
def search(topic: str) -> str:
    """Search notes on a topic."""
    return f"notes on {topic}: journal every step"


class TracedModel(Model):
    """A fake model whose answer depends only on its input; each call is a ``generation`` span with usage."""

    model = "traced-1"

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **_: Any) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        agent = (system_instructions or "").split("]", 1)[0].lstrip("[")
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if agent == "writer":
            out = [assistant_message(f"Durable, because: {outputs[0]['output'] if outputs else '?'}")]
        elif not outputs:
            out = [function_call("search", {"topic": "durable agents"}, call_id="call_search")]
        else:
            out = [function_call("transfer_to_writer", {}, call_id="call_handoff")]
        n_in = len(json.dumps(items, default=str)) // 4
        n_out = 11 * len(out)
        with generation_span(model=self.model, model_config={}) as span:
            hold = os.environ.get("HOLD_FILE")
            if agent == "writer" and hold and not os.path.exists(hold):
                Path(f"{hold}.{os.getpid()}").touch()  # says this process waits
            deadline = time.monotonic() + 120
            while agent == "writer" and hold and not os.path.exists(hold) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # held until the test lets the run end
            path = os.environ.get("LEDGER_FILE")
            if path:
                with open(path, "a") as f:
                    f.write(json.dumps({"kind": "observed", "agent": agent, "attempt": os.environ.get("AGENT_SUPERVISOR_ATTEMPT", "1"),
                                        "input_tokens": n_in, "output_tokens": n_out}) + "\n")
            delay = float(os.environ.get("OBSERVED_DELAY") or 0)
            if delay:
                await asyncio.sleep(random.uniform(0, delay))
            span.span_data.usage = {"requests": 1, "input_tokens": n_in, "output_tokens": n_out,
                                    "total_tokens": n_in + n_out,
                                    "input_tokens_details": {"cached_tokens": n_in // 3}}
            span.span_data.output = [o if isinstance(o, dict) else o.model_dump() for o in out]
        usage = Usage(requests=1, input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out,
                      input_tokens_details=InputTokensDetails(cached_tokens=n_in // 3, cache_write_tokens=0))
        return ModelResponse(output=list(out), usage=usage, response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        raise NotImplementedError("TracedModel does not stream")
        yield


def build_agent() -> Agent[Any]:
    """The planner, which hands off to the writer (neither durable)."""
    writer = Agent(name="writer", instructions="[writer] Write the answer.", model=TracedModel())
    return Agent(name="planner", instructions="[planner] Search, then hand off to the writer.", model=TracedModel(),
                 tools=[search], handoffs=[writer])


def main() -> int:
    from supervisor import Run
    from supervisor.integrations.openai_agents import JournalTracingProcessor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="given by supervise on restarts (the agent runs again)")
    args = ap.parse_args()
    with Run.open(args.run_dir) as run:
        agents.set_trace_processors([JournalTracingProcessor(run)])  # instead of the exporter: nothing leaves
        agents.set_tracing_disabled(False)
        try:
            result = Runner.run_sync(build_agent(), PROMPT)
        finally:
            agents.set_tracing_disabled(True)
        print(f"openai_agents_observed: {result.final_output}")
    target = os.environ.get("RESULT_FILE")
    if target:
        Path(target).write_text(json.dumps(result.final_output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
