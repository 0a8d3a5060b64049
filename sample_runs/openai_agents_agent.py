"""A research agent on the OpenAI Agents SDK, made durable with ``durable(agent, run)``; offline.

The model is ``ScriptedModel``, a fake ``agents.models.interface.Model``: three model calls (search,
then two parallel fetches, then the answer) and two function tools (``search``, ``fetch``). Nothing
reaches OpenAI: the SDK's trace export is switched off.

    agent-supervisor supervise -- python sample_runs/openai_agents_agent.py

Environment, for the tests: ``MODEL_CALLS_FILE`` (a line is appended per real model call),
``CRASH_ONCE_FILE`` (the first ``fetch`` creates it and crashes the process with ``os._exit(1)``
if it does not exist yet), ``RESULT_FILE`` (the final output is written there as JSON).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_usage import InputTokensDetails

PROMPT = "What makes an agent durable?"


@function_tool
def search(query: str) -> str:
    """Search the web; returns result URLs, one a line."""
    return "\n".join(f"https://example.invalid/{query.replace(' ', '-')}/{i}" for i in (1, 2))


@function_tool
def fetch(url: str) -> str:
    """Fetch a page; returns its text."""
    crash = os.environ.get("CRASH_ONCE_FILE")
    if crash and not os.path.exists(crash):
        Path(crash).write_text("crashed\n")
        print(f"openai_agents_agent: crashing hard in fetch({url})", file=sys.stderr, flush=True)
        os._exit(1)
    return f"page {url.rsplit('/', 1)[-1]}: journal every step ({hashlib.sha256(url.encode()).hexdigest()[:8]})"


class ScriptedModel(Model):
    """A deterministic fake model: what it answers depends only on the tool outputs in its input."""

    model = "scripted-research-1"

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **_: Any) -> ModelResponse:
        self.calls += 1
        counter = os.environ.get("MODEL_CALLS_FILE")
        if counter:
            with open(counter, "a") as f:
                f.write("call\n")
        items = [input] if isinstance(input, str) else list(input)
        outputs = [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        out: list[Any]
        if not outputs:
            out = [_call("search", {"query": "durable agents"}, "call_search_1")]
        elif len(outputs) == 1:
            urls = outputs[0].splitlines()
            out = [_call("fetch", {"url": u}, f"call_fetch_{i}") for i, u in enumerate(urls, 1)]
        else:
            text = "Answer: " + " | ".join(sorted(outputs[1:]))
            out = [ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                         content=[ResponseOutputText(type="output_text", text=text, annotations=[])])]
        n_in = len(json.dumps(items, default=str)) // 4
        usage = Usage(requests=1, input_tokens=n_in, output_tokens=20 * len(out), total_tokens=n_in + 20 * len(out),
                      input_tokens_details=InputTokensDetails(cached_tokens=n_in // 2, cache_write_tokens=0))
        return ModelResponse(output=out, usage=usage, response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        raise NotImplementedError("ScriptedModel does not stream")
        yield


def _call(name: str, args: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", name=name, arguments=json.dumps(args), call_id=call_id,
                                    id=f"fc_{call_id}", status="completed")


def build_agent(model: Model | None = None) -> Agent[Any]:
    """The plain agent (not durable): the benchmark runs it bare too."""
    return Agent(name="researcher", instructions="Search, fetch the results, answer.",
                 model=model or ScriptedModel(), tools=[search, fetch])


def main() -> int:
    from supervisor import Run
    from supervisor.integrations.openai_agents import durable

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="given by supervise on restarts (the journal says what to resume)")
    args = ap.parse_args()
    set_tracing_disabled(True)  # offline: the SDK's default exporter would send traces to OpenAI
    with Run.open(args.run_dir) as run:
        result = Runner.run_sync(durable(build_agent(), run, provider="scripted"), PROMPT)
        print(f"openai_agents_agent: {result.final_output}")
        print(f"openai_agents_agent: replayed {len(run.replayed)} steps, ran {len(run.executed)}")
    target = os.environ.get("RESULT_FILE")
    if target:
        Path(target).write_text(json.dumps(result.final_output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
