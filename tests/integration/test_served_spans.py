"""Served steps do not look paid (issue 29): with the agent's own instrumentation on, a model call served from the
journal is not reported as a new call with tokens. Each framework's telemetry is read as its exporters would read
it: Pydantic AI's OpenTelemetry spans (an in-memory span exporter), the OpenAI Agents SDK's trace spans (a trace
processor, what OpenInference and logfire translate), and LangChain's callbacks (a tracer, what LangSmith,
OpenInference and Langfuse build their spans from)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents
import pytest
from agents import Agent, Runner
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tracing import GenerationSpanData, TracingProcessor
from agents.usage import Usage
from langchain_core.messages import HumanMessage
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run as LangChainRun
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

from supervisor import Run
from supervisor.integrations.openai_agents import durable
from supervisor.integrations.pydantic_ai import DurableAgent

from ..conftest import ROOT

sys.path.insert(0, str(ROOT / "sample_runs"))
import langgraph_agent

SERVED = "agent_supervisor.served"


@pytest.fixture(autouse=True)
def _close_loops() -> Iterator[None]:
    """``run_sync`` leaves its event loop set and open: close it (unclosed, it warns when collected)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running():
        loop.close()
    asyncio.set_event_loop(None)


def usage_of(spans: Any) -> list[tuple[str, int]]:
    return [(s.name, s.attributes["gen_ai.usage.input_tokens"]) for s in spans if "gen_ai.usage.input_tokens" in s.attributes]


@pytest.mark.timeout(30)
def test_pydantic_ai_reports_only_the_calls_it_paid_for_after_a_crash(tmp_path: Path) -> None:
    """A run failed in its tool after the first model call; resumed, the first call is served: its span is left
    out, the second (live) has its tokens, and the tokens over both attempts' spans are what was spent."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    broken = [True]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not [p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)]:
            return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"})], usage=RequestUsage(input_tokens=100, output_tokens=10))
        return ModelResponse(parts=[TextPart("sunny")], usage=RequestUsage(input_tokens=200, output_tokens=20))

    attempts = []
    for _ in range(2):
        agent = PydanticAgent(FunctionModel(model),
                              capabilities=[Instrumentation(InstrumentationSettings(tracer_provider=provider))])

        @agent.tool_plain
        def weather(city: str) -> str:
            if broken[0]:
                raise RuntimeError("the tool crashed")
            return f"sunny in {city}"

        with pytest.raises(RuntimeError) if broken[0] else contextlib.nullcontext(), Run.open(tmp_path / "run") as run:
            DurableAgent(agent, run).run_sync("weather?")
        broken[0] = False
        attempts.append(usage_of(exporter.get_finished_spans()))
        exporter.clear()
    assert attempts == [[("chat function:model:", 100)], [("chat function:model:", 200)]]


class Generations(TracingProcessor):
    """The OpenAI Agents SDK's model-call spans (``generation``), as a trace exporter would receive them."""

    def __init__(self) -> None:
        self.usage: list[Any] = []

    def on_trace_start(self, trace: Any) -> None: ...
    def on_trace_end(self, trace: Any) -> None: ...
    def on_span_start(self, span: Any) -> None: ...
    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...

    def on_span_end(self, span: Any) -> None:
        if isinstance(span.span_data, GenerationSpanData):
            self.usage.append(span.span_data.usage)


@pytest.mark.timeout(30)
def test_openai_agents_served_calls_make_no_model_call_spans(tmp_path: Path) -> None:
    """A served call does not reach the model, whose span it is: the resumed run's trace has none."""
    seen = Generations()
    agents.set_trace_processors([seen])
    agents.set_tracing_disabled(False)
    counts = []
    try:
        for _ in range(2):
            model = ScriptedModel([ModelStep(output=[function_call("noop", {}, call_id="c1")]),
                                   ModelStep(output=[assistant_message("done")])],
                                  emit_traces=True, default_usage=Usage(requests=1, input_tokens=50, output_tokens=5))

            @agents.function_tool
            def noop() -> str:
                """Do nothing."""
                return "ok"

            with Run.open(tmp_path / "run") as run:
                Runner.run_sync(durable(Agent(name="a", model=model, tools=[noop]), run, provider="scripted"), "go")
            counts.append(len(seen.usage))
            seen.usage.clear()
    finally:
        agents.set_tracing_disabled(True)
        agents.set_trace_processors([])
    assert counts == [2, 0]


class LlmRuns(BaseTracer):
    """What LangChain's tracers are given at the end of each model call."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[str] = []

    def _persist_run(self, run: LangChainRun) -> None:
        pass

    def _on_llm_end(self, run: LangChainRun) -> None:
        self.outputs.append(json.dumps(run.outputs, default=str))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_langgraph_served_calls_reach_tracers_marked_and_without_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """The callbacks see a served call marked and without tokens; the graph gets the message as recorded."""
    monkeypatch.setenv("MODEL_CALLS_FILE", str(tmp_path / "calls"))
    runs = []
    for _ in range(2):
        tracer = LlmRuns()
        with Run.open(tmp_path / "run") as run:
            graph = langgraph_agent.build_graph(run, None)
            inp = {"messages": [HumanMessage(langgraph_agent.PROMPT)]}
            config: Any = {"callbacks": [tracer]}
            state = asyncio.run(graph.ainvoke(inp, config)) if use_async else graph.invoke(inp, config)
        runs.append((tracer.outputs, state["messages"]))
    (live, first), (served, second) = runs
    assert len(live) == len(served) == 3
    assert all("usage_metadata" in o and SERVED not in o for o in live)
    assert all("usage" not in o and '"agent_supervisor.served": true' in o for o in served)
    def usage(messages: list[Any]) -> list[Any]:
        return [getattr(m, "usage_metadata", None) for m in messages]

    assert usage(second) == usage(first)  # the graph's state as live
    assert [m.response_metadata for m in second] == [m.response_metadata for m in first]
