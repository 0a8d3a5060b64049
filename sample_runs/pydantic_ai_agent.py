"""A Pydantic AI research agent made durable with ``DurableAgent`` (offline: Pydantic AI's ``FunctionModel``).

Three model requests and three tool calls of two tools: the model asks ``search``, then ``fetch`` for two pages
at once (parallel tool calls), then answers with a ``Report`` (structured output). Every request and call is a
journaled step, so a crash is resumed without asking the model again::

    agent-supervisor supervise -- python sample_runs/pydantic_ai_agent.py

Test hooks (environment): ``MODEL_CALLS_FILE=<path>`` appends a line per model request actually made;
``CRASH_ONCE_FILE=<path>`` makes ``fetch`` crash the process hard (``os._exit(1)``) the first time, when the file
does not exist yet (it creates it first); ``RESULT_FILE=<path>`` receives the final report as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from supervisor import Run
from supervisor.integrations.pydantic_ai import DurableAgent


class Page(BaseModel):
    """What ``fetch`` returns (a pydantic model: served from the journal as a ``Page`` again)."""

    url: str
    words: int
    digest: str


class Report(BaseModel):
    """The agent's answer (its output type)."""

    topic: str
    sources: list[str]
    words: int


def fake_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A deterministic stand-in for a model: the next move follows from the tool results so far."""
    if path := os.environ.get("MODEL_CALLS_FILE"):
        with open(path, "a") as f:
            f.write(f"{len(messages)}\n")
    returns = [p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[TextPart("Let me search."), ToolCallPart("search", {"query": "durable agents"})])
    if len(returns) == 1:
        urls = returns[0].content
        return ModelResponse(parts=[ToolCallPart("fetch", {"url": u}) for u in urls])
    pages = [p.content for p in returns if p.tool_name == "fetch"]
    report = {"topic": "durable agents", "sources": [p.url for p in pages], "words": sum(p.words for p in pages)}
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, report)])


def build_agent() -> Agent[None, Report]:
    agent = Agent(FunctionModel(fake_model), output_type=Report, name="researcher")

    @agent.tool_plain
    def search(query: str) -> list[str]:
        """Search the web: the URLs of the best two pages."""
        return [f"https://example.invalid/{query.replace(' ', '-')}/{i}" for i in (1, 2)]

    @agent.tool_plain
    def fetch(url: str) -> Page:
        """Fetch a page."""
        if (path := os.environ.get("CRASH_ONCE_FILE")) and not os.path.exists(path):
            Path(path).touch()
            os._exit(1)  # a hard crash in the middle of a tool call: no cleanup, no journal record
        return Page(url=url, words=100 + len(url), digest=hashlib.sha256(url.encode()).hexdigest()[:12])

    return agent


PROMPT = "Write a short report on durable agents."


def research(run: Run) -> Report:
    """The agent's run, journaled in ``run``: its report."""
    result = DurableAgent(build_agent(), run).run_sync(PROMPT)
    return result.output


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="given by the supervisor on restarts (Run.open resumes anyway)")
    args = ap.parse_args()
    with Run.open(args.run_dir) as run:
        report = research(run).model_dump()
        if path := os.environ.get("RESULT_FILE"):
            Path(path).write_text(json.dumps(report))
        print(f"report: {json.dumps(report)}; replayed {len(run.replayed)} steps, ran {len(run.executed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
